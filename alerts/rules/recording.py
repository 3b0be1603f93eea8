"""Recording rules: per-GPU and per-run utilisation and its spread; throughput; throttle time;
NVLink errors; the Fleet dashboard's per-host summary. Each in a group of its own
(alerts/build.py RECORDING_GROUPS): none reads another's, and throttle time and NVLink errors
read metrics with several series per GPU."""

from __future__ import annotations

from mirrorwatch.alerts import gpu_queries, promql, recorded, throttling
from mirrorwatch.alerts.rules import Record
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import SLOWDOWN_REASONS, THERMAL_REASONS, THROTTLES
from mirrorwatch.contract.metrics import (
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UP,
    GPU_UTILIZATION_RATIO,
)

# The driver's violation counters that time a cause (mirrorwatch_gpu_throttle_seconds_total).
CAUSE_VIOLATIONS = throttling.reasons([c.violation for c in THROTTLES if c.violation is not None])


def rules(t: Thresholds) -> list[Record]:
    return [
        Record(
            recorded.GPU_UTIL,
            "avg_over_time(mirrorwatch_gpu_utilization_ratio[1m]) «not_mig»",
            {"not_mig": gpu_queries.NOT_MIG_PARENT},
        ),
        # The replicas of runs that are active now, one series per replica, value 1.
        Record(
            recorded.ACTIVE_REPLICA,
            """
            mirrorwatch_training_replica_info
            * on («WORKER_KEY») group_left ()
              (mirrorwatch_training_active == 1)
            """,
        ),
        # The GPU's own `gpu` label (NVML index) wins over the trainer's.
        Record(
            recorded.RUN_GPU_UTIL,
            """
            max by («RUN_KEY», gpu, uuid) (
              instance_run:mirrorwatch_training_replica_info:active
              * on («UUID_KEY») group_left (gpu)
                instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m
            )
            """,
        ),
        Record(recorded.RUN_UTIL, "avg by (run) (run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m)"),
        # Spreads are rounded to 0.01 percentage points: NVML reports whole percents, and
        # 0.90 - 0.85 must be the 0.05 threshold, not 0.05000000000000004 above it.
        # GPM's SM activity, where the GPU has it: the share of SMs busy, which utilisation
        # (a kernel ran at all) overstates for small kernels.
        Record(
            recorded.GPU_SM_ACTIVITY,
            "avg_over_time(mirrorwatch_gpu_sm_activity_ratio[1m]) «not_mig»",
            {"not_mig": gpu_queries.NOT_MIG_PARENT},
        ),
        Record(
            recorded.RUN_GPU_SM_ACTIVITY,
            """
            max by («RUN_KEY», gpu, uuid) (
              instance_run:mirrorwatch_training_replica_info:active
              * on («UUID_KEY») group_left (gpu)
                instance_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m
            )
            """,
        ),
        # What the run's balance is measured in, `source` saying which: SM activity when
        # every GPU of the run has it, else utilisation (never a mix of the two).
        Record(
            recorded.RUN_GPU_BALANCE,
            """
            (
              label_replace(«sm», "source", "sm_activity", "", "")
              and on (run)
              (count by (run) («sm») == count by (run) («util»))
            )
            or on (run)
            label_replace(«util», "source", "utilization", "", "")
            """,
            {"sm": recorded.RUN_GPU_SM_ACTIVITY, "util": recorded.RUN_GPU_UTIL},
        ),
        Record(
            recorded.RUN_SPREAD,
            "round(«spread», 0.0001)",
            {"spread": promql.spread(recorded.RUN_GPU_BALANCE, "run, source")},
        ),
        Record(
            recorded.RUN_GPU_DEVIATION,
            """
            run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m
            - on (run) group_left ()
              run:mirrorwatch_gpu_utilization_ratio:avg1m
            """,
        ),
        # Without training telemetry: the busy GPUs of one host that belong to no active run.
        Record(recorded.BUSY_UNASSIGNED, gpu_queries.busy_unassigned(t.busy_utilization_ratio)),
        Record(
            recorded.HOST_SPREAD,
            """
            round(
              max by («TARGET_KEY») «busy_unassigned»
              - min by («TARGET_KEY») «busy_unassigned»,
              0.0001
            )
            """,
            {"busy_unassigned": gpu_queries.busy_unassigned(t.busy_utilization_ratio)},
        ),
    ]


