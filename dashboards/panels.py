"""Panel builders: one query target, one panel's common fields, and the four visualisations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from dashboards.variables import DATASOURCE

LIMIT_LINE = "#F2495C"  # Grafana's red: dashed lines that mark a limit series
TARGET_LINE = "#FF9830"  # Grafana's orange: dotted lines that mark a target below a limit


@dataclass(frozen=True)
class Query:
    """One panel target: a PromQL expression and how Grafana should run it."""

    expr: str
    legend: str = "__auto"
    instant: bool = False
    table: bool = False

    def build(self, ref_id: str) -> prometheus.Dataquery:
        target = prometheus.Dataquery().expr(self.expr).ref_id(ref_id).datasource(DATASOURCE)
        target = target.legend_format(self.legend)
        target = target.instant() if self.instant else target.range()
        if self.table:
            target = target.format(prometheus_models.PromQueryFormat.TABLE)
        return target


def instant_table(expr: str) -> Query:
    """A query read once, now, as table rows (one per series, labels as columns)."""
    return Query(expr, "", instant=True, table=True)


Step = tuple[float | None, str]


def steps(*pairs: Step) -> dashboard_builders.ThresholdsConfig:
    """Absolute threshold steps; the first pair's value is None (the base colour)."""
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=value, color=color) for value, color in pairs])
    )


NO_LIMIT = steps((None, "green"))
RED_FROM_ONE = steps((None, "green"), (1, "red"))
GREEN_FROM_ONE = steps((None, "red"), (1, "green"))


def value_text(mapping: dict[str, tuple[str, str]]) -> list[models.ValueMapping]:
    """Value mappings {value: (text, colour)}, e.g. 1 -> up (green)."""
    return [
        models.ValueMap(
            options={
                value: models.ValueMappingResult(text=text, color=color, index=index)
                for index, (value, (text, color)) in enumerate(mapping.items())
            }
        )
    ]


UP_DOWN = value_text({"1": ("up", "green"), "0": ("down", "red")})
OK_FAILED = value_text({"1": ("ok", "green"), "0": ("failed", "red")})
ACTIVE_OFF = value_text({"1": ("active", "red"), "0": ("off", "transparent")})

Override = Builder[models.DashboardFieldConfigSourceOverrides]


def limit_line_override(regex: str) -> dashboard_builders.DashboardFieldConfigSourceOverrides:
    """Series whose name matches ``regex`` are limits: drawn as dashed red lines."""
    return (
        dashboard_builders.DashboardFieldConfigSourceOverrides()
        .matcher(models.MatcherConfig(id_val="byRegexp", options=regex))
        .properties(
            [
                models.DynamicConfigValue(
                    id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}
                ),
                models.DynamicConfigValue(
                    id_val="color", value={"mode": "fixed", "fixedColor": LIMIT_LINE}
                ),
                models.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
            ]
        )
    )


def target_line_override(regex: str) -> dashboard_builders.DashboardFieldConfigSourceOverrides:
    """Series whose name matches ``regex`` are targets short of the limit (0.9 x ideal): dotted
    orange, so that they never read as the limit itself."""
    return (
        dashboard_builders.DashboardFieldConfigSourceOverrides()
        .matcher(models.MatcherConfig(id_val="byRegexp", options=regex))
        .properties(
            [
                models.DynamicConfigValue(
                    id_val="custom.lineStyle", value={"fill": "dot", "dash": [0, 10]}
                ),
                models.DynamicConfigValue(
                    id_val="color", value={"mode": "fixed", "fixedColor": TARGET_LINE}
                ),
                models.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
            ]
        )
    )


def override(
    name: str, properties: dict[str, object]
) -> dashboard_builders.DashboardFieldConfigSourceOverrides:
    return (
        dashboard_builders.DashboardFieldConfigSourceOverrides()
        .matcher(models.MatcherConfig(id_val="byName", options=name))
        .properties([models.DynamicConfigValue(id_val=k, value=v) for k, v in properties.items()])
    )


P = TypeVar("P", timeseries.Panel, stat.Panel, statetimeline.Panel, table.Panel)


@dataclass
class PanelSpec:
    """What every panel has: a title, a description saying what to look for, a unit."""

    title: str
    description: str
    unit: str
    queries: Sequence[Query]
    width: int = 12
    height: int = 8
    thresholds: dashboard_builders.ThresholdsConfig = field(default_factory=lambda: NO_LIMIT)
    min_value: float | None = None
    max_value: float | None = None
    decimals: float | None = None
    mappings: list[models.ValueMapping] = field(default_factory=list)
    overrides: Sequence[Override] = ()
    transformations: list[models.DataTransformerConfig] = field(default_factory=list)


def _common(panel: P, spec: PanelSpec) -> P:
    panel = (
        panel.title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.width)
        .height(spec.height)
        .thresholds(spec.thresholds)
        .targets([q.build(chr(ord("A") + i)) for i, q in enumerate(spec.queries)])
    )
    if spec.min_value is not None:
        panel = panel.min(spec.min_value)
    if spec.max_value is not None:
        panel = panel.max(spec.max_value)
    if spec.decimals is not None:
        panel = panel.decimals(spec.decimals)
    if spec.mappings:
        panel = panel.mappings(spec.mappings)
    if spec.overrides:
        panel = panel.overrides(list(spec.overrides))
    if spec.transformations:
        panel = panel.transformations(spec.transformations)
    return panel


ThresholdStyle = common_models.GraphThresholdsStyleMode


def time_series(
    spec: PanelSpec,
    *,
    threshold_style: ThresholdStyle = ThresholdStyle.OFF,
    axis_label: str | None = None,
    fill_opacity: float = 10,
) -> timeseries.Panel:
    panel = _common(timeseries.Panel(), spec)
    panel = (
        panel.fill_opacity(fill_opacity)
        .line_width(1)
        .show_points(common_models.VisibilityMode.NEVER)
        .thresholds_style(common_builders.GraphThresholdsStyleConfig().mode(threshold_style))
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common_models.LegendDisplayMode.TABLE)
            .placement(common_models.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common_models.TooltipDisplayMode.MULTI)
            .sort(common_models.SortOrder.DESCENDING)
        )
    )
    if axis_label is not None:
        panel = panel.axis_label(axis_label)
    return panel


def stat_panel(spec: PanelSpec, *, background: bool = True) -> stat.Panel:
    mode = (
        common_models.BigValueColorMode.BACKGROUND
        if background
        else common_models.BigValueColorMode.VALUE
    )
    return (
        _common(stat.Panel(), spec)
        .color_mode(mode)
        .graph_mode(common_models.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )


def state_timeline(spec: PanelSpec) -> statetimeline.Panel:
    return (
        _common(statetimeline.Panel(), spec)
        .show_value(common_models.VisibilityMode.NEVER)
        .merge_values(True)
        .row_height(0.8)
        .fill_opacity(80)
        .legend(common_builders.VizLegendOptions().show_legend(False))
    )


def table_panel(spec: PanelSpec) -> table.Panel:
    return _common(table.Panel(), spec).cell_height(common_models.TableCellHeight.SM)


def organize(
    exclude: Sequence[str] = (), rename: dict[str, str] | None = None, order: Sequence[str] = ()
) -> models.DataTransformerConfig:
    """Hide, rename and order table columns."""
    return models.DataTransformerConfig(
        id_val="organize",
        options={
            "excludeByName": dict.fromkeys(exclude, True),
            "renameByName": rename or {},
            "indexByName": {name: i for i, name in enumerate(order)},
        },
    )


MERGE = models.DataTransformerConfig(id_val="merge", options={})
