"""mirrorwatch's Grafana dashboards as code; `python -m dashboards.build` writes dashboards/json."""
