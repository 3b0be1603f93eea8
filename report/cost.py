"""What each finding cost: the share of the run's throughput lost to it, by one method per kind.

Every method rests on how synchronous data parallelism works: each step waits for the slowest
replica and then for the all-reduce, so whatever slows one replica's step slows every step,
and the run's throughput is the gating replica's. Each method is one PromQL query per number
(fraction, low, high), shown with the finding as its other figures are, and states what it
assumes (`Method.assumes`, on the page and in docs/report.md). Where the evidence cannot
support a number the cost is None (`null` in findings.json) and the method says why.

The links' costs have two methods: where the run's workers published their all-reduce time
(the torch monitor on a DDP model) it is measured, and the cost comes from it (`measured`);
elsewhere (TensorFlow runs) it is estimated from the GPU's PCIe counters, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mirrorwatch.alerts import gpu_queries
from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.rules.costs import COST, COST_5M, COSTED_KINDS
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.labels import GPU_KEY, TARGET_KEY, UUID_KEY
from mirrorwatch.contract.metrics import (
    GPU_P2P_LINK_INFO,
)
from mirrorwatch.report import queries as q
from mirrorwatch.report.evidence import Ask, Figure, Finding, runbook
from mirrorwatch.report.hardware import held_back
from mirrorwatch.report.scope import Key, labels_of

LOST = "throughput lost"
LOW = "throughput lost, low bound"
HIGH = "throughput lost, high bound"
# The measured methods' own figures.
ALLREDUCE_SHARE = "measured all-reduce share of step time"
LOST_IN_ALLREDUCE = "throughput lost in the all-reduce"
LOST_IN_COPIES = "throughput lost in input copies"
# The live cost at the range's end (alerts/rules/costs.py): the alert's and the Why panel's figure.
LIVE_COST = "throughput lost over the last 5 minutes (live, as TrainingHeldBack says it)"
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
    # The part of ``fraction`` that is the all-reduce's extra time on a degraded link (a
    # measured PCIe cost): a measured interconnect cost of the same host counts it too.
    allreduce: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "fraction": round(self.fraction, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "method": self.method,
        }


@dataclass(frozen=True)
class Queries:
    """The queries of a cost's fraction, low and high bound, and of the figures it rests on
    that are worth showing beside them (``shown``: name, query)."""

    lost: str
    low: str
    high: str
    shown: tuple[tuple[str, str], ...] = ()


Estimate = Callable[[Ask, Thresholds, Finding], Queries | None]


@dataclass(frozen=True)
class Method:
    """How one kind of finding is costed: ``estimate`` gives the queries of the fraction, its
    low and its high bound for a finding (None: no number), ``assumes`` says on what grounds."""

    name: str
    assumes: str
    estimate: Estimate | None = None
    # The labels that pick the finding's series in the answers: its GPU's, or (a finding of
    # the whole host) its target's.
    per_gpu: bool = True
    # Costs nothing by its nature (no estimate needed): 0, 0..0.
    free: bool = False
    # What the number rests on, as the page says it after the method's name (empty: nothing
    # to add).
    basis: str = ""
    # The method tried first, where it gives a number (the measured all-reduce).
    measured: Method | None = None


def _key(finding: Finding, per_gpu: bool) -> dict[str, str]:
    labels = finding.labels or {"instance": finding.instance or ""}
    if per_gpu:
        return dict(labels) | ({"gpu": finding.gpu} if finding.gpu is not None else {})
    return labels_of(finding.target)


def _held(ask: Ask, expr: str, condition: str) -> str:
    s = ask.scope
    return q.held_sum(expr, condition, s.window, s.resolution, s.steps)


def _one_step_longer(ask: Ask, expr: str, condition: str) -> str:
    """``expr``'s worst value at the points ``condition`` held, for one more sampling point
    than it held: what the share would be if the sampling missed one point at each edge."""
    s = ask.scope
    held = f"count_over_time(({condition})[{s.window}:{s.resolution}])"
    worst = f"max_over_time((({expr}) and on ({GPU_KEY}) ({condition}))[{s.window}:{s.resolution}])"
    return f"clamp_max(({held} + 1) / {s.steps} * on ({GPU_KEY}) {worst}, 1)"


# --- clocks: thermal throttling, power capping, hardware slowdown ---------------------------


def _clock(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    sel = ask.scope.gpus_select
    held = held_back(sel, f.kind)
    ratio = gpu_queries.sm_clock_ratio(sel)
    # Compute-bound, a step takes 1/r as long at clock ratio r: r of the throughput is left.
    lost = f"1 - ({ratio})"
    # Half of each step memory- or communication-bound: it takes (1/r + 1) / 2 as long.
    half = f"(1 - ({ratio})) / (1 + ({ratio}))"
    return Queries(
        _held(ask, lost, held), _held(ask, half, held), _one_step_longer(ask, lost, held)
    )


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


def _speed(sel: Select) -> str:
    """Each GPU's PCIe link speed now over its maximum's (generation and width together)."""
    return (
        f"({q.pcie_link_bytes_per_second(sel)}) / on ({GPU_KEY}) "
        f"({q.pcie_link_bytes_per_second(sel, '_max')})"
    )


def _over_pcie(sel: Select) -> str:
    """The GPUs that reach a peer without NVLink: their all-reduce crosses their PCIe link."""
    pairs = sel(GPU_P2P_LINK_INFO, 'link!="nvlink"')
    return f"max by ({GPU_KEY}) ({pairs})"


def _measured_share(ask: Ask, on: str) -> str:
    """The run's measured communication share c on each GPU of ``on`` (a GPU series, kept
    where c is published)."""
    c = q.gpu_communication_share(ask.scope.run_select, _rate_window(ask))
    return f"({on}) * 0 + on ({UUID_KEY}) group_left () ({c})"


def _pcie(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    sel, window = ask.scope.gpus_select, _rate_window(ask)
    held = gpu_queries.pcie_link_degraded(sel, t.busy_utilization_ratio)
    speed = _speed(sel)
    receive = q.pcie_busy_share(sel, "receive", window)
    both = f"({receive}) + on ({GPU_KEY}) ({q.pcie_busy_share(sel, 'transmit', window)})"
    # The copy took `busy` of each second at this link; at its maximum it would take
    # `speed` of that: the rest is what the step lost.
    lost = f"clamp_max({receive}, 1) * on ({GPU_KEY}) (1 - {speed})"
    high = f"clamp_max({both}, 1) * on ({GPU_KEY}) (1 - {speed})"
    return Queries(
        _held(ask, lost, held), _held(ask, f"({lost}) / 2", held), _held(ask, high, held)
    )


def _pcie_measured(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    sel, window = ask.scope.gpus_select, _rate_window(ask)
    held = gpu_queries.pcie_link_degraded(sel, t.busy_utilization_ratio)
    slower = f"(1 - {_speed(sel)})"
    receive = q.pcie_busy_share(sel, "receive", window)
    transmit = q.pcie_busy_share(sel, "transmit", window)
    # A ring all-reduce sends as much as it receives: what the GPU received beyond what it
    # sent is its input.
    beyond = f"clamp_min(({receive}) - on ({GPU_KEY}) ({transmit}), 0)"
    copies = f"clamp_max({beyond}, 1) * on ({GPU_KEY}) {slower}"
    received = f"clamp_max({receive}, 1) * on ({GPU_KEY}) {slower}"
    allreduce = f"({_measured_share(ask, _over_pcie(sel))}) * on ({GPU_KEY}) {slower}"
    lost = f"({copies}) + on ({GPU_KEY}) ({allreduce})"
    high = f"({received}) + on ({GPU_KEY}) ({allreduce})"
    return Queries(
        _held(ask, lost, held),
        _held(ask, f"({lost}) / 2", held),
        _held(ask, high, held),
        (
            (ALLREDUCE_SHARE, q.range_mean(_measured_share(ask, held), *_range(ask))),
            (LOST_IN_ALLREDUCE, _held(ask, allreduce, held)),
            (LOST_IN_COPIES, _held(ask, copies, held)),
        ),
    )


PCIE_MEASURED = Method(
    "measured all-reduce",
    "The GPU reaches its peers over PCIe, so its all-reduce crossed this link, and the run's "
    "workers measured it: c of each step's time (the least of the workers' shares: the others "
    "also waited there for the last to arrive). At speed s of the link's maximum (the ratio of "
    "the two speeds) the link's traffic takes 1/s as long: the all-reduce would take s of c "
    "at full speed, and the run lost c (1 - s) to it while degraded. Its input batches, what "
    "the GPU received beyond what it sent (an all-reduce sends as much as it receives), were "
    "copied at the same link: with busy share d of each second, the run lost d (1 - s) to "
    "them. Low bound: half of the copy overlapped with compute, half of the all-reduce with "
    "the backward pass. High bound: all the received traffic was input, and all of c was "
    "spent moving bytes over this link.",
    _pcie_measured,
    basis="from the all-reduce time the run's workers measured",
)


PCIE = Method(
    "link",
    "The GPU's PCIe receive traffic is its input batches, copied before each step and not "
    "overlapped with compute, and the step waited for this GPU's copy: the copy took the "
    "link's busy share b (bytes received per second over what the link carries at the "
    "generation and width it ran at) of each second, and would take s of that at the link's "
    "maximum, s being the ratio of the two speeds; the run lost b (1 - s) while degraded. Low "
    "bound: half the copy overlapped with compute. High bound: the transmit traffic waited "
    "on the link too. Used where the run publishes no all-reduce time (TensorFlow), or where "
    "the GPU reaches its peers over NVLink (its all-reduce does not cross this link).",
    _pcie,
    basis="estimated from the link's traffic",
    measured=PCIE_MEASURED,
)


def _pcie_pair(f: Finding) -> bool:
    # Else an NVLink link down: the others carry its traffic, at a speed not measured.
    return any(figure.name.startswith("link to GPU") for figure in f.figures)


def _interconnect(ask: Ask, t: Thresholds, f: Finding) -> Queries | None:
    if not _pcie_pair(f):
        return None
    sel, window = ask.scope.gpus_select, _rate_window(ask)
    held = _over_pcie(sel)
    transmit = f"clamp_max({q.pcie_busy_share(sel, 'transmit', window)}, 1)"
    both = (
        f"clamp_max(({q.pcie_busy_share(sel, 'transmit', window)}) + on ({GPU_KEY}) "
        f"({q.pcie_busy_share(sel, 'receive', window)}), 1)"
    )
    return Queries(
        _held(ask, transmit, held), _held(ask, f"{transmit} / 2", held), _held(ask, both, held)
    )


def _interconnect_measured(ask: Ask, t: Thresholds, f: Finding) -> Queries | None:
    if not _pcie_pair(f):
        return None
    held = _over_pcie(ask.scope.gpus_select)
    c = _measured_share(ask, held)
    lost = _held(ask, c, held)
    return Queries(lost, _held(ask, f"({c}) / 2", held), lost)


INTERCONNECT_MEASURED = Method(
    "measured all-reduce",
    "Without NVLink the all-reduce goes over PCIe, and the run's workers measured it: c of "
    "each step's time (the least of the workers' shares: the others also waited there for the "
    "last to arrive). Over NVLink (several times faster) that time would all but vanish: the "
    "run lost c while the pair had no NVLink, which no faster link can better (the high "
    "bound too). Low bound: half of the all-reduce overlapped with the backward pass (DDP "
    "starts each bucket's all-reduce while the next gradients are computed).",
    _interconnect_measured,
    basis="from the all-reduce time the run's workers measured",
)


INTERCONNECT = Method(
    "all-reduce over PCIe",
    "Without NVLink the all-reduce goes over PCIe: the GPU's transmit traffic is the gradients "
    "it sends, on every step's critical path, and over NVLink (several times faster) that "
    "time would all but vanish: the run lost the link's transmit busy share. Low bound: half "
    "of the all-reduce overlapped with the backward pass. High bound: the receive traffic "
    "was all-reduce too. An NVLink link down has no number: its peers' other links carry the "
    "traffic at a speed the telemetry does not show. Used where the run publishes no "
    "all-reduce time (TensorFlow).",
    _interconnect,
    basis="estimated from the link's traffic",
    measured=INTERCONNECT_MEASURED,
)


# --- the run --------------------------------------------------------------------------------


def _imbalance(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    s = ask.scope
    means = gpu_queries.gpu_utilization_mean(s.gpus_select, s.window)
    spread = q.gpu_utilization_spread(s.gpus_select, s.window)
    leader = f"max by ({TARGET_KEY}) ({means})"
    deficit = f"avg by ({TARGET_KEY}) ({means}) - min by ({TARGET_KEY}) ({means})"
    return Queries(spread, deficit, f"clamp_max({spread} / {leader}, 1)")


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


def _input(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    s, sel = ask.scope, ask.scope.gpus_select
    cut = t.input_bound.busiest_below_ratio
    busiest = f"max by ({TARGET_KEY}) ({gpu_queries.gpu_utilization_mean(sel, '1m')})"
    held = q.all_gpus_below(sel, "1m", cut)

    def mean(expr: str) -> str:
        return q.held_sum(expr, held, s.window, s.resolution, s.steps, key=TARGET_KEY)

    lost = mean(f"1 - {busiest}")
    return Queries(lost, mean(f"clamp_min(1 - {busiest} / {num(cut)}, 0)"), lost)


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


def _lost_gpu(ask: Ask, t: Thresholds, f: Finding) -> Queries | None:
    if f.runbook != runbook("GpuLost"):
        return None
    held = q.gpu_lost(ask.scope.gpus_select)
    share = q.held_share(held, ask.scope.window, ask.scope.resolution, ask.scope.steps)
    return Queries(share, share, share)


GPU_ERROR = Method(
    "stopped",
    "A lost GPU stops every synchronous step: the run lost all its throughput while the GPU "
    "was lost. An XID or ECC error has no number: what it cost (a crash, a restart, nothing) "
    "is not in the telemetry.",
    _lost_gpu,
)


def _straggler(ask: Ask, t: Thresholds, f: Finding) -> Queries:
    s = ask.scope
    series = f'{COST}{{cause="straggler",run="{s.run}"}}'
    lost = f"max by ({GPU_KEY}) (avg_over_time({series}[{s.window}]))"
    high = f"max by ({GPU_KEY}) (max_over_time({series}[{s.window}]))"
    return Queries(lost, f"({lost}) / 2", high)


STRAGGLER = Method(
    "straggler",
    "In a synchronous step every GPU waits for the slowest: what the straggler costs is the "
    "others' wait for it. Measured where the workers time their all-reduces (the others' "
    "mean all-reduce share beyond the straggler's); elsewhere estimated from power, since a "
    "GPU waiting in the all-reduce draws close to idle: 1 - its peers' mean power over its own "
    "(the idle draw in both makes this a low estimate). Read from the live cost the recording "
    "rules keep, averaged over the range. Low bound: half of it; high bound: its highest "
    "moment.",
    _straggler,
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
    "straggler": STRAGGLER,
}


def _rate_window(ask: Ask) -> str:
    # At least four scrapes of a 1 s to 15 s interval, and at least four sampling points.
    return f"{max(60, 4 * ask.scope.step)}s"


def _range(ask: Ask) -> tuple[str, str]:
    return ask.scope.window, ask.scope.resolution


def method_of(kind: str, name: str) -> Method:
    """The method of ``kind`` called ``name`` (the one a cost names)."""
    method = METHODS[kind]
    if method.measured is not None and method.measured.name == name:
        return method.measured
    return method


def _figure(ask: Ask, name: str, query: str, finding: Finding, per_gpu: bool) -> Figure | None:
    figure = ask.figure(name, "ratio", query, _key(finding, per_gpu))
    if figure is None or not math.isfinite(figure.value):
        return None
    return figure


def with_live_cost(ask: Ask, finding: Finding) -> Finding:
    """The finding with the live cost of its GPU and cause at the range's end, as the recording
    rules keep it and TrainingHeldBack and the Why panel read it (a run's report only)."""
    run = ask.scope.run
    if finding.kind not in COSTED_KINDS or run is None or finding.gpu is None:
        return finding
    query = f'max by ({GPU_KEY}) ({COST_5M}{{cause="{finding.kind}",run="{run}"}})'
    figure = _figure(ask, LIVE_COST, query, finding, True)
    return finding if figure is None else replace(finding, figures=[*finding.figures, figure])


def costed(ask: Ask, t: Thresholds, finding: Finding) -> Finding:
    """The finding with its cost (None where its methods give no number) and that cost's
    figures among its own: by the measured method where it gives one, else by the kind's."""
    return with_live_cost(ask, _costed(ask, t, finding))


def _costed(ask: Ask, t: Thresholds, finding: Finding) -> Finding:
    method = METHODS[finding.kind]
    if method.free:
        return replace(finding, cost=Cost(0.0, 0.0, 0.0, method.name))
    for candidate in (method.measured, method):
        if candidate is not None:
            found = _priced(ask, t, finding, candidate)
            if found is not None:
                return found
    return finding


def _priced(ask: Ask, t: Thresholds, finding: Finding, method: Method) -> Finding | None:
    queries = method.estimate(ask, t, finding) if method.estimate is not None else None
    if queries is None:
        return None
    named = ((LOST, queries.lost), (LOW, queries.low), (HIGH, queries.high), *queries.shown)
    figures = [_figure(ask, name, query, finding, method.per_gpu) for name, query in named]
    kept = [f for f in figures if f is not None]
    if len(kept) < len(figures):
        return None
    lost, low, high = (max(0.0, min(1.0, f.value)) for f in kept[:3])
    allreduce = next((f.value for f in kept if f.name == LOST_IN_ALLREDUCE), 0.0)
    cost = Cost(lost, min(low, lost), max(high, lost), method.name, min(allreduce, lost))
    return replace(finding, figures=[*finding.figures, *kept], cost=cost)


def combined(findings: Sequence[Finding]) -> Cost | None:
    """The share of throughput lost to all costed findings together, as independent causes
    (what is left is the product of what each leaves); None when none has a cost. A symptom
    (an imbalance) counts only on a host where no other finding is costed; of a host's
    throttled GPUs only the costliest counts; a measured PCIe cost leaves out its all-reduce
    part on a host whose measured interconnect cost holds all of the all-reduce."""
    causes = {f.target for f in findings if f.cost is not None and f.kind not in SYMPTOMS}
    # NVLink would take the whole measured all-reduce, the narrow link's extra time with it.
    whole = {
        f.target
        for f in findings
        if f.kind == "interconnect" and f.cost and f.cost.method == INTERCONNECT_MEASURED.name
    }
    # Throttled GPUs of one host: the slowest gates the steps and the others wait for it
    # anyway, so they count as the costliest of them (exact where they overlap in time).
    slowest: dict[Key, Cost] = {}
    counted = []
    for f in findings:
        if f.cost is None or (f.kind in SYMPTOMS and f.target in causes):
            continue
        if f.cost.method == CLOCK.name:
            held = slowest.get(f.target)
            slowest[f.target] = f.cost if held is None or f.cost.fraction > held.fraction else held
        elif f.target in whole and f.cost.allreduce > 0:
            counted.append(_without_allreduce(f.cost))
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


def _without_allreduce(cost: Cost) -> Cost:
    # The measured PCIe method's bounds: low halves both parts, high adds the whole
    # all-reduce part to the copies' high.
    a = cost.allreduce
    return Cost(cost.fraction - a, max(cost.low - a / 2, 0), cost.high - a, cost.method)


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
    basis = method_of(kind, cost.method).basis
    return (
        f"Cost: about {_percent(cost.fraction)} of the run's throughput "
        f"(between {_percent(cost.low)} and {_percent(cost.high)}), by the {cost.method} method"
        + (f", {basis}." if basis else ".")
    )


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f} %" if ratio >= 0.1 or ratio == 0 else f"{ratio * 100:.1f} %"
