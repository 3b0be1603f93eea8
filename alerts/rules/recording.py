"""Recording rules: per-GPU and per-run utilisation, its spread, throttle time and throughput."""

from __future__ import annotations

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.rules import Record
from mirrorwatch.alerts.thresholds import Thresholds


def rules(t: Thresholds) -> list[Record]:
    return [
        Record(q.GPU_UTIL, "avg_over_time(mirrorwatch_gpu_utilization_ratio[1m])"),
        # The replicas of runs that are active now, one series per replica, value 1.
        Record(
            q.ACTIVE_REPLICA,
            """
            mirrorwatch_training_replica_info
            * on (job, instance, run, worker) group_left ()
              (mirrorwatch_training_active == 1)
            """,
        ),
        # The GPU's own `gpu` label (NVML index) wins over the trainer's.
        Record(
            q.RUN_GPU_UTIL,
            """
            max by (job, instance, run, gpu, uuid) (
              instance_run:mirrorwatch_training_replica_info:active
              * on (job, instance, uuid) group_left (gpu)
                instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m
            )
            """,
        ),
        Record(q.RUN_UTIL, "avg by (run) (run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m)"),
        # Spreads are rounded to 0.01 percentage points: NVML reports whole percents, and
        # 0.90 - 0.85 must be the 0.05 threshold, not 0.05000000000000004 above it.
        Record(
            q.RUN_SPREAD, "round(«spread», 0.0001)", {"spread": q.spread(q.RUN_GPU_UTIL, "run")}
        ),
        Record(
            q.RUN_GPU_DEVIATION,
            """
            run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m
            - on (run) group_left ()
              run:mirrorwatch_gpu_utilization_ratio:avg1m
            """,
        ),
        # Without training telemetry: the busy GPUs of one host that belong to no active run.
        Record(
            q.HOST_SPREAD,
            """
            round(
              max by (job, instance) «busy_unassigned»
              - min by (job, instance) «busy_unassigned»,
              0.0001
            )
            """,
            {"busy_unassigned": q.busy_unassigned(t.busy_utilization_ratio)},
        ),
        # Seconds throttled per second: the fraction of time each reason held clocks back.
        Record(q.THROTTLE, q.throttle_fraction(q.RULES, "5m")),
        Record(
            q.THROUGHPUT,
            """
            sum by (job, instance, run) (
              mirrorwatch_training_examples_per_second
              * on (job, instance, run, worker) group_left ()
                (mirrorwatch_training_active == 1)
            )
            """,
        ),
        # The median is robust to the drop itself and to short pauses (evaluation, checkpoints).
        Record(
            q.THROUGHPUT_BASELINE,
            "quantile_over_time(0.5, «throughput»[1h])",
            {"throughput": q.THROUGHPUT},
        ),
    ]
