"""The Fleet dashboard: one row per GPU host, linking to its GPU host and training views."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode

from dashboards.common import (
    FLEET_UID,
    GPU_HOST_UID,
    HOST_GPUS_QUERY,
    MERGE,
    RUNS_QUERY,
    SLOWDOWN_REASONS,
    TRAINING_UID,
    DashboardSpec,
    Limits,
    PanelSpec,
    Query,
    Row,
    build,
    dashboard_link,
    firing_alerts,
    limit_line_override,
    organize,
    override,
    sel,
    standard_variables,
    steps,
    table_panel,
    time_series,
    value_text,
)

TITLE = "Fleet"
PER_HOST = "by (job, instance)"
SLOWDOWN = f'reason=~"{"|".join(SLOWDOWN_REASONS)}"'


def or_zero(expr: str) -> str:
    """``expr`` per host, and 0 for hosts where it has no series (a count of nothing)."""
    return f"{expr} or 0 * max {PER_HOST} ({sel('mirrorwatch_up')})"


def host_link(title: str, uid: str) -> dict[str, object]:
    return {
        "title": title,
        "url": (
            f"/d/{uid}?var-job=${{__data.fields.job}}&var-instance=${{__data.fields.instance}}"
            "&${datasource:queryparam}&${__url_time_range}"
        ),
    }


def hosts_table(limits: Limits) -> Any:
    util = sel("mirrorwatch_gpu_utilization_ratio", gpu=True)
    columns = {
        "Value #A": "GPUs",
        "Value #B": "GPUs up",
        "Value #C": "mean utilisation",
        "Value #D": "max utilisation",
        "Value #E": "max temperature",
        "Value #F": "slowdown headroom",
        "Value #G": "throttling",
        "Value #H": "firing alerts",
        "Value #I": "active runs",
    }
    slowdown = sel(
        "mirrorwatch_gpu_temperature_threshold_celsius", 'threshold="slowdown"', gpu=True
    )
    temperature = sel("mirrorwatch_gpu_temperature_celsius", gpu=True)
    queries = [
        f"max {PER_HOST} ({sel('mirrorwatch_exporter_gpus')})",
        f"sum {PER_HOST} ({sel('mirrorwatch_gpu_up', gpu=True)})",
        f"avg {PER_HOST} ({util})",
        f"max {PER_HOST} ({util})",
        f"max {PER_HOST} ({temperature})",
        f"min {PER_HOST} ({slowdown} - on (job, instance, gpu, uuid) {temperature})",
        f"max {PER_HOST} ({sel('mirrorwatch_gpu_clocks_event_active', SLOWDOWN, gpu=True)})",
        or_zero(f"count {PER_HOST} ({firing_alerts()})"),
        or_zero(f"count {PER_HOST} ({sel('mirrorwatch_training_active', run=True)} == 1)"),
    ]
    return table_panel(
        PanelSpec(
            "Hosts",
            "One row per GPU host: GPUs seen and up, mean and max utilisation, the hottest GPU "
            "and the least headroom any GPU has to its slowdown temperature (red within "
            f"{limits.temperature_margin_celsius:g} °C), whether any GPU is slowed (thermal, "
            "power or hardware), firing alerts and active "
            "training runs. Red cells need a look; click the instance for its GPU host "
            "dashboard.",
            "none",
            [Query(expr, "", instant=True, table=True) for expr in queries],
            width=24,
            height=10,
            transformations=[
                MERGE,
                organize(
                    exclude=["Time"],
                    rename=columns,
                    order=["job", "instance", *columns.values()],
                ),
            ],
            overrides=[
                override(
                    "instance",
                    {
                        "links": [
                            host_link("GPU host", GPU_HOST_UID),
                            host_link("Training balance", TRAINING_UID),
                        ]
                    },
                ),
                override(
                    "mean utilisation",
                    {"unit": "percentunit", "custom.cellOptions": {"type": "gauge"}, "max": 1},
                ),
                override(
                    "max utilisation",
                    {"unit": "percentunit", "custom.cellOptions": {"type": "gauge"}, "max": 1},
                ),
                override("max temperature", {"unit": "celsius"}),
                override(
                    "slowdown headroom",
                    {
                        "unit": "celsius",
                        "custom.cellOptions": {"type": "color-text"},
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [
                                {"value": None, "color": "red"},
                                {"value": limits.temperature_margin_celsius, "color": "green"},
                            ],
                        },
                    },
                ),
                override(
                    "throttling",
                    {
                        "custom.cellOptions": {"type": "color-background"},
                        "mappings": value_text({"1": ("yes", "red"), "0": ("no", "green")}),
                    },
                ),
                override(
                    "firing alerts",
                    {
                        "custom.cellOptions": {"type": "color-background"},
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [
                                {"value": None, "color": "green"},
                                {"value": 1, "color": "red"},
                            ],
                        },
                    },
                ),
            ],
        )
    )


def dashboard(limits: Limits) -> dict[str, Any]:
    util = sel("mirrorwatch_gpu_utilization_ratio", gpu=True)
    return build(
        DashboardSpec(
            uid=FLEET_UID,
            title=TITLE,
            description="Every GPU host at a glance, linking to each host's GPU host dashboard.",
            variables=standard_variables(
                run_query=RUNS_QUERY,
                gpu_query=HOST_GPUS_QUERY,
                one_run=False,
            ),
            rows=[
                Row("At a glance", [hosts_table(limits)]),
                Row(
                    "Over time",
                    [
                        time_series(
                            PanelSpec(
                                "Mean utilisation by host",
                                "Mean utilisation of each host's GPUs. A host that drops while "
                                "its runs are active has a problem worth opening.",
                                "percentunit",
                                [Query(f"avg {PER_HOST} ({util})", "{{instance}}")],
                                width=8,
                                min_value=0,
                                max_value=1,
                            ),
                            fill_opacity=0,
                        ),
                        time_series(
                            PanelSpec(
                                "Hottest GPU by host",
                                "Temperature of the hottest GPU of each host, against the "
                                "slowdown threshold of the hottest GPU (dashed).",
                                "celsius",
                                [
                                    Query(
                                        f"max {PER_HOST} "
                                        f"({sel('mirrorwatch_gpu_temperature_celsius', gpu=True)})",
                                        "{{instance}}",
                                    ),
                                    Query(
                                        f"min {PER_HOST} ("
                                        + sel(
                                            "mirrorwatch_gpu_temperature_threshold_celsius",
                                            'threshold="slowdown"',
                                            gpu=True,
                                        )
                                        + ")",
                                        "{{instance}} slowdown",
                                    ),
                                ],
                                width=8,
                                overrides=[limit_line_override("slowdown$")],
                            ),
                            fill_opacity=0,
                        ),
                        time_series(
                            PanelSpec(
                                "Slowed GPUs by host",
                                "How many GPUs of each host have a slowing clock-event reason "
                                "active (thermal, power cap, hardware slowdown). Open the host "
                                "for which reason.",
                                "none",
                                [
                                    Query(
                                        f"sum {PER_HOST} (max by (job, instance, gpu) ("
                                        + sel(
                                            "mirrorwatch_gpu_clocks_event_active",
                                            SLOWDOWN,
                                            gpu=True,
                                        )
                                        + "))",
                                        "{{instance}}",
                                    )
                                ],
                                width=8,
                                min_value=0,
                                decimals=0,
                                thresholds=steps((None, "green"), (1, "red")),
                            ),
                            threshold_style=GraphThresholdsStyleMode.DASHED,
                        ),
                        table_panel(
                            PanelSpec(
                                "Firing alerts",
                                "Every alert firing now across the selected hosts. Empty is "
                                "good; each alert's runbook_url explains what to check.",
                                "none",
                                [Query(firing_alerts(), "", instant=True, table=True)],
                                width=24,
                                height=8,
                                transformations=[
                                    organize(
                                        exclude=["Time", "Value", "__name__", "alertstate"],
                                        order=["alertname", "severity", "job", "instance", "gpu"],
                                    )
                                ],
                            )
                        ),
                    ],
                ),
            ],
            links=[
                dashboard_link("Training balance", TRAINING_UID, "One run's balance"),
                dashboard_link("GPU host", GPU_HOST_UID, "Every GPU of the selected host(s)"),
            ],
            alert_annotation=firing_alerts(),
        )
    )
