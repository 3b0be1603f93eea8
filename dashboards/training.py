"""The Training balance dashboard (home): is this run's work spread evenly, and fast?"""

from __future__ import annotations

from typing import Any

from dashboards.kinds import (
    against_limit,
    alerts_table,
    amount_series,
    ratio_series,
    reasons_timeline,
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
    PanelSpec,
    Query,
    ThresholdStyle,
    limit_line_override,
    override,
    stat_panel,
    steps,
    target_line_override,
    time_series,
)
from dashboards.selectors import (
    GPU,
    HOST,
    PER_GPU,
    RATE_INTERVAL,
    RUN,
    RUN_GPU,
    RUN_MATCHER,
    of_run,
)
from dashboards.variables import RUN_GPUS_QUERY, standard_variables
from dashboards.why import run_causes, why_row
from mirrorwatch.alerts import firing, recorded, training_queries
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.metrics import (
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_FOREIGN_PROCESSES,
    GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
    TRAINING_REPLICA_MEMORY_BYTES,
    TRAINING_SCALING_EFFICIENCY_RATIO,
    TRAINING_SCALING_SPEEDUP,
)

TITLE = "Training balance"
PER_WORKER = "{{run}} worker {{worker}}"
GREEN = {"mode": "fixed", "fixedColor": "green"}

# Spread and mean over the selected GPUs of the run, from the same per-GPU recording rule the
# GpuUtilizationImbalance alert reads (the rule's run-wide series carry no job/instance).
RUN_MEAN = training_queries.run_mean_utilization(RUN_GPU)
RUN_SPREAD = training_queries.run_utilization_spread(RUN_GPU)


def throughput_row(t: Thresholds) -> Row:
    stale = t.TrainingTelemetryStale.stale_after_seconds
    return Row(
        "Throughput",
        [
            amount_series(
                "Examples per second",
                "Training examples per second of the run, summed over its workers: as the "
                "callback reports it (recent window) and from the examples counter. A drop "
                f"below {t.TrainingThroughputDrop.below_baseline_ratio:g} of the run's hourly "
                "median fires TrainingThroughputDrop: look at Per-GPU utilisation and Throttle "
                "reasons.",
                "short",
                [
                    Query(training_queries.examples_per_second(RUN), "{{run}} reported"),
                    Query(
                        training_queries.examples_per_second_from_counter(RUN, RATE_INTERVAL),
                        "{{run}} from counter",
                    ),
                ],
                width=6,
                fill_opacity=10,
                axis_label="examples/s",
            ),
            amount_series(
                "Steps per second",
                "Training steps per second of each worker. Zero while the worker still pushes "
                "means a stalled run (TrainingStalled): a hung collective or a blocked input "
                "pipeline.",
                "short",
                [Query(training_queries.steps_per_second(RUN, RATE_INTERVAL), PER_WORKER)],
                width=6,
                fill_opacity=10,
                axis_label="steps/s",
            ),
            amount_series(
                "Step time",
                "Wall time of one training step, p50/p95/p99 from the step-duration "
                "histogram. A p99 far above p50 means some steps wait: on input, on a "
                "slow replica, on a checkpoint. Quantiles are bucket estimates.",
                "s",
                [
                    Query(
                        training_queries.step_time_quantile(RUN, quantile, RATE_INTERVAL),
                        f"p{round(quantile * 100)}",
                    )
                    for quantile in (0.5, 0.95, 0.99)
                ],
                width=6,
                fill_opacity=10,
            ),
            stat_panel(
                PanelSpec(
                    "Last push",
                    "Seconds since each worker last pushed telemetry to the exporter. Red past "
                    f"{stale:g} s (TrainingTelemetryStale): the worker died, hangs, or cannot "
                    "reach the exporter.",
                    "s",
                    [Query(training_queries.seconds_since_last_push(RUN), PER_WORKER)],
                    width=6,
                    thresholds=steps((None, "green"), (stale, "red")),
                )
            ),
        ],
    )


