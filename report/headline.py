"""The headline: how long the run was, how fast it went, how far from ideal, and how much of
that no finding explains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirrorwatch.alerts import gpu_queries, training_queries
from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.metrics import (
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_WIDTH,
    TRAINING_EXAMPLES_TOTAL,
    TRAINING_GRADIENT_BYTES,
    TRAINING_REPLICAS,
    TRAINING_SCALING_SPEEDUP,
)
from mirrorwatch.contract.pcie import PCIE_LANE_BYTES_PER_SECOND
from mirrorwatch.report import queries as q
from mirrorwatch.report.cost import Cost, combined
from mirrorwatch.report.evidence import Ask, Finding
from mirrorwatch.report.scope import format_time
from mirrorwatch.report.words import percent, plural


def _per_worker_total(run: Select, metric: str, window: str) -> str:
    """A per-worker figure of ``metric`` (its last running total, its replicas) added up over
    the run's workers: each worker once, however many targets scrape it."""
    return f"sum by (run) (max by (run, worker) (max_over_time({run(metric)}[{window}])))"


def run_queries(run: Select, window: str) -> dict[str, str]:
    """The run's own figures, each one query.

    Every worker of a synchronous run makes every step: the steps are the most any worker
    counted, not their sum. Each worker counts its share of the examples: those add up. Both
    are the raw running totals (their largest value in the range), not increase(), which
    cannot see a counter's first sample rise from 0 and so would miss each worker's first
    push. The ideal speed-up is every replica of every worker (two DDP ranks of one GPU each:
    2x), and the run's speed-up the sum of its workers' (each measures its share of the
    throughput against one replica's).
    """
    ideal = _per_worker_total(run, TRAINING_REPLICAS, window)
    speedup = (
        "sum by (run) (avg by (run, worker) (avg_over_time("
        f"{run(TRAINING_SCALING_SPEEDUP)}[{window}])))"
    )
    return {
        "steps": q.training_steps(run, window),
        "examples": _per_worker_total(run, TRAINING_EXAMPLES_TOTAL, window),
        "examples_per_second": training_queries.examples_per_second_between_pushes(run, window),
        "step_time_p50_seconds": training_queries.step_time_quantile(run, 0.5, window),
        "replicas": ideal,
        "speedup": speedup,
        "scaling_efficiency": f"({speedup}) / on (run) ({ideal})",
        "allreduce_share": f"min by (run) ({training_queries.communication_share(run, window)})",
        "gradient_bytes": f"max by (run) (max_over_time({run(TRAINING_GRADIENT_BYTES)}[{window}]))",
    }


def allreduce_estimate(
    gradient_bytes: float, replicas: float, generation: float, width: float, step_seconds: float
) -> dict[str, Any] | None:
    """What a ring all-reduce of the gradients over the GPUs' slowest PCIe link takes, and its
    share of a step, as mirrorwatch-doctor --probe reckons it: each replica sends and receives
    2 (n - 1) / n of the gradient bytes (NCCL's bus bandwidth, nccl-tests PERFORMANCE.md), at
    the link's payload rate. An estimate: NVLink would be faster, and an all-reduce overlapped
    with the backward pass hides part of it."""
    rate = PCIE_LANE_BYTES_PER_SECOND.get(int(generation))
    if rate is None or replicas < 2 or width < 1 or step_seconds <= 0 or gradient_bytes <= 0:
        return None
    seconds = 2 * (replicas - 1) / replicas * gradient_bytes / (rate * width)
    return {
        "seconds": round(seconds, 6),
        "share": round(min(1.0, seconds / step_seconds), 4),
        "gradient_bytes": int(gradient_bytes),
        "link": f"PCIe gen {int(generation)} x{int(width)}",
    }


