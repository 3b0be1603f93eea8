"""Training alerts: a stalled run, a throughput drop, poor scaling, telemetry gone quiet."""

from __future__ import annotations

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.templates import value_of
from mirrorwatch.alerts.thresholds import Thresholds

# The GPUs of a run on each of its hosts: "on GPU 0, 1 of h1:9848; GPU 0 of h2:9848".
GPUS_OF_RUN_ON_EVERY_HOST = (
    "{{ with printf `count by (instance) (mirrorwatch_training_replica_info{run=%q})` $labels.run"
    ' | query | sortByLabel "instance" }}on {{ range $i, $host := . }}{{ if $i }}; {{ end }}GPU '
    "{{ range $j, $s := printf "
    "`count by (gpu) (mirrorwatch_training_replica_info{run=%q,instance=%q})` "
    '$labels.run $host.Labels.instance | query | sortByLabel "gpu" }}{{ if $j }}, {{ end }}'
    "{{ $s.Labels.gpu }}{{ end }} of {{ $host.Labels.instance }}{{ end }}"
    "{{ else }}on no reported GPU{{ end }}"
)


def alerts(t: Thresholds) -> list[Alert]:
    return [
        Alert(
            "TrainingStalled",
            "critical",
            """
            mirrorwatch_training_steps_total
            and on (cluster, host, job, instance, run, worker)
              increase(mirrorwatch_training_steps_total[«no_step_window»]) == 0
            and on (cluster, host, job, instance, run, worker)
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
                "examples_per_second": value_of(
                    q.RUN_THROUGHPUT + "{run=%q}", args="$labels.run", pipe="humanize"
                ),
            },
        ),
        Alert(
            "TrainingScalingEfficiencyLow",
            "warning",
            """
            mirrorwatch_training_scaling_efficiency_ratio < «efficiency_ratio»
            and on (cluster, host, job, instance, run, worker)
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
            and on (cluster, host, job, instance, run, worker)
              (
                mirrorwatch_training_active == 1
                or
                time() - mirrorwatch_training_last_push_timestamp_seconds
                >= on (cluster, host, job, instance) group_left ()
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
