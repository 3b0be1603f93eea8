"""Findings about the run as a whole: imbalance between its GPUs, input-bound, telemetry gaps."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from mirrorwatch.alerts import gpu_queries
from mirrorwatch.alerts.fragments import num
from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.rules.costs import COST
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import cause
from mirrorwatch.contract.labels import GPU_KEY
from mirrorwatch.contract.metrics import UP
from mirrorwatch.report import queries as q
from mirrorwatch.report.evidence import Ask, Figure, Finding, runbook, share_of
from mirrorwatch.report.scope import GPU_LABELS, labels_of
from mirrorwatch.report.svg import format_value
from mirrorwatch.report.words import percent

# A scrape interval this many times the usual one is a gap.
GAP_FACTOR = 3.0


def _held(ask: Ask, condition: str) -> str:
    s = ask.scope
    return q.held_share(condition, s.window, s.resolution, s.steps)


def imbalance(ask: Ask, t: Thresholds) -> list[Finding]:
    s, sel = ask.scope, ask.scope.gpus_select
    limit = t.GpuUtilizationImbalance.spread_ratio
    means_query = gpu_queries.gpu_utilization_mean(sel, s.window)
    spread_query = q.gpu_utilization_spread(sel, s.window)
    share_query = _held(ask, f"{q.gpu_utilization_spread(sel, '1m')} > {num(limit)}")
    deviation_query = q.gpu_utilization_deviation(sel, s.window)
    means, shares = ask.by_gpu(means_query), ask.by_target(share_query)
    findings = []
    for target in s.targets:
        ours = {g: means[g.key] for g in s.gpus if g.target == target and g.key in means}
        share = share_of(shares.get(target))
        if len(ours) < 2 or share <= 0:
            continue
        lagging = min(ours, key=lambda g: ours[g])
        leading = max(ours, key=lambda g: ours[g])
        host = labels_of(target)
        spread = ask.figure("spread of the range means", "points", spread_query, host)
        figures = [
            f
            for f in (
                ask.figure(
                    f"GPU {lagging.gpu} mean utilisation", "ratio", means_query, lagging.labels
                ),
                ask.figure(
                    f"GPU {leading.gpu} mean utilisation", "ratio", means_query, leading.labels
                ),
                spread,
                ask.figure(
                    "deviation from the run mean", "points", deviation_query, lagging.labels
                ),
                ask.figure(
                    f"share of the range above {percent(limit)}", "ratio", share_query, host
                ),
            )
            if f is not None
        ]
        # The summary quotes the figure shown under it, so one spread reads as one number.
        gap = spread.value if spread is not None else ours[leading] - ours[lagging]
        findings.append(
            Finding(
                "imbalance",
                lagging.gpu,
                lagging.instance,
                share,
                f"GPU {lagging.gpu} lags: {percent(ours[lagging])} busy against GPU "
                f"{leading.gpu}'s {percent(ours[leading])} ({format_value(gap, 'points')}, "
                f"percentage points); the spread was above {format_value(limit, 'points')} for "
                f"{percent(share)} of the range.",
                figures,
                cause("imbalance").runbook,
                ("utilization", "spread"),
                labels=lagging.labels,
            )
        )
    return findings


def stragglers(ask: Ask, t: Thresholds) -> list[Finding]:
    """The GPU of the run the others waited for in the all-reduce, by the live straggler cost
    the recording rules keep (alerts/rules/costs.py): where its mean over the range reaches
    TrainingHeldBack's cost."""
    s = ask.scope
    if s.run is None:
        return []
    limit = t.TrainingHeldBack.cost_ratio
    series = f'{COST}{{cause="straggler",run="{s.run}"}}'
    mean_query = f"max by ({GPU_KEY}) (avg_over_time({series}[{s.window}]))"
    share_query = (
        f"max by ({GPU_KEY}) (avg_over_time(({series} >= bool {num(limit)})[{s.window}:]))"
    )
    findings = []
    for key, mean in ask.by_gpu(mean_query).items():
        if mean < limit:
            continue
        labels = labels_of(key, GPU_LABELS)
        gpu, instance = labels.get("gpu", ""), labels.get("instance", "")
        share = share_of(ask.by_gpu(share_query).get(key))
        figures = [
            f
            for f in (ask.figure("mean straggler cost", "ratio", mean_query, labels),)
            if f is not None
        ]
        findings.append(
            Finding(
                "straggler",
                gpu,
                instance,
                share,
                f"GPU {gpu} is the one the run's other GPUs waited for in the all-reduce, with no "
                f"hardware cause the driver reports: it cost the run about {percent(mean)} of its "
                "throughput over the range.",
                figures,
                cause("straggler").runbook,
                ("utilization", "throughput"),
                labels=labels,
            )
        )
    return findings


