"""report.html: one self-contained page, headline first, each chart under the finding it backs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from html import escape
from typing import Any

from mirrorwatch.contract.causes import TITLES
from mirrorwatch.contract.metrics import (
    TRAINING_ALLREDUCE_SECONDS,
)
from mirrorwatch.report.analysis import NOTHING_WRONG, Analysis
from mirrorwatch.report.charts import Chart
from mirrorwatch.report.cost import METHODS, in_words, method_of
from mirrorwatch.report.evidence import Figure, Finding
from mirrorwatch.report.scope import format_time
from mirrorwatch.report.svg import format_value
from mirrorwatch.report.words import percent, size

HEADLINE_CHARTS = ("throughput", "step_time")
DASH = "\u2013"  # what a card shows for a figure Prometheus has no data for

STYLE = """
body { font: 15px/1.45 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; color: #1d2530;
  max-width: 860px; margin: 24px auto; padding: 0 16px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px;
  border-bottom: 1px solid #d8dde3; padding-bottom: 4px; } h3 { font-size: 16px; margin: 0 0 6px; }
.meta { color: #5a6573; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0; }
.card { border: 1px solid #d8dde3; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card b { display: block; font-size: 20px; } .card span { color: #5a6573; font-size: 12px; }
.verdict { font-size: 17px; margin: 8px 0; } .why { background: #fff4e5; border-left: 4px solid
  #f0a030; padding: 8px 12px; } .why.ok { background: #eaf6ec; border-color: #3c9a4f; }
.finding { border: 1px solid #d8dde3; border-radius: 6px; padding: 12px 14px; margin: 14px 0; }
.kind { font-size: 11px; text-transform: uppercase; letter-spacing: .05em; color: #fff;
  background: #b5462f; border-radius: 3px; padding: 1px 6px; margin-right: 6px; }
.kind.none { background: #3c9a4f; } .cost { font-weight: bold; }
.cost .meta { display: block; font-weight: normal; }
.share { display: inline-block; width: 120px; height: 8px; background: #e8ebef;
  border-radius: 4px; vertical-align: middle; margin-left: 6px; }
.share i { display: block; height: 8px; background: #b5462f; border-radius: 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
details { font-size: 12px; margin: 4px 0; } summary { cursor: pointer; color: #2b5f9e; }
pre { background: #f4f6f8; padding: 6px 8px; overflow-x: auto; white-space: pre-wrap;
  font-size: 11.5px; margin: 4px 0; }
figure { margin: 12px 0; } figcaption { font-weight: bold; font-size: 14px; }
figcaption span { font-weight: normal; color: #5a6573; font-size: 12px; display: block; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { font-size: 11px; fill: #3b4552; font-family: inherit; }
svg.chart .grid { stroke: #e3e7eb; } svg.chart .axis { stroke: #98a2ae; }
svg.chart .series { fill: none; stroke-width: 1.8; } svg.chart .band { fill: #1f77b4;
  fill-opacity: .12; } svg.chart .empty { fill: #8a95a3; font-style: italic; font-size: 13px; }
.legend { font-size: 12px; color: #3b4552; } .key { margin-right: 14px; white-space: nowrap; }
.key i { display: inline-block; width: 22px; margin-right: 4px; vertical-align: middle; }
.key i.band-key { height: 9px; background: rgba(31,119,180,.15); }
a { color: #2b5f9e; }
"""


def _value(figure: Figure) -> str:
    return escape(format_value(figure.value, figure.unit) if figure.unit else f"{figure.value:g}")


def _queries(queries: Sequence[str], label: str = "Queries") -> str:
    body = "".join(f"<pre>{escape(query)}</pre>" for query in dict.fromkeys(queries))
    return f"<details><summary>{label}</summary>{body}</details>"


def _chart(chart: Chart) -> str:
    return (
        f'<figure id="chart-{chart.name}"><figcaption>{escape(chart.title)}'
        f"<span>{escape(chart.description)}</span></figcaption>{chart.svg}{chart.key}"
        f"{_queries(chart.queries, 'Queries of this chart')}</figure>"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _card(label: str, value: str) -> str:
    return f'<div class="card"><b>{escape(value)}</b><span>{escape(label)}</span></div>'


def _headline(h: Mapping[str, Any], top: Finding, at: float) -> str:
    def shown(name: str, unit: str, suffix: str = "") -> str:
        value = h.get(name)
        return DASH if value is None else format_value(float(value), unit) + suffix

    def count(name: str) -> str:
        return DASH if h.get(name) is None else f"{h[name]:,.0f}"

    speedup = DASH if h.get("speedup") is None else f"{h['speedup']:.2f}x"
    ideal = f" of {h['ideal_speedup']:.0f}x ideal" if h.get("ideal_speedup") else ""
    cards = [
        _card("duration", _duration(h["duration_seconds"])),
        _card("steps", count("steps")),
        _card("examples", count("examples")),
        _card("examples per second", shown("examples_per_second", "per_second")),
        _card(f"speed-up{ideal}", speedup),
        _card(
            f"scaling efficiency (target {percent(h['efficiency_target'])})",
            shown("scaling_efficiency", "ratio"),
        ),
        _card("lost against ideal", shown("lost", "ratio")),
        _card("unexplained, of ideal", shown("unexplained", "ratio")),
        _card("median step time", shown("step_time_p50_seconds", "seconds")),
        *(
            [_card("mean GPU utilisation", shown("mean_utilization", "ratio"))]
            if "mean_utilization" in h["queries"]
            else []
        ),
    ]
    short = h.get("meets_target") is False
    ok = top.kind == "none" and not short and h["gpus_reported"]
    label = "Verdict" if top.kind == "none" else "Most likely why"
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td><pre>{escape(query)}</pre></td></tr>"
        for name, query in h["queries"].items()
    )
    return (
        f'<div class="cards">{"".join(cards)}</div>'
        + _no_gpus(h)
        + f'<p class="verdict">{escape(h["verdict"])}</p>'
        + _together(h)
        + f'<p class="why{" ok" if ok else ""}"><b>{label}:</b> {escape(top.summary)}'
        + (f" {escape(in_words(top.cost, top.kind))}" if top.cost and top.cost.fraction else "")
        + "</p>"
        + unexplained_html(h)
        + f"<details><summary>Queries of the headline (asked at {escape(format_time(at))})"
        f"</summary><table>{rows}</table></details>"
    )


def _together(h: Mapping[str, Any]) -> str:
    """What the findings cost together, and what the run would do without them."""
    cost = h.get("cost")
    if cost is None or cost["fraction"] <= 0:
        return ""
    without = h.get("examples_per_second_without_causes")
    said = f"Together the findings cost about {percent(cost['fraction'])} of the run's throughput"
    if cost["low"] < cost["high"]:
        said += f" (between {percent(cost['low'])} and {percent(cost['high'])})"
    if without is not None:
        said += f": about {without:,.0f} examples/s instead of {h['examples_per_second']:,.0f}"
    if h.get("speedup_without_causes") is not None:
        said += f", a speed-up of {h['speedup_without_causes']:.2f}x instead of {h['speedup']:.2f}x"
    said += "."
    before = h.get("cost_before_bound")
    if before is not None:
        said += (
            f" Their own costs come to {percent(before['fraction'])}, more than the run lost "
            f"({percent(h['lost'])}): they overlap (or estimate high), so they count as no more "
            "than the loss."
        )
    return f'<p class="verdict">{escape(said)}</p>'


def _no_gpus(h: Mapping[str, Any]) -> str:
    if h["gpus_reported"]:
        return ""
    gpus = ", ".join(f"GPU {g['gpu']}" for g in h["gpus"])
    return (
        f'<p class="why"><b>No GPUs reported:</b> run {escape(str(h["run"]))} reported no GPU '
        "of its own (its replicas ran on CPUs, or could not be mapped to GPUs by bus id). The "
        f"report looked at every GPU of {escape(', '.join(h['instances']))} ({escape(gpus)}) "
        "for the charts, but pins no GPU finding on the run: what those GPUs showed is listed "
        "apart, under “On the host's GPUs”.</p>"
    )


def unexplained_html(h: Mapping[str, Any]) -> str:
    """The share of the loss no finding covers, and where it usually hides (docs/report.md
    "Unexplained")."""
    unexplained, lost = h.get("unexplained"), h.get("lost")
    if unexplained is None or lost is None or h.get("meets_target") is not False:
        return ""
    explained = max(0.0, round(lost - unexplained, 4))
    n = round(h["ideal_speedup"] or 0)
    share = h.get("allreduce_share")
    if share is not None:
        allreduce = (
            f"The all-reduce, measured: the run's workers spent {percent(share)} of each step "
            f"in it ({TRAINING_ALLREDUCE_SECONDS}, the least of the workers' shares)."
        )
    elif (estimate := h.get("allreduce_estimate")) is not None:
        allreduce = (
            f"The all-reduce, estimated (not measured): a ring all-reduce of this run's "
            f"{size(estimate['gradient_bytes'])} of gradients over its GPUs' slowest link "
            f"({estimate['link']}) takes about {estimate['seconds'] * 1000:.1f} ms, "
            f"{percent(estimate['share'])} of a median step. An estimate: NVLink is faster, "
            "and an all-reduce overlapped with the backward pass hides part of it; the torch "
            "monitor measures it on a DDP model."
        )
    else:
        allreduce = (
            "The all-reduce, not measured: this run publishes no all-reduce time (the torch "
            "monitor does, on a DDP model). mirrorwatch-doctor --probe --gradient-bytes N times "
            "an all-reduce of the model's gradient size on this host's links: an estimate, not "
            "this run's own."
        )
    busy = h.get("mean_utilization")
    if busy is not None:
        host = (
            f"The host's input pipeline and CPU: the GPUs were busy {percent(busy)} of the "
            f"time; for the other {percent(1 - busy)} of each step they waited on the host. "
        )
    else:
        host = "The host's input pipeline and CPU: the run reported no GPU to weigh its steps by. "
    host += (
        f"Replicas that are CPU devices (as make demo runs) share this machine's cores with "
        f"each other and with the input pipeline: {n} of them cannot go {n}x as fast as one."
    )
    model = (
        "The model's own scaling: a small model or batch makes each step short, and what every "
        "step costs beside its compute (launching it, synchronising the replicas) does not "
        "shrink with more replicas. mirrorwatch-train's scaling benchmark on this model tells "
        "the model's share from the host's."
    )
    items = "".join(f"<li>{escape(text)}</li>" for text in (allreduce, host, model))
    return (
        f'<div class="why unexplained"><p><b>Unexplained: {percent(unexplained)} of the ideal '
        f"throughput.</b> The run lost {percent(lost)} against its ideal; the findings' costs "
        f"cover {format_value(explained, 'points')} of it, and the other "
        f"{format_value(unexplained, 'points')} no check explains. What usually hides there:"
        f"</p><ul>{items}</ul></div>"
    )


def finding_title(f: Finding) -> str:
    # "Nothing wrong found" only where the checks found nothing and the run scaled as it
    # should (analysis.nothing_wrong says which).
    if f.kind == "none" and not f.summary.startswith(NOTHING_WRONG):
        return "No cause found"
    return TITLES[f.kind]


# A gpu_error without a number is an XID or ECC error: no GPU was lost (that one is costed).
NO_NUMBER = {
    "gpu_error": "What an XID or ECC error cost (a crash, a restart, nothing) is not in the "
    "telemetry.",
}


def cost_html(f: Finding) -> str:
    """The finding's cost in one plain sentence, then its method's first sentence; the rest of
    the method (its formula and bounds) folded."""
    if f.cost is None:
        said, method = "Cost: no number.", NO_NUMBER.get(f.kind, METHODS[f.kind].assumes)
    else:
        said, method = in_words(f.cost, f.kind), method_of(f.kind, f.cost.method).assumes
    # Why there is no number is all said; a method's sentence first, its workings folded.
    first, _, rest = method.partition(". ") if f.cost is not None else (method, "", "")
    first = first if first.endswith(".") or not rest else first + "."
    return f"<p class=\"cost\">{escape(said)} <span class='meta'>{escape(first)}</span></p>" + (
        f"<details><summary>How the {escape(f.cost.method)} method counts it</summary>"
        f"<p>{escape(rest)}</p></details>"
        if rest and f.cost is not None
        else ""
    )


def _finding(number: int, f: Finding, charts: Mapping[str, Chart], runbook_url: str) -> str:
    # Behind agents hosts may share `instance`: the agent's `host` label names the one.
    host = f" (host {f.labels['host']})" if f.labels.get("host") else ""
    on = f"on {f.instance}{host}" if f.instance else ""
    where = " ".join(part for part in (f"GPU {f.gpu}" if f.gpu else "", on) if part)
    figures = "".join(
        f"<tr><td>{escape(fig.name)}</td><td class='num'>{_value(fig)}</td></tr>"
        for fig in f.figures
    )
    # The link says where it goes: a web address in full, a local file by its path.
    target = f"{runbook_url}#{f.runbook.partition('#')[2]}"
    link = (
        f'<a href="{escape(target)}">{escape(target)}</a>'
        if f.runbook.startswith("docs/runbook.md")
        else escape(f.runbook)
    )
    return (
        f'<section class="finding" id="finding-{number}"><h3>{number}. '
        f'<span class="kind {f.kind}">{escape(f.kind)}</span>{escape(finding_title(f))}'
        f"{' — ' + escape(where) if where else ''}</h3>"
        f'<div class="meta">held for {percent(f.share)} of the range<span class="share">'
        f'<i style="width: {f.share * 100:.0f}%"></i></span> · runbook: {link}</div>'
        f"<p>{escape(f.summary)}</p>"
        + cost_html(f)
        + (f"<table>{figures}</table>{_queries([x.query for x in f.figures])}" if figures else "")
        + "".join(_chart(charts[name]) for name in f.charts if name in charts)
        + "</section>"
    )


def subject(h: Mapping[str, Any]) -> str:
    return f"run {h['run']}" if h["run"] else f"instance {', '.join(h['instances'])}"


def meta(h: Mapping[str, Any], prometheus: str) -> str:
    gpus = ", ".join(f"GPU {g['gpu']} ({g['name'] or g['uuid']})" for g in h["gpus"])
    return (
        f'<div class="meta">{escape(h["start_text"])} &#8211; {escape(h["end_text"])} '
        f"({h['duration_seconds']} s, sampled every {h['step_seconds']} s) · "
        f"{escape(', '.join(h['instances']))} · {escape(gpus)} · from {escape(prometheus)}</div>"
    )


def findings_html(analysis: Analysis, charts: Mapping[str, Chart], runbook_url: str) -> str:
    """The findings in order, each chart of ``charts`` under the first finding it backs, then
    the rest; the alerts last."""
    placed: set[str] = set(HEADLINE_CHARTS)
    findings = []
    for number, finding in enumerate(analysis.findings, 1):
        own = tuple(name for name in finding.charts if name not in placed)
        placed.update(own)
        findings.append(_finding(number, _with_charts(finding, own), charts, runbook_url))
    rest = [c for name, c in charts.items() if name not in placed and name != "alerts"]
    host = [
        _finding(number, _with_charts(f, ()), charts, runbook_url)
        for number, f in enumerate(analysis.host_findings, len(analysis.findings) + 1)
    ]
    return (
        f"<h2>Findings, most important first ({len(analysis.findings)})</h2>"
        + "".join(findings)
        + (
            f"<h2>On the host's GPUs, not pinned on the run ({len(host)})</h2>"
            '<p class="meta">The run reported no GPUs: these are of every GPU of its '
            "instances, which it may not have used; their costs are not in its headline.</p>"
            + "".join(host)
            if host
            else ""
        )
        + ("<h2>Other charts</h2>" + "".join(_chart(c) for c in rest) if rest else "")
        + ("<h2>Alerts</h2>" + _chart(charts["alerts"]) if "alerts" in charts else "")
    )


def document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>mirrorwatch report: {escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>mirrorwatch report: {escape(title)}</h1>{body}"
        '<p class="meta">Every number above comes from the query shown with it, asked at the '
        "range's end; findings.json holds the same figures. Written by mirrorwatch-report.</p>"
        "</body></html>"
    )


def render(
    analysis: Analysis, charts: Mapping[str, Chart], prometheus: str, runbook_url: str
) -> str:
    h = analysis.headline
    return document(
        subject(h),
        meta(h, prometheus)
        + "<h2>Headline</h2>"
        + headline_html(analysis)
        + "".join(chart_html(charts[name]) for name in HEADLINE_CHARTS if name in charts)
        + findings_html(analysis, charts, runbook_url),
    )


def headline_html(analysis: Analysis) -> str:
    return _headline(analysis.headline, analysis.findings[0], analysis.at)


def chart_html(chart: Chart) -> str:
    return _chart(chart)


def _with_charts(finding: Finding, charts: tuple[str, ...]) -> Finding:
    return replace(finding, charts=charts)