def headline(ask: Ask, t: Thresholds) -> dict[str, Any]:
    s = ask.scope
    queries: dict[str, str] = {}
    if s.gpus_reported:
        # A run that reported no GPUs did not train on these: their busy time is not its.
        queries["mean_utilization"] = (
            f"avg ({gpu_queries.gpu_utilization_mean(s.gpus_select, s.window)})"
        )
        # The run's slowest link, for the all-reduce estimate where none is measured.
        for name, metric in (
            ("pcie_generation", GPU_PCIE_LINK_GENERATION),
            ("pcie_width", GPU_PCIE_LINK_WIDTH),
        ):
            queries[name] = f"min(min_over_time({s.gpus_select(metric)}[{s.window}]))"
    if s.run is not None:
        queries |= run_queries(s.run_select, s.window)
    values = {name: ask.one(query) for name, query in queries.items()}
    target = t.TrainingScalingEfficiencyLow.efficiency_ratio
    replicas = values.get("replicas")
    speedup = values.get("speedup")
    efficiency = values.get("scaling_efficiency")
    result: dict[str, Any] = {
        "run": s.run,
        "instances": list(s.instances),
        "gpus": [
            {"instance": g.instance, "gpu": g.gpu, "uuid": g.uuid, "name": g.name} for g in s.gpus
        ],
        "gpus_reported": s.gpus_reported,
        "start": s.start,
        "end": s.end,
        "start_text": format_time(s.start),
        "end_text": format_time(s.end),
        "duration_seconds": s.seconds,
        "step_seconds": s.step,
        **values,
        "ideal_speedup": replicas,
        "efficiency_target": target,
        "speedup_at_target": replicas * target if replicas else None,
        "meets_target": None if efficiency is None else efficiency >= target,
        # The share of the ideal throughput the run did not reach: 1 - speed-up / ideal.
        "lost": None if efficiency is None else round(min(1.0, max(0.0, 1 - efficiency)), 4),
        "queries": queries,
    }
    figures = [
        values.get(name) for name in ("gradient_bytes", "replicas", "pcie_generation", "pcie_width")
    ]
    figures.append(values.get("step_time_p50_seconds"))
    result["allreduce_estimate"] = None
    if values.get("allreduce_share") is None and all(f is not None for f in figures):
        gradient, n, generation, width, step = (float(f or 0) for f in figures)
        result["allreduce_estimate"] = allreduce_estimate(gradient, n, generation, width, step)
    result["verdict"] = verdict(speedup, replicas, efficiency, target)
    return result


def _bounded(cost: Cost, lost: float | None) -> Cost:
    """``cost`` no larger than what the run lost: causes that overlap (or estimates that run
    high) cannot win back more than the ideal."""
    if lost is None:
        return cost
    return Cost(min(cost.fraction, lost), min(cost.low, lost), min(cost.high, lost), cost.method)


def _unexplained(lost: float, explained: float) -> float:
    """The share of the ideal not reached even without the causes: the run does 1 - lost of
    the ideal, 1 - explained of what it would do without them."""
    return min(lost, max(0.0, 1 - (1 - lost) / (1 - explained)))


def accounted(h: dict[str, Any], findings: Sequence[Finding]) -> dict[str, Any]:
    """The headline with the findings' costs together (bounded by the loss where a baseline is
    known), what the run would do without them (never above the ideal), and ``unexplained``:
    the share of the ideal throughput that no finding's cost covers (0..lost)."""
    found = combined(findings)
    lost = h.get("lost")
    cost = None if found is None else _bounded(found, lost)
    left = None if cost is None or cost.fraction >= 1 else 1 - cost.fraction
    rate, speedup, ideal = h.get("examples_per_second"), h.get("speedup"), h.get("ideal_speedup")
    without = None if speedup is None or left is None else speedup / left
    if without is not None and ideal:
        without = min(without, float(ideal))
    unexplained = unexplained_low = unexplained_high = None
    if lost is not None:
        # Without any costed finding nothing of the loss is explained.
        c = cost or Cost(0.0, 0.0, 0.0, "none")
        unexplained = _unexplained(lost, c.fraction)
        unexplained_low, unexplained_high = _unexplained(lost, c.high), _unexplained(lost, c.low)
    return h | {
        "cost": None if cost is None else cost.as_json(),
        # Where the bound cut the findings' own sum (they overlap, or estimate high).
        "cost_before_bound": None
        if found is None or cost is None or found.fraction <= cost.fraction
        else found.as_json(),
        "examples_per_second_without_causes": None if rate is None or left is None else rate / left,
        "speedup_without_causes": without,
        "unexplained": None if unexplained is None else round(unexplained, 4),
        "unexplained_low": None if unexplained_low is None else round(unexplained_low, 4),
        "unexplained_high": None if unexplained_high is None else round(unexplained_high, 4),
    }


def verdict(
    speedup: float | None, replicas: float | None, efficiency: float | None, target: float
) -> str:
    """The headline's sentence on scaling, or why there is none."""
    if speedup is None or efficiency is None or not replicas:
        return "No scaling figures: the trainer reported no single-replica baseline."
    ideal = f"{replicas:.0f}x"
    on = plural(round(replicas), "replica")
    if efficiency >= target:
        return (
            f"{speedup:.2f}x on {on}: {percent(efficiency)} of ideal ({ideal}), "
            f"meeting the {percent(target)} target."
        )
    return (
        f"{speedup:.2f}x on {on} instead of {replicas * target:.2f}x: "
        f"{percent(efficiency)} of ideal ({ideal}), below the {percent(target)} target."
    )
