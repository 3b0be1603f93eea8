"""The Training balance dashboard (home): is this run's work spread evenly, and fast?"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode

from dashboards.common import (
    ACTIVE_OFF,
    FLEET_UID,
    GPU_HOST_UID,
    RUNS_QUERY,
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
    of_run,
    organize,
    override,
    rate,
    run_gpus,
    sel,
    standard_variables,
    stat_panel,
    state_timeline,
    steps,
    table_panel,
    time_series,
)

TITLE = "Training balance"

RUN_GPU_UTILIZATION = sel("run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m", gpu=True, run=True)
# Spread and mean over the selected GPUs of the run, from the same per-GPU recording rule the
# GpuUtilizationImbalance alert reads (the rule's run-wide series carry no job/instance).
RUN_MEAN = f"avg by (run) ({RUN_GPU_UTILIZATION})"
RUN_SPREAD = f"max by (run) ({RUN_GPU_UTILIZATION}) - min by (run) ({RUN_GPU_UTILIZATION})"


def step_quantile(q: float) -> Query:
    buckets = rate("mirrorwatch_training_step_duration_seconds_bucket", run=True)
    return Query(f"histogram_quantile({q}, sum by (run, le) ({buckets}))", f"p{round(q * 100)}")


def throughput_row(limits: Limits) -> Row:
    return Row(
        "Throughput",
        [
            time_series(
                PanelSpec(
                    "Examples per second",
                    "Training examples per second of the run, summed over its workers: as the "
                    "callback reports it (recent window) and from the examples counter. A drop "
                    f"below {limits.throughput_drop_ratio:g} of the run's hourly median fires "
                    "TrainingThroughputDrop: look at Per-GPU utilisation and Throttle reasons.",
                    "short",
                    [
                        Query(
                            "sum by (run) "
                            f"({sel('mirrorwatch_training_examples_per_second', run=True)})",
                            "{{run}} reported",
                        ),
                        Query(
                            "sum by (run) "
                            f"({rate('mirrorwatch_training_examples_total', run=True)})",
                            "{{run}} from counter",
                        ),
                    ],
                    width=6,
                    min_value=0,
                ),
                axis_label="examples/s",
            ),
            time_series(
                PanelSpec(
                    "Steps per second",
                    "Training steps per second of each worker. Zero while the worker still pushes "
                    "means a stalled run (TrainingStalled): a hung collective or a blocked input "
                    "pipeline.",
                    "short",
                    [
                        Query(
                            "sum by (run, worker) "
                            f"({rate('mirrorwatch_training_steps_total', run=True)})",
                            "{{run}} worker {{worker}}",
                        )
                    ],
                    width=6,
                    min_value=0,
                ),
                axis_label="steps/s",
            ),
            time_series(
                PanelSpec(
                    "Step time",
                    "Wall time of one training step, p50/p95/p99 from the step-duration "
                    "histogram. A p99 far above p50 means some steps wait: on input, on a "
                    "slow replica, on a checkpoint. Quantiles are bucket estimates.",
                    "s",
                    [step_quantile(0.5), step_quantile(0.95), step_quantile(0.99)],
                    width=6,
                    min_value=0,
                )
            ),
            stat_panel(
                PanelSpec(
                    "Last push",
                    "Seconds since each worker last pushed telemetry to the exporter. Red past "
                    f"{limits.telemetry_stale_seconds:g} s (TrainingTelemetryStale): the worker "
                    "died, hangs, or cannot reach the exporter.",
                    "s",
                    [
                        Query(
                            "time() - max by (run, worker) ("
                            + sel("mirrorwatch_training_last_push_timestamp_seconds", run=True)
                            + ")",
                            "{{run}} worker {{worker}}",
                        )
                    ],
                    width=6,
                    thresholds=steps((None, "green"), (limits.telemetry_stale_seconds, "red")),
                )
            ),
        ],
    )


def balance_row(limits: Limits) -> Row:
    spread = limits.imbalance_spread_ratio
    pp = f"{spread * 100:g} pp"
    return Row(
        "Balance",
        [
            time_series(
                PanelSpec(
                    "Per-GPU utilisation",
                    "1-minute mean utilisation of each GPU of the run, with the run mean and a "
                    f"±{pp} band around it. In synchronous data-parallel training every step "
                    "waits for the slowest replica: a GPU below the band holds the whole run "
                    "back (GpuUtilizationImbalance).",
                    "percentunit",
                    [
                        Query(RUN_GPU_UTILIZATION, "GPU {{gpu}} {{instance}}"),
                        Query(RUN_MEAN, "run mean"),
                        Query(f"{RUN_MEAN} + {spread:g}", f"mean + {pp}"),
                        Query(f"{RUN_MEAN} - {spread:g}", f"mean - {pp}"),
                    ],
                    width=24,
                    min_value=0,
                    max_value=1,
                    overrides=[
                        override(
                            "run mean",
                            {"custom.lineWidth": 2, "custom.fillOpacity": 0},
                        ),
                        override(
                            f"mean + {pp}",
                            {
                                "custom.fillBelowTo": f"mean - {pp}",
                                "custom.lineWidth": 0,
                                "custom.fillOpacity": 15,
                                "color": {"mode": "fixed", "fixedColor": "green"},
                            },
                        ),
                        override(
                            f"mean - {pp}",
                            {
                                "custom.lineWidth": 0,
                                "custom.fillOpacity": 0,
                                "color": {"mode": "fixed", "fixedColor": "green"},
                            },
                        ),
                    ],
                ),
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Deviation from run mean",
                    "Each GPU's 1-minute mean utilisation minus the run's mean (the recording "
                    "rule run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m). The GPU far "
                    f"below zero, outside ±{pp}, is the one the run waits for.",
                    "percentunit",
                    [
                        Query(
                            sel(
                                "run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m",
                                gpu=True,
                                run=True,
                            ),
                            "GPU {{gpu}} {{instance}}",
                        )
                    ],
                    thresholds=steps((None, "red"), (-spread, "green"), (spread, "red")),
                ),
                threshold_style=GraphThresholdsStyleMode.DASHED,
                fill_opacity=0,
            ),
            time_series(
                PanelSpec(
                    "Utilisation spread",
                    "Max minus min of the 1-minute mean utilisation of the run's GPUs. Above "
                    f"the {pp} line for 5 minutes while the run is busy, "
                    "GpuUtilizationImbalance fires; the runbook lists the usual causes (input "
                    "pipeline, PCIe slot, throttling, another process).",
                    "percentunit",
                    [Query(RUN_SPREAD, "{{run}}")],
                    thresholds=steps((None, "green"), (spread, "red")),
                    min_value=0,
                ),
                threshold_style=GraphThresholdsStyleMode.LINE_AND_AREA,
            ),
        ],
    )


def scaling_row(limits: Limits) -> Row:
    target = limits.scaling_efficiency_ratio
    replicas = f"max by (run, worker) ({sel('mirrorwatch_training_replicas', run=True)})"
    return Row(
        "Scaling",
        [
            time_series(
                PanelSpec(
                    "Scaling speed-up",
                    "Throughput on all replicas over throughput on one (from the run's scaling "
                    f"benchmark), against the ideal (one per replica) and {target:g} of it. Two "
                    f"GPUs giving 1.6x instead of {2 * target:g}x: look at Scaling efficiency, "
                    "Per-GPU utilisation and the GPU host's PCIe link and NVLink panels.",
                    "short",
                    [
                        Query(
                            sel("mirrorwatch_training_scaling_speedup", run=True),
                            "{{run}} worker {{worker}} speed-up",
                        ),
                        Query(replicas, "ideal"),
                        Query(f"{target:g} * {replicas}", f"{target:g} x ideal"),
                    ],
                    width=8,
                    min_value=0,
                    overrides=[limit_line_override(f"^(ideal|{target:g} x ideal)$")],
                ),
                axis_label="x",
            ),
            time_series(
                PanelSpec(
                    "Scaling efficiency",
                    "Speed-up divided by the number of replicas: 1.0 is perfect scaling. Below "
                    f"the {target:g} line for 15 minutes, TrainingScalingEfficiencyLow fires: "
                    "GPUs joined over PCIe instead of NVLink, a per-replica batch too small to "
                    "hide the all-reduce, or an input pipeline that cannot feed more replicas.",
                    "percentunit",
                    [
                        Query(
                            sel("mirrorwatch_training_scaling_efficiency_ratio", run=True),
                            "{{run}} worker {{worker}}",
                        )
                    ],
                    width=8,
                    thresholds=steps((None, "red"), (target, "green")),
                    min_value=0,
                    max_value=1.1,
                ),
                threshold_style=GraphThresholdsStyleMode.DASHED,
            ),
            time_series(
                PanelSpec(
                    "Replica memory",
                    "Device memory each replica's allocator holds (current) and its high-water "
                    "mark (peak), with the total memory of the run's GPUs. Peak near the total "
                    "risks out-of-memory (GpuMemoryNearlyFull, "
                    f"above {limits.memory_used_ratio:.0%}); current growing step after step is a "
                    "leak.",
                    "bytes",
                    [
                        Query(
                            sel("mirrorwatch_training_replica_memory_bytes", run=True),
                            "replica {{replica}} {{kind}}",
                        ),
                        Query(
                            of_run(sel("mirrorwatch_gpu_memory_total_bytes", gpu=True)),
                            "GPU {{gpu}} total",
                        ),
                    ],
                    width=8,
                    min_value=0,
                    overrides=[limit_line_override("total$")],
                )
            ),
        ],
    )


def gpus_row(limits: Limits) -> Row:
    near = limits.temperature_margin_celsius
    return Row(
        "The run's GPUs",
        [
            state_timeline(
                PanelSpec(
                    "Throttle reasons",
                    "Clock-event reasons active on the run's GPUs (red while active). "
                    "sw_thermal_slowdown / hw_thermal_slowdown: heat (GpuThermalThrottling); "
                    "sw_power_cap: the power limit; hw_slowdown / hw_power_brake_slowdown: the "
                    "board cut clocks (GpuHardwareSlowdown). A throttled GPU is the slow replica.",
                    "bool_on_off",
                    [
                        Query(
                            of_run(sel("mirrorwatch_gpu_clocks_event_active", gpu=True)),
                            "GPU {{gpu}} {{reason}}",
                        )
                    ],
                    height=10,
                    mappings=ACTIVE_OFF,
                    thresholds=steps((None, "transparent"), (1, "red")),
                )
            ),
            time_series(
                PanelSpec(
                    "Temperature",
                    "Temperature of the run's GPUs with each GPU's slowdown threshold (dashed). "
                    f"Within {near:g} °C of it for 5 minutes: GpuTemperatureNearSlowdown; past "
                    "it the GPU lowers its clocks and the run slows to its pace.",
                    "celsius",
                    [
                        Query(
                            of_run(sel("mirrorwatch_gpu_temperature_celsius", gpu=True)),
                            "GPU {{gpu}} {{instance}}",
                        ),
                        Query(
                            of_run(
                                sel(
                                    "mirrorwatch_gpu_temperature_threshold_celsius",
                                    'threshold="slowdown"',
                                    gpu=True,
                                )
                            ),
                            "GPU {{gpu}} slowdown",
                        ),
                    ],
                    height=10,
                    overrides=[limit_line_override("slowdown$")],
                )
            ),
            table_panel(
                PanelSpec(
                    "Firing alerts",
                    "Alerts firing now for this run: its own (imbalance, stalled, throughput, "
                    "efficiency, stale telemetry) and those of the GPUs it runs on. Empty is "
                    "good. Each alert's runbook_url explains what to check.",
                    "none",
                    [Query(run_alerts(), "", instant=True, table=True)],
                    width=24,
                    height=6,
                    transformations=[
                        organize(
                            exclude=["Time", "Value", "__name__", "alertstate", "job"],
                            order=["alertname", "severity", "instance", "gpu", "run", "worker"],
                        )
                    ],
                )
            ),
        ],
    )


def run_alerts() -> str:
    """Alerts that name the run, and alerts on the GPUs the run reports."""
    own = firing_alerts('run=~"$run"')
    return f"{own} or ({firing_alerts()} and on (job, instance, uuid) {run_gpus()})"


def dashboard(limits: Limits) -> dict[str, Any]:
    return build(
        DashboardSpec(
            uid=TRAINING_UID,
            title=TITLE,
            description=(
                "One training run across its GPUs: throughput, step time, per-GPU balance, "
                "scaling, memory, throttling and temperature, with the alerts firing for it."
            ),
            variables=_variables(),
            rows=[
                throughput_row(limits),
                balance_row(limits),
                scaling_row(limits),
                gpus_row(limits),
            ],
            links=[
                dashboard_link("GPU host", GPU_HOST_UID, "Every GPU of the selected host(s)"),
                dashboard_link("Fleet", FLEET_UID, "All hosts at a glance"),
            ],
            alert_annotation=run_alerts(),
        )
    )


def _variables() -> list[Any]:
    return standard_variables(
        run_query=RUNS_QUERY,
        gpu_query=(
            'label_values(mirrorwatch_training_replica_info{job=~"$job", '
            'instance=~"$instance", run=~"$run"}, gpu)'
        ),
        one_run=True,
    )
