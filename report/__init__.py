"""mirrorwatch-report: why a run was slower than it should have been, from Prometheus alone."""
