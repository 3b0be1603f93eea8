"""The Fleet dashboard: one row per GPU host, linking to its GPU host and training views."""

from __future__ import annotations

from typing import Any

from dashboards.kinds import against_limit, alerts_table, ratio_series
from dashboards.layout import (
    FLEET_UID,
    GPU_HOST_UID,
    TRAINING_UID,
    DashboardSpec,
    Row,
    build,
    dashboard_link,
)
from dashboards.panels import (
    MERGE,
    RED_FROM_ONE,
    PanelSpec,
    Query,
    ThresholdStyle,
    instant_table,
    organize,
    override,
    table_panel,
    time_series,
)
from dashboards.selectors import HOST, RUN, firing_alerts
from dashboards.variables import standard_variables
from mirrorwatch.alerts import firing, recorded
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import TARGET_KEY
from mirrorwatch.contract.metrics import (
    EXPORTER_GPUS,
    TRAINING_ACTIVE,
    UP,
)

TITLE = "Fleet"
# One row per host at a central store too: there `cluster` and `host` (the agents' external
# labels, deploy/fleet/) tell hosts apart whose exporters are all `localhost:9848`. On a
# single-host Prometheus both are absent and the rows are the same.
PER_HOST = f"by ({TARGET_KEY})"
HAS_INSTANCE = 'instance!=""'


def or_zero(expr: str) -> str:
    """``expr`` per host, and 0 for hosts where it has no series (a count of nothing)."""
    return f"{expr} or 0 * max {PER_HOST} ({HOST(UP)})"


def host_link(title: str, uid: str) -> dict[str, object]:
    return {
        "title": title,
        "url": (
            f"/d/{uid}?var-job=${{__data.fields.job}}&var-host=${{__data.fields.host}}"
            "&var-instance=${__data.fields.instance}"
            "&${datasource:queryparam}&${__url_time_range}"
        ),
    }


def hosts_table(t: Thresholds) -> Any:
    margin = t.GpuTemperatureNearSlowdown.margin_celsius
    columns = {
        "Value #A": "GPUs",
        "Value #B": "GPUs up",
        "Value #C": "mean utilisation",
        "Value #D": "max utilisation",
        "Value #E": "max temperature",
        "Value #F": "slowdown headroom",
        "Value #G": "slowed GPUs",
        "Value #H": "firing alerts",
        "Value #I": "active runs",
    }
    # The GPUs' columns read the per-host summary the rules record (mirrorwatch.fleet), one
    # series a host: asked over every GPU at each refresh they took 1.77 s at 4,096 GPUs.
    queries = [
        f"max {PER_HOST} ({HOST(EXPORTER_GPUS)})",
        HOST(recorded.HOST_GPUS_UP),
        HOST(recorded.HOST_UTIL_MEAN),
        HOST(recorded.HOST_UTIL_MAX),
        HOST(recorded.HOST_TEMPERATURE_MAX),
        HOST(recorded.HOST_SLOWDOWN_HEADROOM),
        HOST(recorded.HOST_SLOWED_GPUS),
        # Alerts of a host only: Watchdog (and an absent exporter) name no instance, and would
        # make a row of their own.
        or_zero(f"count {PER_HOST} ({firing.firing_alerts(HOST, HAS_INSTANCE)})"),
        or_zero(f"count {PER_HOST} ({RUN(TRAINING_ACTIVE)} == 1)"),
    ]
    return table_panel(
        PanelSpec(
            "Hosts",
            "One row per GPU host: GPUs seen and up, mean and max utilisation, the hottest GPU "
            "and the least headroom any GPU has to its slowdown temperature (red within "
            f"{margin:g} °C), how many GPUs are slowed (thermal, "
            "power or hardware), firing alerts and active "
            "training runs. Red cells need a look; click the instance for its GPU host "
            "dashboard.",
            "none",
            [instant_table(expr) for expr in queries],
            width=24,
            height=10,
            transformations=[
                MERGE,
                organize(
                    exclude=["Time"],
                    rename=columns,
                    order=["cluster", "host", "job", "instance", *columns.values()],
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
                                {"value": margin, "color": "green"},
                            ],
                        },
                    },
                ),
                *(
                    override(
                        column,
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
                    )
                    for column in ("slowed GPUs", "firing alerts")
                ),
            ],
        )
    )


def dashboard(t: Thresholds) -> dict[str, Any]:
    return build(
        DashboardSpec(
            uid=FLEET_UID,
            title=TITLE,
            description="Every GPU host at a glance, linking to each host's GPU host dashboard.",
            variables=standard_variables(),
            rows=[
                Row("At a glance", [hosts_table(t)]),
                Row(
                    "Over time",
                    [
                        ratio_series(
                            "Mean utilisation by host",
                            "Mean utilisation of each host's GPUs. A host that drops while "
                            "its runs are active has a problem worth opening.",
                            [Query(HOST(recorded.HOST_UTIL_MEAN), "{{instance}}")],
                        ),
                        against_limit(
                            "Hottest GPU by host",
                            "Temperature of the hottest GPU of each host, against the "
                            "slowdown threshold of the hottest GPU (dashed).",
                            "celsius",
                            [
                                Query(HOST(recorded.HOST_TEMPERATURE_MAX), "{{instance}}"),
                                Query(
                                    HOST(recorded.HOST_SLOWDOWN_THRESHOLD),
                                    "{{instance}} slowdown",
                                ),
                            ],
                            "slowdown$",
                            min_value=None,
                        ),
                        time_series(
                            PanelSpec(
                                "Slowed GPUs by host",
                                "How many GPUs of each host have a slowing clock-event reason "
                                "active (thermal, power cap, hardware slowdown). Open the host "
                                "for which reason.",
                                "none",
                                [Query(HOST(recorded.HOST_SLOWED_GPUS), "{{instance}}")],
                                width=8,
                                min_value=0,
                                decimals=0,
                                thresholds=RED_FROM_ONE,
                            ),
                            threshold_style=ThresholdStyle.DASHED,
                        ),
                        alerts_table(
                            "Every alert firing now across the selected hosts. Empty is "
                            "good; each alert's runbook_url explains what to check.",
                            firing_alerts(),
                            width=24,
                            height=8,
                            hide=["alertstate"],
                            order=["alertname", "severity", "job", "instance", "gpu"],
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
