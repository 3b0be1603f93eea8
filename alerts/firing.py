"""The alerts firing now (Prometheus's ALERTS series), of a host or of a run."""

from __future__ import annotations

from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.training_queries import run_gpus
from mirrorwatch.contract.labels import UUID_KEY


def firing_alerts(s: Select, *more: str) -> str:
    return s("ALERTS", 'alertstate="firing"', *more)


def run_alerts(host: Select, run_matcher: str) -> str:
    """Alerts that name the selected run, and alerts on the GPUs the run reports."""
    own = firing_alerts(host, run_matcher)
    gpus = run_gpus(host.where(run_matcher))
    return f"{own} or ({firing_alerts(host)} and on ({UUID_KEY}) {gpus})"
