"""The GPU host dashboard: every GPU of one host, from utilisation down to links and errors."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode

from dashboards.common import (
    ACTIVE_OFF,
    FLEET_UID,
    GPU_HOST_UID,
    HOST_GPUS_QUERY,
    RUNS_QUERY,
    TRAINING_UID,
    UP_DOWN,
    DashboardSpec,
    Limits,
    PanelSpec,
    Query,
    Row,
    build,
    dashboard_link,
    firing_alerts,
    increase,
    limit_line_override,
    organize,
    rate,
    sel,
    standard_variables,
    stat_panel,
    state_timeline,
    steps,
    table_panel,
    time_series,
)

TITLE = "GPU host"
GPU = "GPU {{gpu}}"


def overview_row() -> Row:
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
                        Query(sel("mirrorwatch_exporter_gpus"), "{{instance}} seen"),
                        Query(sel("mirrorwatch_exporter_expected_gpus"), "{{instance}} expected"),
                    ],
                    width=4,
                    height=5,
                ),
                background=False,
            ),
            stat_panel(
                PanelSpec(
                    "GPU up",
                    "Whether each GPU answers NVML. Down (red) for a minute: GpuLost; look for "
                    "XID 79 in XID errors and `dmesg`.",
                    "none",
                    [Query(sel("mirrorwatch_gpu_up", gpu=True), GPU + " {{instance}}")],
                    width=5,
                    height=5,
                    mappings=UP_DOWN,
                    thresholds=steps((None, "red"), (1, "green")),
                )
            ),
            stat_panel(
                PanelSpec(
                    "Backend up",
                    "Whether the exporter's GPU backend (NVML, or the simulator) is usable. "
                    "Down: no GPU series at all; MirrorwatchNvmlUnavailable, see the exporter's "
                    "/readyz for the reason.",
                    "none",
                    [Query(sel("mirrorwatch_up"), "{{instance}}")],
                    width=3,
                    height=5,
                    mappings=UP_DOWN,
                    thresholds=steps((None, "red"), (1, "green")),
                )
            ),
            table_panel(
                PanelSpec(
                    "Firing alerts",
                    "Alerts firing now on this host. Empty is good; each alert's runbook_url "
                    "explains what to check.",
                    "none",
                    [Query(firing_alerts(), "", instant=True, table=True)],
                    width=12,
                    height=5,
                    transformations=[
                        organize(
                            exclude=["Time", "Value", "__name__", "alertstate", "job", "uuid"],
                            order=["alertname", "severity", "instance", "gpu"],
                        )
                    ],
                )
            ),
            table_panel(
                PanelSpec(
                    "Training runs",
                    "Training runs that push telemetry to this host's exporter, with their "
                    "model and strategy, and whether each worker is still active (0 after "
                    "MIRRORWATCH_RUN_TTL without a push). Open one in Training balance.",
                    "none",
                    [
                        Query(
                            f"{sel('mirrorwatch_training_info', run=True)} "
                            "* on (job, instance, run, worker) group_left () "
                            f"{sel('mirrorwatch_training_active', run=True)}",
                            "",
                            instant=True,
                            table=True,
                        )
                    ],
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


def utilisation_row(limits: Limits) -> Row:
    return Row(
        "Utilisation and memory",
        [
            time_series(
                PanelSpec(
                    "Utilisation",
                    "Share of time each GPU ran a kernel. GPUs of one data-parallel run should "
                    "move together; one below the others is the slow replica (see the Training "
                    "balance dashboard).",
                    "percentunit",
                    [Query(sel("mirrorwatch_gpu_utilization_ratio", gpu=True), GPU)],
                    width=8,
                    min_value=0,
                    max_value=1,
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Memory used",
                    "Memory used as a share of each GPU's total. Above "
                    f"{limits.memory_used_ratio:.0%} for 15 minutes: GpuMemoryNearlyFull. "
                    "TensorFlow reserves nearly all memory up front, so for a training GPU the "
                    "Training balance dashboard's Replica memory is the truer figure.",
                    "percentunit",
                    [
                        Query(
                            f"{sel('mirrorwatch_gpu_memory_used_bytes', gpu=True)} "
                            f"/ {sel('mirrorwatch_gpu_memory_total_bytes', gpu=True)}",
                            GPU,
                        )
                    ],
                    width=8,
                    min_value=0,
                    max_value=1,
                    thresholds=steps((None, "green"), (limits.memory_used_ratio, "red")),
                ),
                threshold_style=GraphThresholdsStyleMode.DASHED,
            ),
            time_series(
                PanelSpec(
                    "Memory controller busy",
                    "Share of time each GPU's memory controller was reading or writing (not "
                    "capacity). High with low Utilisation: a memory-bound workload.",
                    "percentunit",
                    [Query(sel("mirrorwatch_gpu_memory_utilization_ratio", gpu=True), GPU)],
                    width=8,
                    min_value=0,
                    max_value=1,
                ),
                fill_opacity=0,
            ),
        ],
    )


def clock_panel(title: str, clock: str, description: str) -> timeseries.Panel:
    """One clock domain's current clock per GPU, with its maximum as a dashed line."""
    return time_series(
        PanelSpec(
            title,
            description,
            "hertz",
            [
                Query(sel("mirrorwatch_gpu_clock_hertz", f'clock="{clock}"', gpu=True), GPU),
                Query(
                    sel("mirrorwatch_gpu_clock_max_hertz", f'clock="{clock}"', gpu=True),
                    GPU + " max",
                ),
            ],
            width=8,
            min_value=0,
            overrides=[limit_line_override("max$")],
        ),
        fill_opacity=0,
    )


