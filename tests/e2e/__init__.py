"""End-to-end alert drills: real exporter, trainer, Prometheus and Alertmanager on loopback."""
