"""Live costs: what each GPU of an active run costs the run now, by its cause, and over 5 minutes.

One series per run GPU and costed cause (`run_gpu:mirrorwatch_gpu_cause_cost:ratio`, 0 while
the cause does not hold, so that its 5-minute mean is the report's "held share x cost"), and
their 5-minute means (`...:avg5m`), which TrainingHeldBack, the Why panel and the run report
read alike. The methods are the run report's (report/cost.py, docs/report.md):

- clock causes (heat, power cap, hardware slowdown): a compute-bound step takes 1/r as long at
  an SM clock r of the maximum, so the run loses 1 - r while the cause holds (the same
  "held" condition as the cause rules: mirrorwatch.alerts.queries.held);
- straggler, measured: where the workers time their all-reduces (the torch monitor on DDP),
  the worker that waits least is the one the others wait for, and what it costs is the others'
  mean all-reduce share beyond its own, when that is at least «straggler_wait» (5 points);
- straggler, estimated (no all-reduce timing, one host): in a synchronous step the GPU the
  others wait for draws the most power (a GPU waiting in the all-reduce runs near idle,
  NVIDIA/nccl#968), so the run loses about 1 - (its peers' mean power / its own) where no
  hardware cause, other process or slower link holds on it;
- imbalance: the GPU lags the run's busiest by its utilisation (or SM activity) gap.
"""

from __future__ import annotations

from mirrorwatch.alerts import gpu_queries, promql, recorded, throttling, training_queries
from mirrorwatch.alerts.fragments import fill, num
from mirrorwatch.alerts.rules import Record
from mirrorwatch.alerts.rules.causes import RUN_GPU_CAUSE, RUN_GPU_KEY, attach_run
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import THROTTLES, cause
from mirrorwatch.contract.labels import GPU_KEY, RUN_KEY, WORKER_KEY

COST = "run_gpu:mirrorwatch_gpu_cause_cost:ratio"
COST_5M = "run_gpu:mirrorwatch_gpu_cause_cost:avg5m"
# The most costly GPU and cause of each run over the last 5 minutes (TrainingHeldBack's).
RUN_COST_5M = "run:mirrorwatch_gpu_cause_cost:max5m"
# A worker's all-reduce share beyond the least of its run's, to name the least a straggler.
STRAGGLER_WAIT = 0.05
RUN_GPU_POWER = "run_gpu:mirrorwatch_gpu_power_watts:avg1m"


# The finding kinds with a live cost, as the `cause` label of COST and COST_5M.
COSTED_KINDS = (*(c.kind for c in THROTTLES), "straggler", "imbalance")


def _zero_where_not(expr: str, every: str) -> str:
    """``expr`` on the GPUs it holds for, 0 on the other GPUs of ``every``."""
    return f"(\n  {expr}\n)\nor on ({RUN_GPU_KEY})\n({every}) * 0"


def clock_cost(kind: str) -> str:
    """1 - SM clock ratio on each run GPU while ``kind`` holds it back. The condition is asked
    again rather than read from the cause rules' series: those need the cause's evidence too
    (a temperature, a power limit), which the cost does not."""
    held = throttling.held(cause(kind), promql.RULES)
    lost = f"(1 - ({gpu_queries.sm_clock_ratio(promql.RULES)}))\nand on ({GPU_KEY})\n({held})"
    # Only the GPUs it holds: the run's other GPUs get their 0 from _zero_where_not.
    return attach_run(f"max by ({GPU_KEY}) (\n  {lost}\n)")


def measured_straggler(window: str = "5m") -> str:
    """Per run GPU of the worker the others wait for: their mean all-reduce share beyond its."""
    # By run alone: the workers of a run across hosts report to their own hosts' exporters.
    share = training_queries.communication_share(promql.RULES, window)
    least = f"min by (run) ({share})"
    others = (
        f"(sum by (run) ({share}) - on (run) {least})\n/ on (run) (count by (run) ({share}) - 1)"
    )
    excess = f"({others}) - on (run) {least}"
    straggler = f"({share}) == on (run) group_left () {least}"
    worker_cost = (
        f"({straggler}) * 0 + on (run) group_left () (({excess}) >= {num(STRAGGLER_WAIT)})"
    )
    return (
        f"max by ({RUN_GPU_KEY}) (\n  {recorded.ACTIVE_REPLICA}\n"
        f"  * on ({WORKER_KEY}) group_left ()\n  ({worker_cost})\n)"
    )


def estimated_straggler() -> str:
    """Per run GPU drawing the most power of its run: 1 - its peers' mean power over its own."""
    power = RUN_GPU_POWER
    peers = (
        f"(sum by ({RUN_KEY}) ({power}) - on ({RUN_KEY}) group_right () {power})\n"
        f"/ on ({RUN_KEY}) group_left () (count by ({RUN_KEY}) ({power}) - 1)"
    )
    top = f"{power} == on ({RUN_KEY}) group_left () max by ({RUN_KEY}) ({power})"
    pair = f"on ({RUN_KEY}) (count by ({RUN_KEY}) ({power}) > 1)"
    known = f'{RUN_GPU_CAUSE}{{cause!~"imbalance|none"}}'
    return fill(
        "clamp_min(1 - («peers») / «power», 0)\nand «top»\nand «pair»\nunless on («key») «known»",
        {
            "peers": peers,
            "power": power,
            "top": top,
            "pair": pair,
            "key": RUN_GPU_KEY,
            "known": known,
        },
    )


def imbalance_cost() -> str:
    """The run GPU's lag behind the busiest, where the cause rules found no other cause."""
    return f'max by ({RUN_GPU_KEY}) ({RUN_GPU_CAUSE}{{cause="imbalance"}})'


def _costs(costed: list[tuple[str, str]]) -> list[Record]:
    return [
        Record(COST, _zero_where_not(expr, recorded.RUN_GPU_UTIL), labels={"cause": kind})
        for kind, expr in costed
    ]


def rules(t: Thresholds) -> list[Record]:
    """The clock causes' costs, and each run GPU's power, which the straggler's estimate reads."""
    return [
        Record(
            RUN_GPU_POWER,
            "max by («RUN_KEY», gpu, uuid) (\n"
            "  instance_run:mirrorwatch_training_replica_info:active\n"
            "  * on («UUID_KEY») group_left (gpu)\n"
            "    avg_over_time(mirrorwatch_gpu_power_watts[1m])\n)",
        ),
        *_costs([(c.kind, clock_cost(c.kind)) for c in THROTTLES]),
    ]


def run_rules(t: Thresholds) -> list[Record]:
    """The straggler's and the imbalance's costs."""
    return [
        *_costs(
            [
                (
                    "straggler",
                    f"(\n  {measured_straggler()}\n)\nor\n(\n  {estimated_straggler()}\n)",
                ),
                ("imbalance", imbalance_cost()),
            ]
        ),
    ]


def mean_rules(t: Thresholds) -> list[Record]:
    """Every cost's 5-minute mean, and each run's costliest: what TrainingHeldBack reads."""
    return [
        Record(COST_5M, f"avg_over_time({COST}[5m])"),
        Record(RUN_COST_5M, f"max by ({RUN_KEY}) ({COST_5M})"),
    ]
