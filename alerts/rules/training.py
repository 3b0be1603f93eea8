"""Training alerts: a stalled run, a throughput drop, poor scaling, telemetry gone quiet."""

from __future__ import annotations

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.templates import value_of
from mirrorwatch.alerts.thresholds import Thresholds


def alerts(t: Thresholds) -> list[Alert]:
    return [
        Alert(
            "TrainingStalled",
            "critical",
            """
            mirrorwatch_training_steps_total
            and on (job, instance, run, worker)
              increase(mirrorwatch_training_steps_total[«no_step_window»]) == 0
            and on (job, instance, run, worker)
              mirrorwatch_training_active == 1
            """,
            "Run {{ $labels.run }} on {{ $labels.instance }} has stopped making progress",
            "The «WORKER», «GPUS_OF_WORKER», still reports in but has finished no step in "
            "«no_step_window»; it is stuck at step {{ $value }}.",
            "{{ $value }}",
        ),
        Alert(
            "TrainingThroughputDrop",
            "warning",
            "«throughput» / «baseline» < «below_baseline_ratio»",
            "Run {{ $labels.run }} on {{ $labels.instance }} slowed down",
            "Run {{ $labels.run }} on {{ $labels.instance }}, «GPUS_OF_RUN», processes "
            "«examples_per_second» examples/s, «PCT» of its median over the last hour (alert "
            "below «below_baseline_ratio:%»).",
            "«PCT»",
            fragments={
                "throughput": q.THROUGHPUT,
                "baseline": q.THROUGHPUT_BASELINE,
                "examples_per_second": value_of(
                    q.THROUGHPUT + "{instance=%q,run=%q}",
                    args="$labels.instance $labels.run",
                    pipe="humanize",
                ),
            },
        ),
        Alert(
            "TrainingScalingEfficiencyLow",
            "warning",
            """
            mirrorwatch_training_scaling_efficiency_ratio < «efficiency_ratio»
            and on (job, instance, run, worker)
              mirrorwatch_training_active == 1
            """,
            "Run {{ $labels.run }} on {{ $labels.instance }} scales poorly",
            "The «WORKER», «GPUS_OF_WORKER», reaches a speed-up of "
            "{{ with printf `mirrorwatch_training_scaling_speedup{instance=%q,run=%q,worker=%q}` "
            "$labels.instance $labels.run $labels.worker | query }}"
            '{{ . | first | value | printf "%.2f" }}x{{ end }} over one replica: a scaling '
            "efficiency of «PCT» (alert below «efficiency_ratio:%»).",
            "«PCT»",
        ),
        # A worker that said it finished (active 0 within the exporter's run TTL) is not stale;
        # one that went silent stays stale after the exporter marks it inactive at one TTL. The
        # exporter publishes its --run-ttl, so the rule needs no copy of it.
        Alert(
            "TrainingTelemetryStale",
            "warning",
            """
            time() - mirrorwatch_training_last_push_timestamp_seconds > «stale_after_seconds»
            and on (job, instance, run, worker)
              (
                mirrorwatch_training_active == 1
                or
                time() - mirrorwatch_training_last_push_timestamp_seconds
                >= on (job, instance) group_left ()
                  mirrorwatch_exporter_run_ttl_seconds
              )
            """,
            "Run {{ $labels.run }} on {{ $labels.instance }} stopped sending telemetry",
            "The «WORKER», «GPUS_OF_WORKER», last pushed telemetry "
            "{{ $value | humanizeDuration }} ago (alert after «stale_after_seconds» s): the "
            "process hangs, died or cannot reach the exporter.",
            "{{ $value | humanizeDuration }}",
        ),
    ]
