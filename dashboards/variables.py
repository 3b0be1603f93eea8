"""The dashboards' data source and variables: datasource, job, host, instance, run and gpu."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.models import dashboard as models

from mirrorwatch.contract.metrics import (
    GPU_INFO,
    TRAINING_INFO,
    TRAINING_REPLICA_INFO,
    UP,
)

# The uid of the provisioned Prometheus data source (provisioning/datasources/); the
# `datasource` variable starts on it, and a user can switch to any other Prometheus.
DATASOURCE_UID = "mirrorwatch-prometheus"
DATASOURCE_NAME = "Prometheus"

# Every panel and query points at the `datasource` variable, never at a fixed data source,
# so the JSON needs no `${DS_...}` import inputs and works when provisioned from files.
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# The matchers of one host, as dashboards.selectors.HOST has them.
_HOST = 'job=~"$job", host=~"$host", instance=~"$instance"'
RUNS_QUERY = f"label_values({TRAINING_INFO}{{{_HOST}}}, run)"
HOST_GPUS_QUERY = f"label_values({GPU_INFO}{{{_HOST}}}, gpu)"
RUN_GPUS_QUERY = f'label_values({TRAINING_REPLICA_INFO}{{{_HOST}, run=~"$run"}}, gpu)'
# Behind per-host agents (deploy/fleet/) every exporter may be `localhost:9848` and only the
# agents' `host` label tells hosts apart; on one Prometheus no series has it. Its "All" is
# `.*`, which also matches a series without the label (PromQL: a matcher that matches the
# empty string selects series that lack the label), so the variable costs nothing there.
HOST_ALL = ".*"

Variable = dashboard_builders.DatasourceVariable | dashboard_builders.QueryVariable


def _all() -> models.VariableOption:
    return models.VariableOption(selected=True, text="All", value="$__all")


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(models.VariableOption(selected=True, text=DATASOURCE_NAME, value=DATASOURCE_UID))
    )


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    description: str,
    all_value: str = ".+",
) -> dashboard_builders.QueryVariable:
    """A label_values variable, refreshed when the time range changes."""
    variable = (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .description(description)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.NATURAL_ASC)
    )
    if multi:
        # `.+` rather than Grafana's default list of values: the regex stays short and
        # still matches series of hosts that appear after the variable was loaded.
        variable = variable.multi(True).include_all(True).all_value(all_value).current(_all())
    return variable


def standard_variables(
    *, gpu_query: str = HOST_GPUS_QUERY, one_run: bool = False
) -> list[Variable]:
    """The variables every mirrorwatch dashboard has, in this order."""
    return [
        datasource_variable(),
        query_variable(
            "job",
            "Job",
            f"label_values({UP}, job)",
            description="Prometheus scrape job(s) of the mirrorwatch exporters.",
        ),
        query_variable(
            "host",
            "Host",
            f'label_values({UP}{{job=~"$job"}}, host)',
            description="The agent's host label, where hosts write to a central store "
            "(docs/fleet.md); empty on a single Prometheus.",
            all_value=HOST_ALL,
        ),
        query_variable(
            "instance",
            "Instance",
            f'label_values({UP}{{job=~"$job", host=~"$host"}}, instance)',
            description="Exporter address: one GPU host (behind agents, pick the host above).",
        ),
        query_variable(
            "run",
            "Run",
            RUNS_QUERY,
            multi=not one_run,
            description="Training run, as named by the Keras callback (MIRRORWATCH_RUN).",
        ),
        query_variable(
            "gpu",
            "GPU",
            gpu_query,
            description="NVML index of the GPU, as nvidia-smi numbers it.",
        ),
    ]
