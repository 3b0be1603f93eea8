"""Charts as inline SVG, drawn by hand: time-series lines with reference lines, and timelines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape

from mirrorwatch.report.words import percent, points

WIDTH, HEIGHT = 760, 230
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 30
ROW = 20
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
REFERENCE = "#555555"


@dataclass(frozen=True)
class Line:
    label: str
    points: Sequence[tuple[float, float]]
    reference: bool = False  # a threshold or limit: dashed, grey unless coloured like its GPU
    color: str | None = None


@dataclass(frozen=True)
class Band:
    """A shaded area between two curves sampled at the same times (the run mean ±5 pp)."""

    label: str
    low: Sequence[tuple[float, float]]
    high: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Row:
    label: str
    spans: Sequence[tuple[float, float]]  # (from, to) unix seconds while active
    color: str | None = None  # by what the row means (an alert's severity); else the palette


# An alert's bar says how much it matters: red pages, amber warns, grey is information
# (Watchdog, which fires all the time on purpose).
SEVERITY_COLORS = {"critical": "#c0392b", "warning": "#e08a00", "info": "#8a95a3"}
# The widths a PCIe link trains at: the only ticks a lane axis should show.
LANE_WIDTHS = (1, 2, 4, 8, 16, 32)


@dataclass
class Plot:
    start: float
    end: float
    unit: str
    lines: list[Line] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)


def format_value(value: float, unit: str) -> str:
    """A value as a person reads it: 95 %, 15.2 pp, 87 °C, 1.98 GHz, x16, 1,234/s, 40 ms.

    ``points`` is a difference of two ratios (a utilisation spread), in percentage points,
    so that one spread reads the same in a summary, a figure and a chart's axis.
    """
    if unit == "points":
        return points(value)
    if unit == "ratio":
        return percent(value)
    if unit == "celsius":
        return f"{value:.0f} °C"
    if unit == "hertz":
        return "0 GHz" if value == 0 else f"{value / 1e9:.2f} GHz"
    if unit == "lanes":
        return f"x{value:.0f}"
    if unit == "seconds":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.1f} s"
    if unit == "per_second":
        return f"{value:,.0f}/s"
    if unit == "bytes":
        return f"{value / 1024**3:.1f} GiB"
    return f"{value:.3g}"


def _ticks(low: float, high: float, count: int = 4, unit: str = "") -> list[float]:
    if unit == "lanes":
        return [float(w) for w in LANE_WIDTHS if low <= w <= high]
    span = high - low
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= high + 1e-12]


def _clock(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%H:%M:%S")


def _x_axis(start: float, end: float, left: float, bottom: float) -> list[str]:
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" class="axis"/>']
    for i in range(5):
        moment = start + (end - start) * i / 4
        x = left + (WIDTH - RIGHT - left) * i / 4
        anchor = ("start", "middle", "middle", "middle", "end")[i]
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="{anchor}">{_clock(moment)}</text>'
        )
    return parts


def line_chart(name: str, plot: Plot) -> str:
    """An SVG chart of ``plot``'s lines over [start, end]; an empty one says so."""
    values = [v for line in plot.lines for _, v in line.points if math.isfinite(v)]
    values += [v for band in plot.bands for _, v in (*band.low, *band.high) if math.isfinite(v)]
    bottom = HEIGHT - BOTTOM
    head = f'<svg class="chart" data-chart="{name}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
    if not values:
        return (
            f'{head}<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">'
            "no data in this range</text></svg>"
        )
    low, high = min(values), max(values)
    pad = (high - low) * 0.1 or max(abs(high) * 0.1, 1e-3)
    low, high = low - pad, high + pad
    if plot.unit == "ratio" and max(values) <= 1:
        low, high = max(low, 0.0), min(high, 1.02)
    if min(values) >= 0:
        # From zero, so a drop reads at its true size: 1,900 to 1,400 examples/s is a quarter
        # off, not a collapse; and x8 against x16 is half.
        low = 0.0
    span_t = max(plot.end - plot.start, 1e-9)

    def x(t: float) -> float:
        return LEFT + (WIDTH - RIGHT - LEFT) * (t - plot.start) / span_t

    def y(v: float) -> float:
        return bottom - (bottom - TOP) * (v - low) / (high - low)

    parts = [head]
    for tick in _ticks(low, high, unit=plot.unit):
        parts.append(
            f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{WIDTH - RIGHT}" '
            f'y2="{y(tick):.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{escape(format_value(tick, plot.unit))}</text>"
        )
    parts += _x_axis(plot.start, plot.end, LEFT, bottom)
    for band in plot.bands:
        outline = [*band.high, *reversed(band.low)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in outline)
        parts.append(
            f'<polygon points="{coords}" class="band"><title>{escape(band.label)}</title></polygon>'
        )
    colours = iter(PALETTE)
    for line in plot.lines:
        colour = line.color or (REFERENCE if line.reference else next(colours, REFERENCE))
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in line.points if math.isfinite(v))
        dash = ' stroke-dasharray="6 4"' if line.reference else ""
        parts.append(
            f'<polyline points="{coords}" stroke="{colour}"{dash} class="series">'
            f"<title>{escape(line.label)}</title></polyline>"
        )
    parts.append("</svg>")
    return "".join(parts)