def thermal_row(limits: Limits) -> Row:
    return Row(
        "Temperature, power and clocks",
        [
            time_series(
                PanelSpec(
                    "Temperature",
                    "GPU temperature with each GPU's slowdown and shutdown thresholds (dashed). "
                    f"Within {limits.temperature_margin_celsius:g} °C of slowdown: "
                    "GpuTemperatureNearSlowdown; past it the GPU throttles. Busy GPUs more than "
                    f"{limits.temperature_spread_celsius:g} °C apart: GpuTemperatureSpread "
                    "(uneven airflow).",
                    "celsius",
                    [
                        Query(sel("mirrorwatch_gpu_temperature_celsius", gpu=True), GPU),
                        Query(
                            sel(
                                "mirrorwatch_gpu_temperature_threshold_celsius",
                                'threshold=~"slowdown|shutdown"',
                                gpu=True,
                            ),
                            GPU + " {{threshold}}",
                        ),
                    ],
                    width=8,
                    overrides=[limit_line_override("(slowdown|shutdown)$")],
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Fan speed",
                    "Fan speed as a share of maximum, per fan. Fans follow temperature; a fan "
                    "at 100 % with a hot GPU, or one fan far below its twin, points at a failing "
                    "fan. Empty on SXM and passively cooled boards (NVML cannot see their fans).",
                    "percentunit",
                    [
                        Query(
                            sel("mirrorwatch_gpu_fan_speed_ratio", gpu=True),
                            GPU + " fan {{fan}}",
                        )
                    ],
                    width=8,
                    min_value=0,
                    max_value=1,
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Power",
                    "Power draw against the enforced power limit (dashed). Draw pinned at the "
                    "limit means the GPU is power-capped (sw_power_cap in Throttle reasons); "
                    "different limits on GPUs of one run unbalance it.",
                    "watt",
                    [
                        Query(sel("mirrorwatch_gpu_power_watts", gpu=True), GPU),
                        Query(sel("mirrorwatch_gpu_power_limit_watts", gpu=True), GPU + " limit"),
                    ],
                    width=8,
                    min_value=0,
                    overrides=[limit_line_override("limit$")],
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Energy per hour",
                    "Energy each GPU uses per hour at the current rate (kWh per hour), from its "
                    "energy counter. Compare GPUs doing the same work: one using less is doing "
                    "less.",
                    "kwatth",
                    [
                        Query(
                            # J/s over an hour, in kWh (3.6e6 J).
                            rate("mirrorwatch_gpu_energy_joules_total", gpu=True)
                            + " * 3600 / 3.6e6",
                            GPU,
                        )
                    ],
                    width=8,
                    min_value=0,
                )
            ),
            clock_panel(
                "SM clock",
                "sm",
                "Streaming-multiprocessor clock against its maximum (dashed). A busy GPU well "
                "below its maximum is throttled: see Throttle reasons for why.",
            ),
            clock_panel(
                "Memory clock",
                "memory",
                "Memory clock against its maximum (dashed). It drops with hardware slowdown and "
                "power braking.",
            ),
        ],
    )


