"""Training alerts: a stalled run, a throughput drop, poor scaling, telemetry gone quiet."""

from __future__ import annotations

from mirrorwatch.alerts import recorded
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.rules.costs import COST_5M
from mirrorwatch.alerts.templates import GPUS_OF_RUN_ON_EVERY_HOST, value_of
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import BY_KIND
from mirrorwatch.contract.labels import GPU_KEY, TARGET_KEY, WORKER_KEY
from mirrorwatch.contract.metrics import (
    GPU_POWER_LIMIT_WATTS,
    GPU_POWER_WATTS,
    GPU_UTILIZATION_RATIO,
    TRAINING_ACTIVE,
    TRAINING_SCALING_SPEEDUP,
    TRAINING_STEPS_TOTAL,
)

# What TrainingHeldBack says of each costed cause, and the runbook section it points to.
_HELD_BACK = {
    "thermal_throttling": "it is held back for heat (SM clock below its maximum)",
    "power_capping": "it is held back by its power limit (SM clock below its maximum)",
    "hardware_slowdown": "the board cut its clocks (hardware slowdown)",
    "straggler": "it computes slower than its peers, which wait for it in the all-reduce at "
    "near-idle power while every GPU reads busy; no reason the driver reports",
    "imbalance": "its utilisation lags the run's busiest GPU with no hardware cause (most "
    "likely its own input pipeline)",
}


def _held_back_text(runbook_url: str) -> str:
    branches = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq $labels.cause "{kind}" }}}}{text}. '
        f"See {runbook_url}#{BY_KIND[kind].anchor if kind in BY_KIND else 'trainingheldback'}."
        for i, (kind, text) in enumerate(_HELD_BACK.items())
    )
    return branches + "{{ end }}"


def _waiting(t: Thresholds) -> str:
    """The GPUs that read busy at near-idle power, both for the hang's whole window: waiting in
    a collective (NVIDIA/nccl#968: "GPU util is 100% but the power consumption is pretty low")."""
    s = t.TrainingHungInCollective
    window = s.no_step_window
    return (
        f"(min_over_time({GPU_UTILIZATION_RATIO}[{window}]) >= {s.busy_ratio})\n"
        f"and on ({GPU_KEY})\n"
        f"(\n  max_over_time({GPU_POWER_WATTS}[{window}])\n"
        f"  / on ({GPU_KEY}) {GPU_POWER_LIMIT_WATTS}\n  <= {s.power_limit_ratio}\n)"
    )


def _hung_runs(t: Thresholds) -> str:
    """Active runs, still pushing, none of whose workers made a step in the window."""
    s = t.TrainingHungInCollective
    return (
        f"max by (run) (increase({TRAINING_STEPS_TOTAL}[{s.no_step_window}])) == 0\n"
        "and on (run) max by (run) (mirrorwatch_training_active) == 1\n"
        "and on (run)\n"
        "  min by (run) (time() - mirrorwatch_training_last_push_timestamp_seconds)\n"
        f"  < {t.TrainingTelemetryStale.stale_after_seconds}"
    )


def hung_in_collective(t: Thresholds) -> str:
    """The run's GPU that does not wait, where another of the run's does; the run alone where
    every GPU of it here waits (the culprit is on another host)."""
    run_gpus = recorded.RUN_GPU_UTIL
    waiting = f"{run_gpus}\nand on ({TARGET_KEY}, uuid)\n(\n{_waiting(t)}\n)"
    hung = _hung_runs(t)
    culprit = (
        f"{run_gpus}\nunless on ({TARGET_KEY}, uuid)\n(\n{_waiting(t)}\n)\n"
        f"and on (run) count by (run) (\n{waiting}\n)\nand on (run) (\n{hung}\n)"
    )
    everyone = f"count by (run) (\n{waiting}\n)\nand on (run) (\n{hung}\n)"
    return f"(\n{culprit}\n)\nor on (run)\n(\n{everyone}\n)"