def legend(lines: Sequence[Line], bands: Sequence[Band] = ()) -> str:
    """The chart's key as HTML, coloured like line_chart colours them."""
    colours = iter(PALETTE)
    items = []
    for line in lines:
        colour = line.color or (REFERENCE if line.reference else next(colours, REFERENCE))
        style = "dashed" if line.reference else "solid"
        items.append(
            f'<span class="key"><i style="border-top: 2px {style} {colour}"></i>'
            f"{escape(line.label)}</span>"
        )
    for band in bands:
        items.append(f'<span class="key"><i class="band-key"></i>{escape(band.label)}</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def timeline(name: str, rows: Sequence[Row], start: float, end: float, empty: str) -> str:
    """One bar per row where it was active; ``empty`` is said when no row has a span."""
    left = 230
    height = TOP + max(len(rows), 1) * ROW + BOTTOM
    bottom = height - BOTTOM
    head = f'<svg class="chart" data-chart="{name}" viewBox="0 0 {WIDTH} {height}" role="img">'
    span_t = max(end - start, 1e-9)

    def x(t: float) -> float:
        return left + (WIDTH - RIGHT - left) * (min(max(t, start), end) - start) / span_t

    parts = [head]
    for i, row in enumerate(rows):
        top = TOP + i * ROW
        parts.append(
            f'<text x="{left - 8}" y="{top + 14}" text-anchor="end">{escape(row.label)}</text>'
        )
        parts.append(
            f'<line x1="{left}" y1="{top + ROW - 1}" x2="{WIDTH - RIGHT}" '
            f'y2="{top + ROW - 1}" class="grid"/>'
        )
        colour = row.color or PALETTE[i % len(PALETTE)]
        for begin, finish in row.spans:
            width = max(x(finish) - x(begin), 1.5)
            parts.append(
                f'<rect x="{x(begin):.1f}" y="{top + 3}" width="{width:.1f}" height="{ROW - 7}" '
                f'fill="{colour}" class="span"><title>{escape(row.label)}: {_clock(begin)}&#8211;'
                f"{_clock(finish)}</title></rect>"
            )
    if not any(row.spans for row in rows):
        parts.append(
            f'<text x="{(left + WIDTH) / 2}" y="{TOP + 14}" text-anchor="middle" class="empty">'
            f"{escape(empty)}</text>"
        )
    parts += _x_axis(start, end, left, bottom)
    parts.append("</svg>")
    return "".join(parts)


def spans(points: Sequence[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """The stretches of ``points`` (one every ``step`` s) at which the value is at least 1."""
    found: list[tuple[float, float]] = []
    for t, v in points:
        if v < 1:
            continue
        # The next point after the last active one starts where that one's span ends.
        if found and t - found[-1][1] < step * 0.5:
            found[-1] = (found[-1][0], t + step)
        else:
            found.append((t, t + step))
    return found