def throughput_rules(t: Thresholds) -> list[Record]:
    """Each run's throughput, its hour's median and its workers: training series only."""
    return [
        Record(
            recorded.THROUGHPUT,
            """
            sum by («RUN_KEY») (
              mirrorwatch_training_examples_per_second
              * on («WORKER_KEY») group_left ()
                (mirrorwatch_training_active == 1)
            )
            """,
        ),
        # The median is robust to the drop itself and to short pauses (evaluation, checkpoints).
        Record(
            recorded.THROUGHPUT_BASELINE,
            "quantile_over_time(0.5, «throughput»[1h])",
            {"throughput": recorded.THROUGHPUT},
        ),
        # A run over several hosts (MultiWorkerMirroredStrategy) is one run: each worker
        # reports its share of the examples (docs/api.md), so the shares add up.
        Record(
            recorded.RUN_THROUGHPUT,
            "sum by (run) («throughput»)",
            {"throughput": recorded.THROUGHPUT},
        ),
        Record(
            recorded.RUN_THROUGHPUT_BASELINE,
            "quantile_over_time(0.5, «throughput»[1h])",
            {"throughput": recorded.RUN_THROUGHPUT},
        ),
        # Its workers that report in now: a worker gone quiet lowers the run's sum without
        # the run slowing down, so the throughput alert waits for all of them.
        Record(recorded.RUN_WORKERS, "count by (run) (mirrorwatch_training_active == 1)"),
    ]


def throttle_rules(t: Thresholds) -> list[Record]:
    return [
        # Seconds throttled per second: the fraction of time each reason held clocks back.
        # increase / 300 rather than rate(): the same number from Prometheus and vmalert. Only
        # the reasons a cause is timed by (power, thermal: what GpuPowerCapped and the causes
        # read); the dashboards take every reason's rate from the counters themselves. Two of
        # six series per GPU (24,576 counters at 4,096 GPUs, docs/scale.md).
        Record(
            recorded.THROTTLE,
            throttling.throttle_share_of_window(promql.RULES.where(CAUSE_VIOLATIONS), "5m", 300),
        ),
        # Minute by minute, so that "throttled for heat in each of the last five minutes" can
        # be asked: a 5-minute mean is above 0 for five minutes after any one-minute blip.
        Record(
            recorded.THERMAL_MINUTE,
            throttling.throttled_share_of_minute("thermal", THERMAL_REASONS),
        ),
    ]


def nvlink_rules(t: Thresholds) -> list[Record]:
    return [
        Record(
            recorded.NVLINK_ERRORS,
            "sum by («GPU_KEY», link) (mirrorwatch_gpu_nvlink_errors_total)",
        ),
    ]


def fleet_rules(t: Thresholds) -> list[Record]:
    """Per host, what the Fleet dashboard's Hosts table shows: each an aggregation over the
    host's GPUs, recorded once an evaluation so that the table reads one series a host."""
    per_host = "by («TARGET_KEY»)"
    gpu = promql.RULES
    return [
        Record(recorded.HOST_GPUS_UP, f"sum {per_host} ({GPU_UP})"),
        Record(recorded.HOST_UTIL_MEAN, f"avg {per_host} ({GPU_UTILIZATION_RATIO})"),
        Record(recorded.HOST_UTIL_MAX, f"max {per_host} ({GPU_UTILIZATION_RATIO})"),
        Record(recorded.HOST_TEMPERATURE_MAX, f"max {per_host} ({GPU_TEMPERATURE_CELSIUS})"),
        Record(
            recorded.HOST_SLOWDOWN_HEADROOM,
            f"min {per_host} («headroom»)",
            {"headroom": gpu_queries.slowdown_headroom(gpu)},
        ),
        Record(
            recorded.HOST_SLOWDOWN_THRESHOLD,
            f"min {per_host} («threshold»)",
            {"threshold": gpu_queries.slowdown_threshold(gpu)},
        ),
        # A GPU counts once whatever number of its reasons are active.
        Record(
            recorded.HOST_SLOWED_GPUS,
            f"sum {per_host} (max by («GPU_KEY») («slowed»))",
            {"slowed": gpu(GPU_CLOCKS_EVENT_ACTIVE, throttling.reasons(SLOWDOWN_REASONS))},
        ),
    ]
