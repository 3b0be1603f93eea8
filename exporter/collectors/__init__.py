"""Collectors: one module per area, each turning GPU readings into fresh metric families."""
