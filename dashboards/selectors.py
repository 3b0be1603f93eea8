"""What a dashboard's queries select: Grafana's variables as label matchers, and its rate window.

The queries themselves come from the catalog (mirrorwatch.alerts.gpu_queries and its
siblings), the same ones the rules and the run report ask; a dashboard only says which series:
those of the `job` and `instance` variables, and of `gpu` and `run` where the panel is about
GPUs or a run.
"""

from __future__ import annotations

from mirrorwatch.alerts import firing, promql, training_queries
from mirrorwatch.alerts.promql import Select

# Every selector carries job and instance (the dashboard linter's rule), and host: behind agents
# hosts may share an instance, and only `host` selects one of them (dashboards.variables).
HOST = Select(('job=~"$job"', 'host=~"$host"', 'instance=~"$instance"'))
GPU = HOST.where('gpu=~"$gpu"')
RUN = HOST.where('run=~"$run"')
RUN_GPU = GPU.where('run=~"$run"')
RUN_MATCHER = 'run=~"$run"'

# Grafana's window for rate(): four scrape intervals at least (the data source's timeInterval).
RATE_INTERVAL = "$__rate_interval"
RATE_INTERVAL_SECONDS = "$__rate_interval_ms / 1000"


def rate(selector: str) -> str:
    return promql.rate(selector, RATE_INTERVAL)


def increase(selector: str) -> str:
    return promql.increase(selector, RATE_INTERVAL)


def of_run(expr: str) -> str:
    """Keep the GPU series of ``expr`` that belong to the selected run."""
    return training_queries.of_run(expr, RUN)


def firing_alerts() -> str:
    return firing.firing_alerts(HOST)


# Every per-GPU legend names the host too: the instance variable defaults to All, and two
# hosts would otherwise draw two series called "GPU 0".
PER_GPU = "GPU {{gpu}} {{instance}}"