def balance_row(t: Thresholds) -> Row:
    imbalance = t.GpuUtilizationImbalance
    spread = imbalance.spread_ratio
    pp = f"{spread * 100:g} pp"
    return Row(
        "Balance",
        [
            ratio_series(
                "Per-GPU utilisation",
                "1-minute mean utilisation of each GPU of the run, with the run mean and a "
                f"±{pp} band around it. In synchronous data-parallel training every step "
                "waits for the slowest replica: a GPU below the band holds the whole run "
                "back (GpuUtilizationImbalance).",
                [
                    Query(RUN_GPU(recorded.RUN_GPU_UTIL), PER_GPU),
                    Query(RUN_MEAN, "run mean"),
                    Query(f"{RUN_MEAN} + {spread:g}", f"mean + {pp}"),
                    Query(f"{RUN_MEAN} - {spread:g}", f"mean - {pp}"),
                ],
                width=24,
                overrides=[
                    override("run mean", {"custom.lineWidth": 2, "custom.fillOpacity": 0}),
                    override(
                        f"mean + {pp}",
                        {
                            "custom.fillBelowTo": f"mean - {pp}",
                            "custom.lineWidth": 0,
                            "custom.fillOpacity": 15,
                            "color": GREEN,
                        },
                    ),
                    override(
                        f"mean - {pp}",
                        {"custom.lineWidth": 0, "custom.fillOpacity": 0, "color": GREEN},
                    ),
                ],
            ),
            time_series(
                PanelSpec(
                    "Deviation from run mean",
                    "Each GPU's 1-minute mean utilisation minus the run's mean (the recording "
                    "rule run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m). The GPU far "
                    f"below zero, outside ±{pp}, is the one the run waits for.",
                    "percentunit",
                    [Query(RUN_GPU(recorded.RUN_GPU_DEVIATION), PER_GPU)],
                    thresholds=steps((None, "red"), (-spread, "green"), (spread, "red")),
                ),
                threshold_style=ThresholdStyle.DASHED,
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Utilisation spread",
                    "Max minus min of the 1-minute mean utilisation of the run's GPUs. Above "
                    f"the {pp} line for {imbalance.hold_in_words} while the run is busy, "
                    "GpuUtilizationImbalance fires; the runbook lists the usual causes (input "
                    "pipeline, PCIe slot, throttling, another process).",
                    "percentunit",
                    [Query(RUN_SPREAD, "{{run}}")],
                    thresholds=steps((None, "green"), (spread, "red")),
                    min_value=0,
                ),
                threshold_style=ThresholdStyle.LINE_AND_AREA,
            ),
        ],
    )


def sharing_row(t: Thresholds) -> Row:
    shared = t.GpuSharedWithForeignProcess
    return Row(
        "SM activity and other processes",
        [
            ratio_series(
                "SM activity against utilisation (GPM)",
                "1-minute mean GPM SM activity (share of SMs busy; Hopper and later) of each "
                "GPU of the run, beside its utilisation. Where every GPU of the run "
                "has SM activity, GpuUtilizationImbalance measures the spread in it (label "
                "source=sm_activity): it shows a starved replica that utilisation hides. "
                "Empty on GPUs without GPM.",
                [
                    Query(RUN_GPU(recorded.RUN_GPU_SM_ACTIVITY), f"{PER_GPU} SM activity"),
                    Query(RUN_GPU(recorded.RUN_GPU_UTIL), f"{PER_GPU} utilisation"),
                ],
            ),
            amount_series(
                "Foreign processes on the run's GPUs",
                "Processes on each GPU of the run that are not its workers (matched by the pid "
                f"the callback reports). Above 0 for {shared.hold_in_words}: "
                "GpuSharedWithForeignProcess. Empty when the exporter cannot match the run's "
                "pids (docs/api.md).",
                "short",
                [Query(RUN_GPU(GPU_FOREIGN_PROCESSES), PER_GPU)],
            ),
            amount_series(
                "Foreign process memory",
                "Device memory those processes hold on each GPU of the run: memory the "
                "run's replica there cannot have. GPU host → Process memory (top N) names them.",
                "bytes",
                [Query(RUN_GPU(GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES), PER_GPU)],
                fill_opacity=10,
            ),
        ],
    )


def scaling_row(t: Thresholds) -> Row:
    efficiency = t.TrainingScalingEfficiencyLow
    target = efficiency.efficiency_ratio
    replicas = training_queries.replicas(RUN)
    return Row(
        "Scaling",
        [
            time_series(
                PanelSpec(
                    "Scaling speed-up",
                    "Throughput on all replicas over throughput on one (from the run's "
                    "baseline or scaling benchmark), against the ideal (one per replica, "
                    f"dashed red) and {target:g} of it (dotted orange, the target). Two GPUs "
                    f"giving 1.6x instead of {2 * target:g}x: look at Scaling efficiency, "
                    "Per-GPU utilisation and the GPU host's PCIe link and NVLink panels.",
                    "short",
                    [
                        Query(RUN(TRAINING_SCALING_SPEEDUP), f"{PER_WORKER} speed-up"),
                        Query(replicas, "ideal"),
                        Query(f"{target:g} * {replicas}", f"{target:g} x ideal"),
                    ],
                    width=12,
                    min_value=0,
                    overrides=[
                        limit_line_override("^ideal$"),
                        target_line_override(f"^{target:g} x ideal$"),
                    ],
                ),
                axis_label="x",
            ),
            time_series(
                PanelSpec(
                    "Scaling efficiency",
                    "Speed-up divided by the number of replicas: 1.0 is perfect scaling. Below "
                    f"the {target:g} line for {efficiency.hold_in_words}, "
                    "TrainingScalingEfficiencyLow fires: GPUs joined over PCIe instead of "
                    "NVLink, a per-replica batch too small to hide the all-reduce, or an input "
                    "pipeline that cannot feed more replicas.",
                    "percentunit",
                    [Query(RUN(TRAINING_SCALING_EFFICIENCY_RATIO), PER_WORKER)],
                    width=12,
                    thresholds=steps((None, "red"), (target, "green")),
                    min_value=0,
                    max_value=1.1,
                ),
                threshold_style=ThresholdStyle.DASHED,
            ),
        ],
    )