def throttle_row(limits: Limits) -> Row:
    return Row(
        "Throttling",
        [
            state_timeline(
                PanelSpec(
                    "Throttle reasons",
                    "Clock-event reasons per GPU, red while active. sw_thermal_slowdown / "
                    "hw_thermal_slowdown: heat (GpuThermalThrottling); sw_power_cap: the power "
                    "limit (GpuPowerCapped); hw_slowdown / hw_power_brake_slowdown: the board "
                    "cut clocks (GpuHardwareSlowdown); gpu_idle: nothing to do.",
                    "bool_on_off",
                    [
                        Query(
                            sel("mirrorwatch_gpu_clocks_event_active", gpu=True),
                            GPU + " {{reason}}",
                        )
                    ],
                    width=12,
                    height=12,
                    mappings=ACTIVE_OFF,
                    thresholds=steps((None, "transparent"), (1, "red")),
                )
            ),
            time_series(
                PanelSpec(
                    "Throttle time fraction",
                    "Share of time each GPU was held back, by reason, from the driver's "
                    "violation counters. Any thermal time is GpuThermalThrottling; power above "
                    f"the {limits.power_capped_fraction:g} line for 15 minutes is GpuPowerCapped. "
                    "low_utilization is idle time, not a fault.",
                    "percentunit",
                    [
                        Query(
                            rate("mirrorwatch_gpu_throttle_seconds_total", gpu=True),
                            GPU + " {{reason}}",
                        )
                    ],
                    width=12,
                    height=12,
                    min_value=0,
                    max_value=1,
                    thresholds=steps((None, "green"), (limits.power_capped_fraction, "orange")),
                ),
                threshold_style=GraphThresholdsStyleMode.DASHED,
                fill_opacity=0,
            ),
        ],
    )


