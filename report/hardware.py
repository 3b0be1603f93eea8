"""Findings about the GPUs themselves: throttling, heat, PCIe, interconnect, errors, lost GPUs."""

from __future__ import annotations

from collections.abc import Sequence

from mirrorwatch.alerts import gpu_queries
from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.alerts.throttling import held
from mirrorwatch.contract import causes
from mirrorwatch.contract.labels import GPU_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_P2P_LINK_INFO,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_TEMPERATURE_CELSIUS,
)
from mirrorwatch.report import queries as q
from mirrorwatch.report.evidence import Ask, Figure, Finding, runbook, share_of
from mirrorwatch.report.scope import GPU_LABELS, Gpu, Key, gpu_key, target_key
from mirrorwatch.report.words import percent, plural


def _held(ask: Ask, condition: str) -> str:
    s = ask.scope
    return q.held_share(condition, s.window, s.resolution, s.steps)


def _labels(gpu: Gpu) -> dict[str, str]:
    return gpu.labels


def _figures(ask: Ask, gpu: Gpu, wanted: Sequence[tuple[str, str, str]]) -> list[Figure]:
    found = (ask.figure(name, unit, query, _labels(gpu)) for name, unit, query in wanted)
    return [f for f in found if f is not None]


def held_back(sel: Select, kind: str) -> str:
    """The GPUs held back for the throttling ``kind`` at each moment (one of causes.THROTTLES):
    the same condition the live cause rules use."""
    return held(causes.cause(kind), sel)


def throttling(ask: Ask, t: Thresholds) -> list[Finding]:
    s, sel = ask.scope, ask.scope.gpus_select
    clock = q.range_mean(sel(GPU_CLOCK_HERTZ, 'clock="sm"'), s.window, s.resolution)
    top_clock = sel(GPU_CLOCK_MAX_HERTZ, 'clock="sm"')
    clock_max = f"max_over_time({top_clock}[{s.window}])"
    findings = []
    for cause in causes.THROTTLES:
        kind, violation = cause.kind, cause.violation
        now = held_back(sel, kind)
        share_query = _held(ask, now)
        shares = ask.by_gpu(share_query)
        # Over the range, like the alert's share of time; GpuThermalThrottling's fraction is
        # of each minute (a rule for paging), so any heat the range held is a finding.
        limit = float(getattr(t.alert(cause.alert), "throttled_fraction", 0.0))
        for gpu in s.gpus:
            share = share_of(shares.get(gpu.key))
            if share <= limit:
                continue
            wanted = [("share of the range", "ratio", share_query)]
            if violation is not None:
                seconds = q.throttled_seconds(sel, violation, s.window)
                wanted.append((f"{violation} throttle time (driver)", "seconds", seconds))
            wanted += [("mean SM clock", "hertz", clock), ("highest SM clock", "hertz", clock_max)]
            figures = _figures(ask, gpu, wanted)
            findings.append(
                Finding(
                    kind,
                    gpu.gpu,
                    gpu.instance,
                    share,
                    f"GPU {gpu.gpu} was {cause.held_back} for {percent(share)} of the range"
                    + _clock_words(figures),
                    figures,
                    cause.runbook,
                    ("throttle", "clocks", *(("temperature",) if violation == "thermal" else ())),
                    labels=_labels(gpu),
                )
            )
    return findings


def _clock_words(figures: Sequence[Figure]) -> str:
    values = {f.name: f.value for f in figures}
    mean, top = values.get("mean SM clock"), values.get("highest SM clock")
    if mean is None or not top:
        return "."
    return f"; its SM clock averaged {mean / 1e9:.2f} GHz of its {top / 1e9:.2f} GHz."


def temperature_headroom(ask: Ask, t: Thresholds) -> list[Finding]:
    s, sel = ask.scope, ask.scope.gpus_select
    margin = t.GpuTemperatureNearSlowdown.margin_celsius
    share_query = _held(ask, q.near_slowdown(sel, margin))
    least = q.range_min(gpu_queries.slowdown_headroom(sel), s.window, s.resolution)
    hottest = q.range_max(sel(GPU_TEMPERATURE_CELSIUS), s.window, s.resolution)
    shares = ask.by_gpu(share_query)
    findings = []
    for gpu in s.gpus:
        share = share_of(shares.get(gpu.key))
        if share <= 0:
            continue
        figures = _figures(
            ask,
            gpu,
            [
                ("share of the range", "ratio", share_query),
                ("least headroom to slowdown", "celsius", least),
                ("highest temperature", "celsius", hottest),
            ],
        )
        low = next((f.value for f in figures if f.name.startswith("least")), None)
        findings.append(
            Finding(
                "temperature_headroom",
                gpu.gpu,
                gpu.instance,
                share,
                f"GPU {gpu.gpu} was within {margin:g} °C of its slowdown temperature for "
                f"{percent(share)} of the range"
                + (f" (least headroom {low:.0f} °C)." if low is not None else "."),
                figures,
                causes.cause("temperature_headroom").runbook,
                ("temperature",),
                labels=_labels(gpu),
            )
        )
    return findings