def alerts(t: Thresholds) -> list[Alert]:
    return [
        Alert(
            "TrainingStalled",
            "critical",
            """
            mirrorwatch_training_steps_total
            and on («WORKER_KEY»)
              increase(mirrorwatch_training_steps_total[«no_step_window»]) == 0
            and on («WORKER_KEY»)
              mirrorwatch_training_active == 1
            """,
            "Run {{ $labels.run }} on «HOST» has stopped making progress",
            "The «WORKER», «GPUS_OF_WORKER», still reports in but has finished no step in "
            "«no_step_window»; it is stuck at step {{ $value }}.",
            "{{ $value }}",
        ),
        Alert(
            "TrainingThroughputDrop",
            "warning",
            # The whole run, over all its hosts, while every worker of the last hour reports.
            """
            «throughput» / «baseline» < «below_baseline_ratio»
            and on (run)
              «workers» >= on (run) max_over_time(«workers»[1h])
            """,
            "Run {{ $labels.run }} slowed down",
            "Run {{ $labels.run }}, «gpus_of_run», processes «examples_per_second» examples/s "
            "over its workers, «PCT» of its median over the last hour (alert below "
            "«below_baseline_ratio:%»).",
            "«PCT»",
            fragments={
                "throughput": recorded.RUN_THROUGHPUT,
                "baseline": recorded.RUN_THROUGHPUT_BASELINE,
                "workers": recorded.RUN_WORKERS,
                "gpus_of_run": GPUS_OF_RUN_ON_EVERY_HOST,
                # The run's own series: the rule grouped by run alone, over all its hosts.
                "examples_per_second": value_of(recorded.RUN_THROUGHPUT, "run", pipe="humanize"),
            },
        ),
        Alert(
            "TrainingScalingEfficiencyLow",
            "warning",
            """
            mirrorwatch_training_scaling_efficiency_ratio < «efficiency_ratio»
            and on («WORKER_KEY»)
              mirrorwatch_training_active == 1
            """,
            "Run {{ $labels.run }} on «HOST» scales poorly",
            "The «WORKER», «GPUS_OF_WORKER», reaches a speed-up of «speedup»x over one "
            "replica: a scaling efficiency of «PCT» (alert below «efficiency_ratio:%»).",
            "«PCT»",
            fragments={
                "speedup": value_of(TRAINING_SCALING_SPEEDUP, WORKER_KEY, pipe='printf "%.2f"')
            },
        ),
        # A worker that said it finished (active 0 within the exporter's run TTL) is not stale;
        # one that went silent stays stale after the exporter marks it inactive at one TTL. The
        # exporter publishes its --run-ttl, so the rule needs no copy of it.
        Alert(
            "TrainingTelemetryStale",
            "warning",
            """
            time() - mirrorwatch_training_last_push_timestamp_seconds > «stale_after_seconds»
            and on («WORKER_KEY»)
              (
                mirrorwatch_training_active == 1
                or
                time() - mirrorwatch_training_last_push_timestamp_seconds
                >= on («TARGET_KEY») group_left ()
                  mirrorwatch_exporter_run_ttl_seconds
              )
            """,
            "Run {{ $labels.run }} on «HOST» stopped sending telemetry",
            "The «WORKER», «GPUS_OF_WORKER», last pushed telemetry "
            "{{ $value | humanizeDuration }} ago (alert after «stale_after_seconds» s): the "
            "process hangs, died or cannot reach the exporter.",
            "{{ $value | humanizeDuration }}",
        ),
        Alert(
            "TrainingHeldBack",
            "warning",
            f"""
            topk by (run) (1, {COST_5M}) >= «cost_ratio»
            and on (run) max by (run) ({TRAINING_ACTIVE}) == 1
            """,
            "Run {{ $labels.run }} is held back by GPU {{ $labels.gpu }} ({{ $labels.cause }})",
            "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on «HOST» costs run {{ $labels.run }} "
            "«PCT» of its throughput over the last 5 minutes (alert at «cost_ratio:%»): "
            "«why»",
            "«PCT»",
            fragments={"why": _held_back_text(t.runbook_url)},
        ),
        Alert(
            "TrainingHungInCollective",
            "critical",
            hung_in_collective(t),
            "Run {{ $labels.run }} is hung in a collective"
            "{{ if $labels.gpu }}: GPU {{ $labels.gpu }} on «HOST» is not in it{{ end }}",
            "Run {{ $labels.run }} still reports in but has made no step in «no_step_window» "
            "while its GPUs wait in the all-reduce (at least «busy_ratio:%» busy at no more "
            "than «power_limit_ratio:%» of their power limit). "
            "{{ if $labels.gpu }}GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on «HOST» is the "
            "run's GPU that does not wait: look at its process first."
            "{{ else }}Every GPU of the run here waits: the GPU the others wait for is on "
            "another host of the run.{{ end }}",
            "{{ $value }}",
        ),
    ]
