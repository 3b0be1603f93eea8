"""HTTP routes of the exporter, one small router per concern."""
