"""Named panel kinds: the shapes the dashboards repeat, each with its defaults written once.

- `ratio_series`: shares from 0 to 1 over time, optionally against an alert's limit line;
- `against_limit`: a quantity with its own limit series (a clock and its maximum) dashed red;
- `amount_series`: a non-negative quantity or rate over time;
- `event_counts`: events per interval, coloured from the first (or from an alert's limit);
- `up_down_stat`, `up_down_timeline`: a state that is up (1) or down (0);
- `reasons_timeline`: clock-event reasons, red while active;
- `alerts_table`: the alerts firing now.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import stat, statetimeline, table, timeseries
from grafana_foundation_sdk.models import dashboard as models

from dashboards.panels import (
    ACTIVE_OFF,
    GREEN_FROM_ONE,
    NO_LIMIT,
    UP_DOWN,
    Override,
    PanelSpec,
    Query,
    Step,
    ThresholdStyle,
    instant_table,
    limit_line_override,
    organize,
    stat_panel,
    state_timeline,
    steps,
    table_panel,
    time_series,
)


def ratio_series(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    width: int = 8,
    height: int = 8,
    limit: Step | None = None,
    fill_opacity: float = 0,
    overrides: Sequence[Override] = (),
) -> timeseries.Panel:
    """Shares from 0 to 1; ``limit`` (value, colour past it) is drawn as a dashed line."""
    spec = PanelSpec(
        title,
        description,
        "percentunit",
        queries,
        width=width,
        height=height,
        min_value=0,
        max_value=1,
        thresholds=steps((None, "green"), limit) if limit else NO_LIMIT,
        overrides=overrides,
    )
    style = ThresholdStyle.DASHED if limit else ThresholdStyle.OFF
    return time_series(spec, threshold_style=style, fill_opacity=fill_opacity)


def against_limit(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    limits: str,
    *,
    width: int = 8,
    height: int = 8,
    min_value: float | None = 0,
    fill_opacity: float = 0,
    axis_label: str | None = None,
) -> timeseries.Panel:
    """Values and their limits; the series whose legend matches the regex ``limits`` are the
    limits, drawn as dashed red lines."""
    spec = PanelSpec(
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        min_value=min_value,
        overrides=[limit_line_override(limits)],
    )
    return time_series(spec, axis_label=axis_label, fill_opacity=fill_opacity)


def amount_series(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 8,
    fill_opacity: float = 0,
    axis_label: str | None = None,
) -> timeseries.Panel:
    """A quantity that is never negative: traffic, energy, durations, throughput."""
    spec = PanelSpec(title, description, unit, queries, width=width, min_value=0)
    return time_series(spec, axis_label=axis_label, fill_opacity=fill_opacity)


def event_counts(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    width: int = 8,
    alarm: Step | None = (1, "red"),
    threshold_style: ThresholdStyle = ThresholdStyle.OFF,
) -> timeseries.Panel:
    """Events per interval; coloured ``alarm`` (value, colour) from that many on."""
    spec = PanelSpec(
        title,
        description,
        "short",
        queries,
        width=width,
        min_value=0,
        thresholds=steps((None, "green"), alarm) if alarm else NO_LIMIT,
    )
    return time_series(spec, threshold_style=threshold_style)


def up_down_stat(
    title: str, description: str, queries: Sequence[Query], *, width: int, height: int = 5
) -> stat.Panel:
    spec = PanelSpec(
        title,
        description,
        "none",
        queries,
        width=width,
        height=height,
        mappings=UP_DOWN,
        thresholds=GREEN_FROM_ONE,
    )
    return stat_panel(spec)


def up_down_timeline(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    width: int,
    words: list[models.ValueMapping] = UP_DOWN,
) -> statetimeline.Panel:
    """1/0 as words (up/down, or ``words`` such as OK_FAILED), green for 1, red for 0."""
    spec = PanelSpec(
        title,
        description,
        "none",
        queries,
        width=width,
        mappings=words,
        thresholds=GREEN_FROM_ONE,
    )
    return state_timeline(spec)


def reasons_timeline(
    description: str, query: Query, *, width: int = 12, height: int
) -> statetimeline.Panel:
    """ "Throttle reasons": each clock-event reason of each GPU, red while active."""
    spec = PanelSpec(
        "Throttle reasons",
        description,
        "bool_on_off",
        [query],
        width=width,
        height=height,
        mappings=ACTIVE_OFF,
        thresholds=steps((None, "transparent"), (1, "red")),
    )
    return state_timeline(spec)


def alerts_table(
    description: str,
    expr: str,
    *,
    width: int,
    height: int,
    hide: Sequence[str],
    order: Sequence[str],
) -> table.Panel:
    """ "Firing alerts": one row per alert firing now, its labels as columns."""
    spec = PanelSpec(
        "Firing alerts",
        description,
        "none",
        [instant_table(expr)],
        width=width,
        height=height,
        transformations=[organize(exclude=["Time", "Value", "__name__", *hide], order=order)],
    )
    return table_panel(spec)