def input_bound(ask: Ask, t: Thresholds, throttled: bool) -> list[Finding]:
    """Every GPU well below busy with nothing holding its clocks back: waiting for input (the
    cut is thresholds.yml's `input_bound`)."""
    if throttled:
        return []
    s, sel = ask.scope, ask.scope.gpus_select
    cut = t.input_bound.busiest_below_ratio
    share_query = _held(ask, q.all_gpus_below(sel, "1m", cut))
    means_query = gpu_queries.gpu_utilization_mean(sel, s.window)
    means, shares = ask.by_gpu(means_query), ask.by_target(share_query)
    findings = []
    for target in s.targets:
        share = share_of(shares.get(target))
        if share < t.input_bound.held_share:
            continue
        host = labels_of(target)
        figures = [
            Figure(f"GPU {g.gpu} mean utilisation", means[g.key], "ratio", means_query, g.labels)
            for g in s.gpus
            if g.target == target and g.key in means
        ]
        figures.append(Figure("share of the range", share, "ratio", share_query, host))
        findings.append(
            Finding(
                "input_bound",
                None,
                host.get("instance", ""),
                share,
                f"Every GPU was below {percent(cut)} busy for {percent(share)} of the "
                "range with no throttling: the GPUs waited for input (data loading, host CPU).",
                figures,
                cause("input_bound").runbook,
                ("utilization",),
                labels=host,
            )
        )
    return findings


def _gaps(times: Sequence[float]) -> tuple[float, float]:
    """Seconds lost to gaps and the longest interval, from sample times."""
    intervals = [b - a for a, b in itertools.pairwise(times)]
    if len(intervals) < 2:
        return 0.0, max(intervals, default=0.0)
    usual = statistics.median(intervals)
    lost = sum(i - usual for i in intervals if i > GAP_FACTOR * usual)
    return lost, max(intervals)


def telemetry_gaps(ask: Ask, t: Thresholds) -> list[Finding]:
    s = ask.scope
    findings = []
    for target in s.targets:
        host = labels_of(target)
        instance = host.get("instance", "")
        matchers = tuple(f'{name}="{value}"' for name, value in host.items())
        raw = f"{Select(matchers)(UP)}[{s.window}]"
        times = [p for series in ask.prometheus.instant(raw, s.end) for p, _ in series.points]
        lost, longest = _gaps(sorted(times))
        if lost > 0:
            share = min(1.0, lost / max(1, s.seconds))
            findings.append(
                Finding(
                    "telemetry_gap",
                    None,
                    instance,
                    share,
                    f"Scrapes of {instance} stopped for {lost:.0f} s in all (longest interval "
                    f"{longest:.0f} s): what happened then is not in this report.",
                    [
                        Figure("seconds without scrapes", lost, "seconds", raw, host),
                        Figure("longest interval", longest, "seconds", raw, host),
                    ],
                    runbook("MirrorwatchExporterDown"),
                    labels=host,
                )
            )
    if s.run is not None:
        stale = t.TrainingTelemetryStale.stale_after_seconds
        silence = q.push_silence(s.run_select)
        share_query = _held(ask, f"{silence} > {num(stale)}")
        for row in ask.rows(share_query):
            share = share_of(row["value"])
            if share <= 0:
                continue
            worker = row.get("worker", "")
            findings.append(
                Finding(
                    "telemetry_gap",
                    None,
                    row.get("instance") or None,
                    share,
                    f"Worker {worker} pushed no training telemetry for over {stale:g} s during "
                    f"{percent(share)} of the range.",
                    [Figure("share of the range", share, "ratio", share_query, {"worker": worker})],
                    runbook("TrainingTelemetryStale"),
                )
            )
    return findings
