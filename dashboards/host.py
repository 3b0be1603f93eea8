"""The GPU host dashboard: every GPU of one host, from utilisation down to links and errors."""

from __future__ import annotations

from typing import Any

from dashboards.host_gpus import by_gpu, thermal_row, throttle_row, utilisation_row
from dashboards.host_links import errors_row, links_row
from dashboards.host_processes import processes_row
from dashboards.kinds import (
    alerts_table,
    amount_series,
    event_counts,
    up_down_stat,
    up_down_timeline,
)
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
    OK_FAILED,
    PanelSpec,
    Query,
    instant_table,
    organize,
    stat_panel,
    table_panel,
)
from dashboards.selectors import GPU, HOST, RUN, firing_alerts, increase
from dashboards.variables import standard_variables
from dashboards.why import host_causes, why_row
from mirrorwatch.alerts import training_queries
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import TARGET_KEY
from mirrorwatch.contract.metrics import (
    EXPORTER_BUILD_INFO,
    EXPORTER_COLLECTOR_DURATION_SECONDS,
    EXPORTER_COLLECTOR_SUCCESS,
    EXPORTER_EXPECTED_GPUS,
    EXPORTER_GPUS,
    EXPORTER_INGEST_REJECTED_TOTAL,
    GPU_UP,
    UP,
)

TITLE = "GPU host"


def overview_row(t: Thresholds) -> Row:
    return Row(
        "Overview",
        [
            stat_panel(
                PanelSpec(
                    "GPUs seen",
                    "GPUs the exporter sees now, and how many the host should have "
                    "(--expected-gpus; 0 when not set). Fewer seen than expected: GpuMissing, "
                    "a GPU fell off the bus or was not detected at boot.",
                    "none",
                    [
                        Query(HOST(EXPORTER_GPUS), "{{instance}} seen"),
                        Query(HOST(EXPORTER_EXPECTED_GPUS), "{{instance}} expected"),
                    ],
                    width=4,
                    height=5,
                ),
                background=False,
            ),
            up_down_stat(
                "GPU up",
                f"Whether each GPU answers NVML. Down (red) for {t.GpuLost.hold_in_words}: "
                "GpuLost; look for XID 79 in XID errors and `dmesg`.",
                [by_gpu(GPU_UP, legend="{{instance}}")],
                width=5,
            ),
            up_down_stat(
                "Backend up",
                "Whether the exporter's GPU backend (NVML, or the simulator) is usable. "
                "Down: no GPU series at all; MirrorwatchNvmlUnavailable, see the exporter's "
                "/readyz for the reason.",
                [Query(HOST(UP), "{{instance}}")],
                width=3,
            ),
            alerts_table(
                "Alerts firing now on this host. Empty is good; each alert's runbook_url "
                "explains what to check.",
                firing_alerts(),
                width=12,
                height=5,
                hide=["alertstate", "job", "uuid"],
                order=["alertname", "severity", "instance", "gpu"],
            ),
            table_panel(
                PanelSpec(
                    "Training runs",
                    "Training runs that push telemetry to this host's exporter, with their "
                    "model and strategy, and whether each worker is still active (0 after "
                    "MIRRORWATCH_RUN_TTL without a push). Open one in Training balance.",
                    "none",
                    [instant_table(training_queries.training_runs(RUN))],
                    width=24,
                    height=5,
                    transformations=[
                        organize(
                            exclude=["Time", "__name__", "job"],
                            rename={"Value": "active"},
                            order=["instance", "run", "worker", "model", "strategy", "active"],
                        )
                    ],
                )
            ),
        ],
    )


def exporter_row() -> Row:
    per_collector = "{{instance}} {{collector}}"
    return Row(
        "Exporter health",
        [
            up_down_timeline(
                "Collector success",
                "Whether each collector of the exporter succeeded at its last scrape (green "
                "ok, red failed). A failing collector leaves its metrics out while the "
                "others still answer; the exporter log says why.",
                [Query(HOST(EXPORTER_COLLECTOR_SUCCESS), per_collector)],
                width=6,
                words=OK_FAILED,  # the description's words, not up/down
            ),
            amount_series(
                "Collector duration",
                "How long each collector took at the last scrape. A slow collector makes "
                "scrapes slow; above the scrape timeout Prometheus gives up on the host.",
                "s",
                [Query(HOST(EXPORTER_COLLECTOR_DURATION_SECONDS), per_collector)],
                width=6,
            ),
            table_panel(
                PanelSpec(
                    "Exporter build",
                    "Exporter version, GPU backend (nvml or simulated) and NVIDIA driver "
                    "version per host: check the driver against the CUDA version your framework "
                    "was built for.",
                    "none",
                    [instant_table(HOST(EXPORTER_BUILD_INFO))],
                    width=6,
                    transformations=[organize(exclude=["Time", "Value", "__name__"])],
                )
            ),
            event_counts(
                "Ingest rejections",
                "Training telemetry pushes the exporter refused, by reason. unauthorized or "
                "forbidden: a token or network mismatch; invalid or malformed_json: a "
                "client bug; stale: late retries; over_limit: too many runs or workers.",
                [
                    Query(
                        f"sum by ({TARGET_KEY}, reason) "
                        f"({increase(HOST(EXPORTER_INGEST_REJECTED_TOTAL))})",
                        "{{instance}} {{reason}}",
                    )
                ],
                width=6,
                alarm=None,
            ),
        ],
    )


def dashboard(t: Thresholds) -> dict[str, Any]:
    return build(
        DashboardSpec(
            uid=GPU_HOST_UID,
            title=TITLE,
            description=(
                "Every GPU of one host: utilisation, memory, temperature, power, clocks, "
                "throttling, PCIe and NVLink, XID and ECC errors, topology and exporter health."
            ),
            variables=standard_variables(),
            rows=[
                overview_row(t),
                why_row(host_causes(GPU), "this host"),
                utilisation_row(t),
                thermal_row(t),
                throttle_row(t),
                processes_row(),
                links_row(t),
                errors_row(t),
                exporter_row(),
            ],
            links=[
                dashboard_link("Training balance", TRAINING_UID, "The selected run's balance"),
                dashboard_link("Fleet", FLEET_UID, "All hosts at a glance"),
            ],
            alert_annotation=firing_alerts(),
        )
    )
