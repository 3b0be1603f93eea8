"""Training telemetry ingest: the snapshot schema, the run store, auth and the training metrics."""
