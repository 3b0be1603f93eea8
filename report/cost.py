"""What each finding cost: the share of the run's throughput lost to it, by one method per kind.

Every method rests on how synchronous data parallelism works: each step waits for the slowest
replica and then for the all-reduce, so whatever slows one replica's step slows every step,
and the run's throughput is the gating replica's. Each method is one PromQL query per number
(fraction, low, high), shown with the finding as its other figures are, and states what it
assumes (`Method.assumes`, on the page and in docs/report.md). Where the evidence cannot
support a number the cost is None (`null` in findings.json) and the method says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.report.evidence import Ask, Figure, Finding, runbook
from mirrorwatch.report.hardware import held_back

LOST = "throughput lost"
LOW = "throughput lost, low bound"
HIGH = "throughput lost, high bound"
# Kinds whose finding is the symptom of another one on the same host (a throttled, slower
# or shared GPU shows as an imbalance): left out of the headline's sum when such a cause is
# costed, so one lost second is not counted twice.
SYMPTOMS = frozenset({"imbalance"})


@dataclass(frozen=True)
class Cost:
    """The estimated share of the run's throughput lost to one finding, with its bounds."""

    fraction: float
    low: float
    high: float
    method: str

    def as_json(self) -> dict[str, Any]:
        return {
            "fraction": round(self.fraction, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "method": self.method,
        }


Estimate = Callable[[Ask, Thresholds, Finding], tuple[str, str, str] | None]


@dataclass(frozen=True)
class Method:
    """How one kind of finding is costed: ``estimate`` gives the queries of the fraction, its
    low and its high bound for a finding (None: no number), ``assumes`` says on what grounds."""

    name: str
    assumes: str
    estimate: Estimate | None = None
    # The labels that pick the finding's series in the answers: its GPU's, or (a finding of
    # the whole host) its instance's.
    per_gpu: bool = True
    # Costs nothing by its nature (no estimate needed): 0, 0..0.
    free: bool = False


def _key(finding: Finding, per_gpu: bool) -> dict[str, str]:
    labels = {"instance": finding.instance or ""}
    return labels | ({"gpu": finding.gpu} if per_gpu and finding.gpu is not None else {})


def _held(ask: Ask, expr: str, condition: str) -> str:
    s = ask.scope
    return q.held_sum(expr, condition, s.window, s.resolution, s.steps)


def _one_step_longer(ask: Ask, expr: str, condition: str) -> str:
    """``expr``'s worst value at the points ``condition`` held, for one more sampling point
    than it held: what the share would be if the sampling missed one point at each edge."""
    s = ask.scope
    held = f"count_over_time(({condition})[{s.window}:{s.resolution}])"
    worst = (
        f"max_over_time((({expr}) and on ({q.GPU_KEY}) ({condition}))[{s.window}:{s.resolution}])"
    )
    return f"clamp_max(({held} + 1) / {s.steps} * on ({q.GPU_KEY}) {worst}, 1)"


# --- clocks: thermal throttling, power capping, hardware slowdown ---------------------------


def _clock(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str]:
    sel = ask.scope.gpus_select
    held = held_back(sel, f.kind)
    ratio = q.sm_clock_ratio(sel)
    # Compute-bound, a step takes 1/r as long at clock ratio r: r of the throughput is left.
    lost = f"1 - ({ratio})"
    # Half of each step memory- or communication-bound: it takes (1/r + 1) / 2 as long.
    half = f"(1 - ({ratio})) / (1 + ({ratio}))"
    return _held(ask, lost, held), _held(ask, half, held), _one_step_longer(ask, lost, held)


CLOCK = Method(
    "clock",
    "The GPU gated every synchronous step while it was held back, and a step takes 1/r as long "
    "at an SM clock r of its maximum (compute-bound): the run lost 1 - r of its throughput at "
    "each such moment, 0 at the others, averaged over the range. Low bound: half of each step "
    "does not scale with the SM clock (memory, the all-reduce). High bound: the lowest clock "
    "seen while held, for one sampling point longer than it held.",
    _clock,
)


# --- links ----------------------------------------------------------------------------------


def _pcie(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str]:
    sel, window = ask.scope.gpus_select, _rate_window(ask)
    held = q.pcie_link_degraded(sel, t.busy_utilization_ratio)
    speed = (
        f"({q.pcie_link_bytes_per_second(sel)}) / on ({q.GPU_KEY}) "
        f"({q.pcie_link_bytes_per_second(sel, '_max')})"
    )
    receive = q.pcie_busy_share(sel, "receive", window)
    both = f"({receive}) + on ({q.GPU_KEY}) ({q.pcie_busy_share(sel, 'transmit', window)})"
    # The copy took `busy` of each second at this link; at its maximum it would take
    # `speed` of that: the rest is what the step lost.
    lost = f"clamp_max({receive}, 1) * on ({q.GPU_KEY}) (1 - {speed})"
    high = f"clamp_max({both}, 1) * on ({q.GPU_KEY}) (1 - {speed})"
    return _held(ask, lost, held), _held(ask, f"({lost}) / 2", held), _held(ask, high, held)


PCIE = Method(
    "link",
    "The GPU's PCIe receive traffic is its input batches, copied before each step and not "
    "overlapped with compute, and the step waited for this GPU's copy: the copy took the "
    "link's busy share b (bytes received per second over what the link carries at the "
    "generation and width it ran at) of each second, and would take s of that at the link's "
    "maximum, s being the ratio of the two speeds; the run lost b (1 - s) while degraded. Low "
    "bound: half the copy overlapped with compute. High bound: the transmit traffic waited "
    "on the link too.",
    _pcie,
)


def _interconnect(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str] | None:
    if not any(figure.name.startswith("link to GPU") for figure in f.figures):
        return None  # an NVLink link down: the others carry its traffic, at a speed not measured
    sel, window = ask.scope.gpus_select, _rate_window(ask)
    pairs = sel("mirrorwatch_gpu_p2p_link_info", 'link!="nvlink"')
    held = f"max by ({q.GPU_KEY}) ({pairs})"
    transmit = f"clamp_max({q.pcie_busy_share(sel, 'transmit', window)}, 1)"
    both = (
        f"clamp_max(({q.pcie_busy_share(sel, 'transmit', window)}) + on ({q.GPU_KEY}) "
        f"({q.pcie_busy_share(sel, 'receive', window)}), 1)"
    )
    return _held(ask, transmit, held), _held(ask, f"{transmit} / 2", held), _held(ask, both, held)


INTERCONNECT = Method(
    "all-reduce over PCIe",
    "Without NVLink the all-reduce goes over PCIe: the GPU's transmit traffic is the gradients "
    "it sends, on every step's critical path, and over NVLink (several times faster) that "
    "time would all but vanish: the run lost the link's transmit busy share. Low bound: half "
    "of the all-reduce overlapped with the backward pass. High bound: the receive traffic "
    "was all-reduce too. An NVLink link down has no number: its peers' other links carry the "
    "traffic at a speed the telemetry does not show.",
    _interconnect,
)


# --- the run --------------------------------------------------------------------------------


def _imbalance(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str]:
    s = ask.scope
    means = q.gpu_utilization_mean(s.gpus_select, s.window)
    spread = q.gpu_utilization_spread(s.gpus_select, s.window)
    leader = f"max by (instance) ({means})"
    deficit = f"avg by (instance) ({means}) - min by (instance) ({means})"
    return spread, deficit, f"clamp_max({spread} / {leader}, 1)"


IMBALANCE = Method(
    "waiting",
    "The faster GPUs waited for the lagging one at every step's all-reduce, and counted that "
    "wait as busy (NCCL's all-reduce kernel spins while it waits), so the lagging GPU's idle "
    "time beyond the leader's was on every step's critical path: the run lost the spread of "
    "the range means (leader minus lagger). Low bound: only the lagger's deficit to the mean "
    "was lost. High bound: the spread as a share of the leader's busy time.",
    _imbalance,
    per_gpu=False,
)


def _input(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str]:
    s, sel = ask.scope, ask.scope.gpus_select
    cut = t.input_bound.busiest_below_ratio
    busiest = f"max by (instance) ({q.gpu_utilization_mean(sel, '1m')})"
    held = q.all_gpus_below(sel, "1m", cut)

    def mean(expr: str) -> str:
        return q.held_sum(expr, held, s.window, s.resolution, s.steps, key="instance")

    lost = mean(f"1 - {busiest}")
    return lost, mean(f"clamp_min(1 - {busiest} / {num(cut)}, 0)"), lost


INPUT = Method(
    "input wait",
    "Even the busiest GPU was idle for the time it waited for its next batch (data loading, "
    "the host CPU), on every step's critical path: the run lost the busiest GPU's idle share "
    "while input-bound. Low bound: a GPU fed at once is only as busy as the input-bound cut, "
    "so only the idle time below it was lost. High bound: the idle share itself (no more "
    "than all of it can be lost).",
    _input,
    per_gpu=False,
)


def _lost_gpu(ask: Ask, t: Thresholds, f: Finding) -> tuple[str, str, str] | None:
    if f.runbook != runbook("GpuLost"):
        return None
    held = q.gpu_lost(ask.scope.gpus_select)
    share = q.held_share(held, ask.scope.window, ask.scope.resolution, ask.scope.steps)
    return share, share, share


GPU_ERROR = Method(
    "stopped",
    "A lost GPU stops every synchronous step: the run lost all its throughput while the GPU "
    "was lost. An XID or ECC error has no number: what it cost (a crash, a restart, nothing) "
    "is not in the telemetry.",
    _lost_gpu,
)


METHODS: dict[str, Method] = {
    "thermal_throttling": CLOCK,
    "power_capping": CLOCK,
    "hardware_slowdown": CLOCK,
    "pcie_degraded": PCIE,
    "interconnect": INTERCONNECT,
    "imbalance": IMBALANCE,
    "input_bound": INPUT,
    "gpu_error": GPU_ERROR,
    "temperature_headroom": Method(
        "no clock lost",
        "Close to its slowdown temperature a GPU still runs at full clock: nothing lost until "
        "it throttles, which the thermal_throttling finding costs.",
        free=True,
    ),
    "foreign_process": Method(
        "no number",
        "How much of the GPU the other process took is not published (only its memory and "
        "that it is there), so its cost cannot be told.",
    ),
    "telemetry_gap": Method(
        "no number",
        "What happened during the gap is not in the telemetry, so neither is what it cost.",
    ),
    "none": Method("nothing lost", "Nothing found that costs throughput.", free=True),
}


def _rate_window(ask: Ask) -> str:
    # At least four scrapes of a 1 s to 15 s interval, and at least four sampling points.
    return f"{max(60, 4 * ask.scope.step)}s"


def _figure(ask: Ask, name: str, query: str, finding: Finding, per_gpu: bool) -> Figure | None:
    figure = ask.figure(name, "ratio", query, _key(finding, per_gpu))
    if figure is None or not math.isfinite(figure.value):
        return None
    return figure


def costed(ask: Ask, t: Thresholds, finding: Finding) -> Finding:
    """The finding with its cost (None where its method gives no number) and that cost's
    figures among its own."""
    method = METHODS[finding.kind]
    if method.free:
        return replace(finding, cost=Cost(0.0, 0.0, 0.0, method.name))
    queries = method.estimate(ask, t, finding) if method.estimate is not None else None
    if queries is None:
        return finding
    figures = [
        _figure(ask, name, query, finding, method.per_gpu)
        for name, query in zip((LOST, LOW, HIGH), queries, strict=True)
    ]
    if any(f is None for f in figures):
        return finding
    lost, low, high = (max(0.0, min(1.0, f.value)) for f in figures if f is not None)
    cost = Cost(lost, min(low, lost), max(high, lost), method.name)
    kept = [f for f in figures if f is not None]
    return replace(finding, figures=[*finding.figures, *kept], cost=cost)


def combined(findings: Sequence[Finding]) -> Cost | None:
    """The share of throughput lost to all costed findings together, as independent causes
    (what is left is the product of what each leaves); None when none has a cost. A symptom
    (an imbalance) counts only on a host where no other finding is costed; of a host's
    throttled GPUs only the costliest counts."""
    causes = {f.instance for f in findings if f.cost is not None and f.kind not in SYMPTOMS}
    # Throttled GPUs of one host: the slowest gates the steps and the others wait for it
    # anyway, so they count as the costliest of them (exact where they overlap in time).
    slowest: dict[str | None, Cost] = {}
    counted = []
    for f in findings:
        if f.cost is None or (f.kind in SYMPTOMS and f.instance in causes):
            continue
        if f.cost.method == CLOCK.name:
            held = slowest.get(f.instance)
            slowest[f.instance] = (
                f.cost if held is None or f.cost.fraction > held.fraction else held
            )
        else:
            counted.append(f.cost)
    counted += slowest.values()
    if not counted:
        return None

    def together(parts: Sequence[float]) -> float:
        return 1 - math.prod(1 - p for p in parts)

    return Cost(
        together([c.fraction for c in counted]),
        together([c.low for c in counted]),
        together([c.high for c in counted]),
        "independent causes",
    )


def without_causes(headline: dict[str, Any], findings: Sequence[Finding]) -> dict[str, Any]:
    """The headline with the costs of its findings together, and the throughput (and speed-up,
    where a single-replica baseline is known) the run would have had without them."""
    cost = combined(findings)
    left = None if cost is None or cost.fraction >= 1 else 1 - cost.fraction
    rate, speedup = headline.get("examples_per_second"), headline.get("speedup")
    return headline | {
        "cost": None if cost is None else cost.as_json(),
        "examples_per_second_without_causes": None if rate is None or left is None else rate / left,
        "speedup_without_causes": None if speedup is None or left is None else speedup / left,
    }


def in_words(cost: Cost | None, kind: str) -> str:
    """The cost as the page says it."""
    if cost is None:
        return f"Cost: no number. {METHODS[kind].assumes}"
    if cost.high == 0:
        return "Cost: none."
    return (
        f"Cost: about {_percent(cost.fraction)} of the run's throughput "
        f"(between {_percent(cost.low)} and {_percent(cost.high)}), by the {cost.method} method."
    )


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f} %" if ratio >= 0.1 or ratio == 0 else f"{ratio * 100:.1f} %"
