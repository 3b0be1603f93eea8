"""Training alerts: a stalled run, a throughput drop, poor scaling, telemetry gone quiet."""

from __future__ import annotations

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.templates import GPUS_OF_RUN_ON_EVERY_HOST, value_of
from mirrorwatch.alerts.thresholds import Thresholds


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
                "throughput": q.RUN_THROUGHPUT,
                "baseline": q.RUN_THROUGHPUT_BASELINE,
                "workers": q.RUN_WORKERS,
                "gpus_of_run": GPUS_OF_RUN_ON_EVERY_HOST,
                # The run's own series: the rule grouped by run alone, over all its hosts.
                "examples_per_second": value_of(q.RUN_THROUGHPUT, "run", pipe="humanize"),
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
                "speedup": value_of(
                    "mirrorwatch_training_scaling_speedup", q.WORKER_KEY, pipe='printf "%.2f"'
                )
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
    ]
