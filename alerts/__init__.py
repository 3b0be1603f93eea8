"""mirrorwatch's alerts: thresholds, the query catalog and the Prometheus rules built from them."""