def links_row(limits: Limits) -> Row:
    errors = limits.nvlink_errors_per_10m
    return Row(
        "PCIe and NVLink",
        [
            stat_panel(
                PanelSpec(
                    "PCIe link",
                    "PCIe link width and generation as a share of what the GPU supports: red "
                    "below 100 %. A busy GPU below its maximum for 10 minutes is "
                    "GpuPcieLinkDegraded (x8 slot, riser, seating). Idle GPUs drop the "
                    "generation on purpose to save power.",
                    "percentunit",
                    [
                        Query(
                            f"{sel('mirrorwatch_gpu_pcie_link_width', gpu=True)} "
                            f"/ {sel('mirrorwatch_gpu_pcie_link_width_max', gpu=True)}",
                            GPU + " width",
                        ),
                        Query(
                            f"{sel('mirrorwatch_gpu_pcie_link_generation', gpu=True)} "
                            f"/ {sel('mirrorwatch_gpu_pcie_link_generation_max', gpu=True)}",
                            GPU + " generation",
                        ),
                    ],
                    width=6,
                    thresholds=steps((None, "red"), (1, "green")),
                )
            ),
            time_series(
                PanelSpec(
                    "PCIe link history",
                    "PCIe link width (lanes) and generation against their maxima (dashed), over "
                    "time: when did the link retrain lower?",
                    "none",
                    [
                        Query(sel("mirrorwatch_gpu_pcie_link_width", gpu=True), GPU + " width"),
                        Query(
                            sel("mirrorwatch_gpu_pcie_link_width_max", gpu=True),
                            GPU + " width max",
                        ),
                        Query(
                            sel("mirrorwatch_gpu_pcie_link_generation", gpu=True),
                            GPU + " generation",
                        ),
                        Query(
                            sel("mirrorwatch_gpu_pcie_link_generation_max", gpu=True),
                            GPU + " generation max",
                        ),
                    ],
                    width=6,
                    min_value=0,
                    overrides=[limit_line_override("max$")],
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "PCIe traffic",
                    "Bytes per second over each GPU's PCIe link, both ways. Compare GPUs of one "
                    "run: a GPU moving less data than its peers is starved by the input "
                    "pipeline. Replays (bottom) mean a marginal link.",
                    "Bps",
                    [
                        Query(
                            rate("mirrorwatch_gpu_pcie_transmit_bytes_total", gpu=True),
                            GPU + " transmit",
                        ),
                        Query(
                            rate("mirrorwatch_gpu_pcie_receive_bytes_total", gpu=True),
                            GPU + " receive",
                        ),
                    ],
                    width=6,
                    min_value=0,
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "PCIe replays",
                    "PCIe replay events per interval. Replays are link-level retries: a steady "
                    "count points at a marginal slot, riser or card seating.",
                    "short",
                    [Query(increase("mirrorwatch_gpu_pcie_replays_total", gpu=True), GPU)],
                    width=6,
                    min_value=0,
                    thresholds=steps((None, "green"), (1, "orange")),
                )
            ),
            state_timeline(
                PanelSpec(
                    "NVLink status",
                    "State of every NVLink link (green up, red down). A link down for 5 "
                    "minutes is GpuNvlinkDown: its traffic falls back to PCIe. Empty on GPUs "
                    "without NVLink.",
                    "none",
                    [
                        Query(
                            sel("mirrorwatch_gpu_nvlink_up", gpu=True),
                            GPU + " link {{link}}",
                        )
                    ],
                    width=8,
                    mappings=UP_DOWN,
                    thresholds=steps((None, "red"), (1, "green")),
                )
            ),
            time_series(
                PanelSpec(
                    "NVLink traffic",
                    "Payload bytes per second over each GPU's NVLink links, summed over links. "
                    "All-reduce traffic of a data-parallel run: GPUs of one run should match.",
                    "Bps",
                    [
                        Query(
                            "sum by (instance, gpu) "
                            f"({rate('mirrorwatch_gpu_nvlink_transmit_bytes_total', gpu=True)})",
                            GPU + " transmit",
                        ),
                        Query(
                            "sum by (instance, gpu) "
                            f"({rate('mirrorwatch_gpu_nvlink_receive_bytes_total', gpu=True)})",
                            GPU + " receive",
                        ),
                    ],
                    width=8,
                    min_value=0,
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "NVLink errors",
                    "Replay, recovery and CRC errors of each NVLink link, as errors per 10 "
                    f"minutes at the current rate. Above {errors:g} for 5 minutes: "
                    "GpuNvlinkErrors; re-seat or replace the bridge.",
                    "short",
                    [
                        Query(
                            "sum by (instance, gpu, link) "
                            f"({rate('mirrorwatch_gpu_nvlink_errors_total', gpu=True)}) * 600",
                            GPU + " link {{link}}",
                        )
                    ],
                    width=8,
                    min_value=0,
                    thresholds=steps((None, "green"), (errors, "red")),
                ),
                threshold_style=GraphThresholdsStyleMode.DASHED,
            ),
        ],
    )


def xid_errors() -> str:
    # increase() misses a counter's first sample, and an XID series is born at its first
    # event, so new series in the window are added with their whole count.
    xid = sel("mirrorwatch_gpu_xid_errors_total", gpu=True)
    return (
        f"sum by (instance, gpu, xid) (increase({xid}[$__rate_interval]) "
        f"or ({xid} unless {xid} offset $__rate_interval))"
    )