def pcie(ask: Ask, t: Thresholds) -> list[Finding]:
    s, sel = ask.scope, ask.scope.gpus_select
    share_query = _held(ask, gpu_queries.pcie_link_degraded(sel, t.busy_utilization_ratio))
    shares = ask.by_gpu(share_query)

    def lowest(metric: str) -> str:
        return q.range_min(sel(metric), s.window, s.resolution)

    findings = []
    for gpu in s.gpus:
        share = share_of(shares.get(gpu.key))
        if share <= 0:
            continue
        figures = _figures(
            ask,
            gpu,
            [
                ("share of the range", "ratio", share_query),
                ("narrowest link width", "lanes", lowest(GPU_PCIE_LINK_WIDTH)),
                ("widest supported", "lanes", lowest(GPU_PCIE_LINK_WIDTH_MAX)),
                ("lowest generation", "", lowest(GPU_PCIE_LINK_GENERATION)),
                ("highest supported", "", lowest(GPU_PCIE_LINK_GENERATION_MAX)),
            ],
        )
        v = {f.name: f.value for f in figures}
        link = (
            f" at gen {v['lowest generation']:.0f} x{v['narrowest link width']:.0f} of "
            f"gen {v['highest supported']:.0f} x{v['widest supported']:.0f}"
            if len(v) == 5
            else ""
        )
        findings.append(
            Finding(
                "pcie_degraded",
                gpu.gpu,
                gpu.instance,
                share,
                f"GPU {gpu.gpu}'s PCIe link ran below its maximum{link} while busy, for "
                f"{percent(share)} of the range.",
                figures,
                causes.cause("pcie_degraded").runbook,
                ("pcie",),
                labels=_labels(gpu),
            )
        )
    return findings


def interconnect(ask: Ask) -> list[Finding]:
    """GPU pairs of the scope without NVLink, or across CPU sockets; NVLink links down."""
    s, sel = ask.scope, ask.scope.gpus_select
    links_query = q.p2p_links(sel, s.window)
    slow = _held(ask, sel(GPU_P2P_LINK_INFO, 'link!="nvlink"'))
    findings = []
    ours = {(g.target, g.gpu) for g in s.gpus}
    seen: set[tuple[Key, str, str]] = set()
    for row in ask.rows(links_query):
        instance, gpu, peer, link = (
            row.get(k, "") for k in ("instance", "gpu", "peer_gpu", "link")
        )
        target = target_key(row)
        pair = (target, *sorted((gpu, peer)))
        if link == "nvlink" or (target, peer) not in ours or pair in seen:
            continue
        seen.add(pair)
        labels = {k: row[k] for k in GPU_LABELS if row.get(k)}
        figure = ask.figure("share of the range", "ratio", slow, labels)
        share = share_of(figure.value if figure else 1.0)
        path = "across CPU sockets (cross-NUMA)" if link == "cross_numa" else f"over {link}"
        findings.append(
            Finding(
                "interconnect",
                gpu,
                instance,
                share,
                f"GPUs {pair[1]} and {pair[2]} have no NVLink: their all-reduce goes {path}.",
                [Figure(f"link to GPU {peer}", 1.0, link, links_query, {**labels, "link": link})]
                + ([figure] if figure else []),
                causes.cause("interconnect").runbook,
                labels=labels,
            )
        )
    down_query = _held(ask, f"max by ({GPU_KEY}) ({q.nvlink_down(sel)})")
    for gpu in s.gpus:
        figure = ask.figure("share of the range", "ratio", down_query, _labels(gpu))
        if figure is not None and figure.value > 0:
            findings.append(
                Finding(
                    "interconnect",
                    gpu.gpu,
                    gpu.instance,
                    share_of(figure.value),
                    f"An NVLink link of GPU {gpu.gpu} was down for "
                    f"{percent(share_of(figure.value))} "
                    "of the range: its peer traffic fell back to PCIe.",
                    [figure],
                    causes.cause("interconnect").runbook,
                    labels=_labels(gpu),
                )
            )
    return findings


def gpu_errors(ask: Ask) -> list[Finding]:
    s, sel = ask.scope, ask.scope.gpus_select
    xids = gpu_queries.xid_events(sel, s.window, str(s.seconds))
    xid_share = _held(ask, f"sum by ({GPU_KEY}) ({gpu_queries.xid_events(sel, '1m', '60')})")
    ecc = q.ecc_uncorrected(sel, s.window)
    lost = _held(ask, q.gpu_lost(sel))
    findings = []
    for gpu in s.gpus:
        events = [r for r in ask.rows(xids) if gpu_key(r) == gpu.key]
        if events:
            share = ask.figure("share of the range", "ratio", xid_share, _labels(gpu))
            figures = [
                Figure(
                    f"XID {r.get('xid')} events",
                    r["value"],
                    "events",
                    xids,
                    {**_labels(gpu), "xid": r.get("xid", "")},
                )
                for r in events
            ]
            findings.append(
                Finding(
                    "gpu_error",
                    gpu.gpu,
                    gpu.instance,
                    share_of(share.value if share else None),
                    f"GPU {gpu.gpu} reported XID "
                    + ", ".join(str(r.get("xid")) for r in events)
                    + " during the range.",
                    figures + ([share] if share else []),
                    runbook("GpuXidError"),
                    labels=_labels(gpu),
                )
            )
        ecc_figure = ask.figure("uncorrectable ECC errors", "errors", ecc, _labels(gpu))
        if ecc_figure is not None:
            findings.append(
                Finding(
                    "gpu_error",
                    gpu.gpu,
                    gpu.instance,
                    1.0,
                    f"GPU {gpu.gpu} counted "
                    f"{plural(round(ecc_figure.value), 'uncorrectable ECC error')}.",
                    [ecc_figure],
                    runbook("GpuEccUncorrectable"),
                    labels=_labels(gpu),
                )
            )
        lost_figure = ask.figure("share of the range", "ratio", lost, _labels(gpu))
        if lost_figure is not None and lost_figure.value > 0:
            findings.append(
                Finding(
                    "gpu_error",
                    gpu.gpu,
                    gpu.instance,
                    share_of(lost_figure.value),
                    f"GPU {gpu.gpu} was lost (unreadable) for "
                    f"{percent(share_of(lost_figure.value))} "
                    "of the range.",
                    [lost_figure],
                    runbook("GpuLost"),
                    labels=_labels(gpu),
                )
            )
    return findings
