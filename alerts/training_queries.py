"""PromQL of the training runs' series that the rules, the dashboards and the run report share."""

from __future__ import annotations

from mirrorwatch.alerts.promql import Select, rate, spread
from mirrorwatch.alerts.recorded import ACTIVE_REPLICA, RUN_GPU_UTIL
from mirrorwatch.contract.labels import UUID_KEY, WORKER_KEY
from mirrorwatch.contract.metrics import (
    TRAINING_ACTIVE,
    TRAINING_ALLREDUCE_SECONDS,
    TRAINING_EXAMPLES_PER_SECOND,
    TRAINING_EXAMPLES_TOTAL,
    TRAINING_INFO,
    TRAINING_LAST_PUSH_TIMESTAMP_SECONDS,
    TRAINING_REPLICA_INFO,
    TRAINING_REPLICA_MEMORY_BYTES,
    TRAINING_REPLICAS,
    TRAINING_STEP_DURATION_SECONDS,
    TRAINING_STEPS_TOTAL,
)


def run_gpus(s: Select) -> str:
    """The UUID_KEY of the GPUs the selected runs report, to filter GPU series."""
    return f"max by ({UUID_KEY}) ({s(TRAINING_REPLICA_INFO)})"


def of_run(expr: str, runs: Select) -> str:
    """The GPU series of ``expr`` that belong to the runs ``runs`` selects."""
    return f"({expr}) and on ({UUID_KEY}) {run_gpus(runs)}"


def replica_memory() -> str:
    """The memory each active replica's allocator holds now, with its GPU's labels."""
    return (
        f'{TRAINING_REPLICA_MEMORY_BYTES}{{kind="current"}}'
        f" * on ({WORKER_KEY}, replica) group_left (gpu, uuid) {ACTIVE_REPLICA}"
    )


def training_runs(s: Select) -> str:
    """Each run's worker, with its model and strategy, valued 1 while active."""
    return f"{s(TRAINING_INFO)} * on ({WORKER_KEY}) group_left () {s(TRAINING_ACTIVE)}"


def examples_per_second(s: Select) -> str:
    """Examples per second of each run, summed over its workers, as the callback reports it."""
    return f"sum by (run) ({s(TRAINING_EXAMPLES_PER_SECOND)})"


def examples_per_second_from_counter(s: Select, window: str) -> str:
    return f"sum by (run) ({rate(s(TRAINING_EXAMPLES_TOTAL), window)})"


def steps_per_second(s: Select, window: str) -> str:
    return f"sum by (run, worker) ({rate(s(TRAINING_STEPS_TOTAL), window)})"


def step_time_quantile(s: Select, quantile: float, window: str) -> str:
    buckets = rate(s(TRAINING_STEP_DURATION_SECONDS.part("bucket")), window)
    return f"histogram_quantile({quantile}, sum by (run, le) ({buckets}))"


def communication_share(s: Select, window: str) -> str:
    """Share of each worker's step time its gradient all-reduces were in flight, 0..1, where
    the worker measures them (the torch monitor on a DDP model: a series only where there is
    one, so a run without it gets no value rather than a 0)."""
    allreduce = rate(s(TRAINING_ALLREDUCE_SECONDS.part("sum")), window)
    steps = rate(s(TRAINING_STEP_DURATION_SECONDS.part("sum")), window)
    return f"clamp_max(sum by ({WORKER_KEY}) ({allreduce}) / sum by ({WORKER_KEY}) ({steps}), 1)"


def seconds_since_last_push(s: Select) -> str:
    last_push = s(TRAINING_LAST_PUSH_TIMESTAMP_SECONDS)
    return f"time() - max by (run, worker) ({last_push})"


def replicas(s: Select) -> str:
    return f"max by (run, worker) ({s(TRAINING_REPLICAS)})"


def run_mean_utilization(run_gpu: Select) -> str:
    """The mean of the run's per-GPU 1-minute utilisation (GpuUtilizationImbalance's input)."""
    return f"avg by (run) ({run_gpu(RUN_GPU_UTIL)})"


def run_utilization_spread(run_gpu: Select) -> str:
    return spread(run_gpu(RUN_GPU_UTIL), "run")
