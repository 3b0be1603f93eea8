"""The recording rules' series names (level:metric:operation), each written once: the rules
record them, and the rules, dashboards and report read them by these names."""

from __future__ import annotations

GPU_UTIL = "instance_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
ACTIVE_REPLICA = "instance_run:mirrorwatch_training_replica_info:active"
RUN_GPU_UTIL = "run_gpu:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_UTIL = "run:mirrorwatch_gpu_utilization_ratio:avg1m"
RUN_SPREAD = "run:mirrorwatch_gpu_utilization_ratio:spread1m"
RUN_GPU_DEVIATION = "run_gpu:mirrorwatch_gpu_utilization_ratio:deviation1m"
HOST_SPREAD = "instance:mirrorwatch_gpu_utilization_ratio:spread1m"
THROTTLE = "instance_gpu:mirrorwatch_gpu_throttle_seconds:rate5m"
# Per GPU: the share of the last minute it was throttled for heat (GpuThermalThrottling).
THERMAL_MINUTE = "instance_gpu:mirrorwatch_gpu_thermal_throttle:ratio1m"
# Per GPU and link: its replay, recovery and CRC error counters added up, recorded at every
# evaluation (the scrape's resolution), so that GpuNvlinkErrors takes the 10-minute increase of
# one series per link rather than of one per link and error type (4 times as many samples).
# The four counters of a link are the driver's and reset together, with the driver: their sum
# is a counter too.
NVLINK_ERRORS = "instance_gpu_link:mirrorwatch_gpu_nvlink_errors_total:sum"
THROUGHPUT = "instance_run:mirrorwatch_training_examples_per_second:sum"
THROUGHPUT_BASELINE = "instance_run:mirrorwatch_training_examples_per_second:median1h"
GPU_SM_ACTIVITY = "instance_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m"
RUN_GPU_SM_ACTIVITY = "run_gpu:mirrorwatch_gpu_sm_activity_ratio:avg1m"
# Per run GPU: SM activity (GPM) where every GPU of the run has it, else utilisation; the
# `source` label says which (sm_activity, utilization). The run's spread is taken of this.
RUN_GPU_BALANCE = "run_gpu:mirrorwatch_gpu_balance_ratio:avg1m"


# A run across hosts (MultiWorkerMirroredStrategy): each worker reports its own share of the
# examples, so the run's throughput is their sum; its steps are every worker's (never summed).
RUN_THROUGHPUT = "run:mirrorwatch_training_examples_per_second:sum"
RUN_THROUGHPUT_BASELINE = "run:mirrorwatch_training_examples_per_second:median1h"
RUN_WORKERS = "run:mirrorwatch_training_active:count"
# Per GPU: busy (utilisation at least the threshold) and in no active run; the host-level cause
# rules read it many times an evaluation instead of the join.
BUSY_UNASSIGNED = "instance_gpu:mirrorwatch_gpu_utilization_ratio:busy_unassigned"

# Per host (the target key), for the Fleet dashboard: one series a host, read in place of an
# aggregation over every GPU of the fleet at each refresh (the Hosts table's nine took 1.77 s,
# its three graphs over an hour 9 s, at 4,096 GPUs: docs/scale.md). Each is the aggregation
# the dashboard used to ask, recorded.
HOST_GPUS_UP = "instance:mirrorwatch_gpu_up:sum"
HOST_UTIL_MEAN = "instance:mirrorwatch_gpu_utilization_ratio:avg"
HOST_UTIL_MAX = "instance:mirrorwatch_gpu_utilization_ratio:max"
HOST_TEMPERATURE_MAX = "instance:mirrorwatch_gpu_temperature_celsius:max"
# Degrees from the hottest GPU (against its own threshold) up to its slowdown temperature.
HOST_SLOWDOWN_HEADROOM = "instance:mirrorwatch_gpu_slowdown_headroom_celsius:min"
# The lowest slowdown threshold of the host's GPUs (the hottest-GPU panel's dashed line).
HOST_SLOWDOWN_THRESHOLD = "instance:mirrorwatch_gpu_temperature_threshold_celsius:slowdown_min"
# How many of the host's GPUs are slowed now (a thermal, power or hardware reason active).
HOST_SLOWED_GPUS = "instance:mirrorwatch_gpu_clocks_event_active:slowed_gpus"
