"""Training telemetry for mirrorwatch: the Keras callback and the instrumented training service."""
