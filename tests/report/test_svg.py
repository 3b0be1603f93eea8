"""mirrorwatch.report.svg: hand-drawn charts and the units they show."""

from __future__ import annotations

from mirrorwatch.report.scope import _one_of
from mirrorwatch.report.svg import Line, Plot, format_value, line_chart, spans


def test_spans_join_consecutive_active_points() -> None:
    points = [(0, 0), (1, 1), (2, 1), (3, 0), (4, 1)]
    assert spans(points, 1) == [(1, 3), (4, 5)]


def test_values_read_in_the_units_people_use() -> None:
    assert format_value(0.95, "ratio") == "95%"
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
