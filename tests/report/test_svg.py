"""mirrorwatch.report.svg: hand-drawn charts and the units they show."""

from __future__ import annotations

import re

from mirrorwatch.report.scope import _one_of
from mirrorwatch.report.svg import LEFT, Line, Plot, format_value, line_chart, spans


def test_spans_join_consecutive_active_points() -> None:
    points = [(0, 0), (1, 1), (2, 1), (3, 0), (4, 1)]
    assert spans(points, 1) == [(1, 3), (4, 5)]


def test_values_read_in_the_units_people_use() -> None:
    assert format_value(0.95, "ratio") == "95 %"
    assert format_value(1.98e9, "hertz") == "1.98 GHz"
    assert format_value(8, "lanes") == "x8"
    assert format_value(0.0375, "seconds") == "38 ms"


def test_a_chart_without_data_says_so_rather_than_drawing_nothing() -> None:
    assert "no data in this range" in line_chart("x", Plot(0, 10, "ratio"))


def test_a_chart_draws_one_polyline_per_line() -> None:
    plot = Plot(0, 10, "ratio", [Line("a", [(0, 0.5), (10, 0.6)]), Line("b", [(0, 0.4)], True)])
    svg = line_chart("x", plot)
    assert svg.count("<polyline") == 2
    assert 'stroke-dasharray="6 4"' in svg


def test_label_values_become_promql_regex_literals() -> None:
    assert _one_of("instance", ("h:1",)) == 'instance="h:1"'
    assert (
        _one_of("instance", ("10.0.0.1:1", "a-b:2")) == 'instance=~"10\\\\.0\\\\.0\\\\.1:1|a-b:2"'
    )


def y_ticks(svg: str) -> list[str]:
    """The y axis's labels, bottom first."""
    found = re.findall(rf'<text x="{LEFT - 6}" y="([\d.]+)" text-anchor="end">([^<]*)<', svg)
    return [label for _, label in sorted(found, key=lambda tick: -float(tick[0]))]


def test_a_utilisation_spread_reads_in_percentage_points() -> None:
    assert format_value(0.1555, "points") == "15.6 pp"
    assert format_value(0.05, "points") == "5.0 pp"


def test_a_lane_axis_ticks_only_at_lane_widths() -> None:
    plot = Plot(0, 10, "lanes", [Line("GPU 1", [(0, 16), (10, 8)])])
    ticks = y_ticks(line_chart("pcie", plot))
    assert ticks == ["x1", "x2", "x4", "x8", "x16"]


def test_an_axis_of_values_above_zero_starts_at_zero() -> None:
    plot = Plot(0, 10, "per_second", [Line("run", [(0, 1900), (5, 1900), (10, 1400)])])
    ticks = y_ticks(line_chart("throughput", plot))
    assert ticks[0] == "0/s"