def errors_row() -> Row:
    return Row(
        "Errors and topology",
        [
            time_series(
                PanelSpec(
                    "XID errors",
                    "XID events the driver reported per interval, by XID code. 48, 61, 62, "
                    "64, 74, 79, 94, 95, 119, 120 need attention now (critical GpuXidError); "
                    "13, 31, 43 are usually the application. Empty on a healthy host.",
                    "short",
                    [Query(xid_errors(), GPU + " XID {{xid}}")],
                    width=8,
                    min_value=0,
                    thresholds=steps((None, "green"), (1, "red")),
                ),
                threshold_style=GraphThresholdsStyleMode.OFF,
            ),
            time_series(
                PanelSpec(
                    "ECC errors",
                    "Corrected and uncorrected memory ECC errors per interval. Any uncorrected "
                    "error is GpuEccUncorrectable: the job on that GPU likely computed garbage; "
                    "drain and reset it. Empty when ECC is off.",
                    "short",
                    [
                        Query(
                            increase("mirrorwatch_gpu_ecc_errors_total", gpu=True),
                            GPU + " {{type}}",
                        )
                    ],
                    width=8,
                    min_value=0,
                    thresholds=steps((None, "green"), (1, "red")),
                )
            ),
            table_panel(
                PanelSpec(
                    "GPU pair topology",
                    "The fastest path between each pair of GPUs: nvlink, pcie_switch, "
                    "pcie_host_bridge, numa_node or cross_numa (as nvidia-smi topo -m). Replicas "
                    "on GPUs joined by NVLink or one PCIe switch scale best.",
                    "none",
                    [
                        Query(
                            sel("mirrorwatch_gpu_p2p_link_info", gpu=True),
                            "",
                            instant=True,
                            table=True,
                        )
                    ],
                    width=8,
                    transformations=[
                        organize(
                            exclude=["Time", "Value", "__name__", "job", "uuid"],
                            order=["instance", "gpu", "peer_gpu", "link"],
                        )
                    ],
                )
            ),
        ],
    )


def exporter_row() -> Row:
    return Row(
        "Exporter health",
        [
            state_timeline(
                PanelSpec(
                    "Collector success",
                    "Whether each collector of the exporter succeeded at its last scrape (green "
                    "ok, red failed). A failing collector leaves its metrics out while the "
                    "others still answer; the exporter log says why.",
                    "none",
                    [
                        Query(
                            sel("mirrorwatch_exporter_collector_success"),
                            "{{instance}} {{collector}}",
                        )
                    ],
                    width=6,
                    mappings=UP_DOWN,
                    thresholds=steps((None, "red"), (1, "green")),
                )
            ),
            time_series(
                PanelSpec(
                    "Collector duration",
                    "How long each collector took at the last scrape. A slow collector makes "
                    "scrapes slow; above the scrape timeout Prometheus gives up on the host.",
                    "s",
                    [
                        Query(
                            sel("mirrorwatch_exporter_collector_duration_seconds"),
                            "{{instance}} {{collector}}",
                        )
                    ],
                    width=6,
                    min_value=0,
                ),
                fill_opacity=0,
            ),
            table_panel(
                PanelSpec(
                    "Exporter build",
                    "Exporter version, GPU backend (nvml or simulated) and NVIDIA driver "
                    "version per host: check the driver against the CUDA version your framework "
                    "was built for.",
                    "none",
                    [Query(sel("mirrorwatch_exporter_build_info"), "", instant=True, table=True)],
                    width=6,
                    transformations=[organize(exclude=["Time", "Value", "__name__"])],
                )
            ),
            time_series(
                PanelSpec(
                    "Ingest rejections",
                    "Training telemetry pushes the exporter refused, by reason. unauthorized or "
                    "forbidden: a token or network mismatch; invalid or malformed_json: a "
                    "client bug; stale: late retries; over_limit: too many runs or workers.",
                    "short",
                    [
                        Query(
                            "sum by (instance, reason) "
                            f"({increase('mirrorwatch_exporter_ingest_rejected_total')})",
                            "{{instance}} {{reason}}",
                        )
                    ],
                    width=6,
                    min_value=0,
                )
            ),
        ],
    )


def dashboard(limits: Limits) -> dict[str, Any]:
    return build(
        DashboardSpec(
            uid=GPU_HOST_UID,
            title=TITLE,
            description=(
                "Every GPU of one host: utilisation, memory, temperature, power, clocks, "
                "throttling, PCIe and NVLink, XID and ECC errors, topology and exporter health."
            ),
            variables=standard_variables(
                run_query=RUNS_QUERY,
                gpu_query=HOST_GPUS_QUERY,
                one_run=False,
            ),
            rows=[
                overview_row(),
                utilisation_row(limits),
                thermal_row(limits),
                throttle_row(limits),
                links_row(limits),
                errors_row(),
                exporter_row(),
            ],
            links=[
                dashboard_link("Training balance", TRAINING_UID, "The selected run's balance"),
                dashboard_link("Fleet", FLEET_UID, "All hosts at a glance"),
            ],
            alert_annotation=firing_alerts(),
        )
    )
