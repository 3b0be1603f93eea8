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


def examples_per_second_between_pushes(s: Select, window: str) -> str:
    """Examples per second of each run over ``window``: each worker's examples between the
    window's first and last push over the time between them as its exporter received them,
    summed over the workers.

    A pushed counter moves once a push, so rate() over scrape times aliases: a push landing
    just before or just after a scrape shifts the window's first or last sample by a whole
    push (3 % of a 40 s run pushing every second, measured in tests/report). The exporter's
    receive time of each push rides on the same scrape as its totals, which makes this exact.
    A worker with one push in the window, or whose counter restarted in it (a new session),
    falls back to rate().
    """
    examples, pushed = s(TRAINING_EXAMPLES_TOTAL), s(TRAINING_LAST_PUSH_TIMESTAMP_SECONDS)

    def spanned(selector: str) -> str:
        return (
            f"max by ({WORKER_KEY}) (max_over_time({selector}[{window}]))"
            f" - min by ({WORKER_KEY}) (min_over_time({selector}[{window}]))"
        )

    exact = (
        f"({spanned(examples)}) / ({spanned(pushed)} > 0)"
        f" and on ({WORKER_KEY}) max by ({WORKER_KEY}) (resets({examples}[{window}])) == 0"
    )
    fallback = f"sum by ({WORKER_KEY}) ({rate(examples, window)})"
    return f"sum by (run) (({exact}) or {fallback})"


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
