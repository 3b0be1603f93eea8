"""report.html of a comparison: both headlines side by side, what changed, both runs' charts on
one time axis, then the first run's report and the second run's findings."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from mirrorwatch.report.charts import Chart
from mirrorwatch.report.comparison import Comparison
from mirrorwatch.report.cost import in_words
from mirrorwatch.report.evidence import Finding
from mirrorwatch.report.page import (
    DASH,
    chart_html,
    document,
    finding_title,
    findings_html,
    headline_html,
    meta,
    subject,
)
from mirrorwatch.report.svg import format_value
from mirrorwatch.report.words import percent

_ROWS = (
    ("examples per second", "examples_per_second", "per_second"),
    ("speed-up", "speedup", "speedup"),
    ("scaling efficiency", "scaling_efficiency", "ratio"),
    ("median step time", "step_time_p50_seconds", "seconds"),
    ("mean GPU utilisation", "mean_utilization", "ratio"),
)


def _shown(value: Any, unit: str) -> str:
    if value is None:
        return DASH
    if unit == "speedup":
        return f"{value:.2f}x"
    return format_value(float(value), unit)


def _change(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:+.1f} %"


def _cost(h: Mapping[str, Any]) -> str:
    cost = h.get("cost")
    return (
        DASH
        if cost is None
        else f"{percent(cost['fraction'])} ({percent(cost['low'])} to {percent(cost['high'])})"
    )


def _table(c: Comparison, names: tuple[str, str]) -> str:
    changes = c.changes()
    head = (
        f"<tr><th></th><th>{escape(names[0])}</th><th>{escape(names[1])}</th><th>change</th></tr>"
    )
    rows = [
        f"<tr><td>{escape(label)}</td>"
        f"<td class='num'>{escape(_shown(changes[name]['first'], unit))}</td>"
        f"<td class='num'>{escape(_shown(changes[name]['second'], unit))}</td>"
        f"<td class='num'>{escape(_change(changes[name]['change']))}</td></tr>"
        for label, name, unit in _ROWS
    ]
    a, b = c.first.headline, c.second.headline
    rows.append(
        f"<tr><td>throughput lost to the findings</td><td class='num'>{escape(_cost(a))}</td>"
        f"<td class='num'>{escape(_cost(b))}</td><td></td></tr>"
    )
    for label, name in (("lost against ideal", "lost"), ("unexplained, of ideal", "unexplained")):
        first, second = a.get(name), b.get(name)
        # A change of a share of the ideal, in points: "-12.0 pp", not a ratio of ratios.
        moved = DASH if first is None or second is None else f"{(second - first) * 100:+.1f} pp"
        rows.append(
            f"<tr><td>{label}</td><td class='num'>{escape(_shown(first, 'ratio'))}</td>"
            f"<td class='num'>{escape(_shown(second, 'ratio'))}</td>"
            f"<td class='num'>{escape(moved)}</td></tr>"
        )
    tops = (c.first.findings[0], c.second.findings[0])
    rows.append(
        "<tr><td>top finding</td>"
        + "".join(f"<td>{escape(finding_title(f))}</td>" for f in tops)
        + "<td></td></tr>"
    )
    return f'<table class="side-by-side">{head}{"".join(rows)}</table>'


def _item(f: Finding, note: str = "") -> str:
    where = f" (GPU {f.gpu})" if f.gpu else ""
    return (
        f"<li><b>{escape(finding_title(f))}{escape(where)}</b>: {escape(f.summary)} "
        f"{escape(in_words(f.cost, f.kind))}{escape(note)}</li>"
    )


def _changed(c: Comparison) -> str:
    parts = []
    for title, found in (("Went away", c.gone), ("Came", c.came)):
        items = "".join(_item(f) for f in found) or "<li>none</li>"
        parts.append(f'<h3>{title}</h3><ul class="{title.split()[0].lower()}">{items}</ul>')
    moved = [
        _item(
            b,
            f" (held {percent(a.share)} of the first range, {percent(b.share)} of the second)",
        )
        for a, b, changed in c.both
        if changed
    ]
    parts.append(f'<h3>Changed</h3><ul class="changed">{"".join(moved) or "<li>none</li>"}</ul>')
    return "".join(parts)


def render_comparison(
    c: Comparison,
    charts: Mapping[str, Chart],
    both: Mapping[str, Chart],
    prometheus: str,
    runbook_url: str,
) -> str:
    """The page; ``charts`` are the first run's, ``both`` the charts of both on one axis."""
    a, b = c.first.headline, c.second.headline
    names = (subject(a), subject(b))
    if names[0] == names[1]:
        names = (f"{names[0]} (first range)", f"{names[1]} (second range)")
    return document(
        f"{names[0]} against {names[1]}",
        meta(a, prometheus)
        + meta(b, prometheus)
        + "<h2>Side by side</h2>"
        + _table(c, names)
        + "<h2>What changed</h2>"
        + _changed(c)
        + "<h2>Both runs on one time axis</h2>"
        + "".join(chart_html(chart) for chart in both.values())
        + f"<h2>{escape(names[0])}</h2>"
        + headline_html(c.first)
        + findings_html(c.first, charts, runbook_url)
        + f"<h2>{escape(names[1])}</h2>"
        + headline_html(c.second)
        + findings_html(c.second, {}, runbook_url),
    )