def gpus_row(t: Thresholds) -> Row:
    near = t.GpuTemperatureNearSlowdown
    memory = t.GpuMemoryNearlyFull
    return Row(
        "The run's GPUs",
        [
            reasons_timeline(
                "Clock-event reasons active on the run's GPUs (red while active). "
                "sw_thermal_slowdown / hw_thermal_slowdown: heat (GpuThermalThrottling); "
                "sw_power_cap: the power limit; hw_slowdown / hw_power_brake_slowdown: the "
                "board cut clocks (GpuHardwareSlowdown). A throttled GPU is the slow replica.",
                Query(
                    of_run(GPU(GPU_CLOCKS_EVENT_ACTIVE)),
                    PER_GPU + " {{reason}}",
                ),
                height=10,
            ),
            against_limit(
                "Temperature",
                "Temperature of the run's GPUs with each GPU's slowdown threshold (dashed). "
                f"Within {near.margin_celsius:g} °C of it for {near.hold_in_words}: "
                "GpuTemperatureNearSlowdown; past it the GPU lowers its clocks and the run "
                "slows to its pace.",
                "celsius",
                [
                    Query(of_run(GPU(GPU_TEMPERATURE_CELSIUS)), PER_GPU),
                    Query(
                        of_run(
                            GPU(
                                GPU_TEMPERATURE_THRESHOLD_CELSIUS,
                                'threshold="slowdown"',
                            )
                        ),
                        f"{PER_GPU} slowdown",
                    ),
                ],
                "slowdown$",
                width=12,
                height=10,
                min_value=None,
                fill_opacity=10,
            ),
            against_limit(
                "Replica memory",
                "Device memory each replica's allocator holds (current) and its high-water "
                "mark (peak), with the total memory of the run's GPUs. Peak near the total "
                f"risks out-of-memory (GpuMemoryNearlyFull, above {memory.used_ratio:.0%}); "
                "current growing step after step is a leak.",
                "bytes",
                [
                    Query(
                        RUN(TRAINING_REPLICA_MEMORY_BYTES),
                        "replica {{replica}} {{kind}}",
                    ),
                    Query(of_run(GPU(GPU_MEMORY_TOTAL_BYTES)), f"{PER_GPU} total"),
                ],
                "total$",
                fill_opacity=10,
            ),
        ],
    )


def alerts_row() -> Row:
    """First: what is wrong now reads before the charts that show why (as on GPU host)."""
    return Row(
        "Alerts firing for this run",
        [
            alerts_table(
                "Alerts firing now for this run: its own (imbalance, stalled, throughput, "
                "efficiency, stale telemetry) and those of the GPUs it runs on. Empty is "
                "good. Each alert's runbook_url explains what to check.",
                firing.run_alerts(HOST, RUN_MATCHER),
                width=24,
                height=6,
                hide=["alertstate", "job"],
                order=["alertname", "severity", "instance", "gpu", "run", "worker"],
            ),
        ],
    )


def dashboard(t: Thresholds) -> dict[str, Any]:
    return build(
        DashboardSpec(
            uid=TRAINING_UID,
            title=TITLE,
            description=(
                "One training run across its GPUs: throughput, step time, per-GPU balance, "
                "scaling, memory, throttling and temperature, with the alerts firing for it."
            ),
            variables=standard_variables(gpu_query=RUN_GPUS_QUERY, one_run=True),
            rows=[
                alerts_row(),
                why_row(run_causes(RUN_GPU), "the selected run", RUN_GPU),
                throughput_row(t),
                balance_row(t),
                sharing_row(t),
                scaling_row(t),
                gpus_row(t),
            ],
            links=[
                dashboard_link("GPU host", GPU_HOST_UID, "Every GPU of the selected host(s)"),
                dashboard_link("Fleet", FLEET_UID, "All hosts at a glance"),
            ],
            alert_annotation=firing.run_alerts(HOST, RUN_MATCHER),
        )
    )
