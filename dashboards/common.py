"""Shared pieces of the mirrorwatch dashboards: variables, query and panel builders, limits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models

REPO = Path(__file__).resolve().parents[1]
THRESHOLDS_FILE = REPO / "alerts" / "thresholds.yml"

# The uid of the provisioned Prometheus data source (provisioning/datasources/); the
# `datasource` variable starts on it, and a user can switch to any other Prometheus.
DATASOURCE_UID = "mirrorwatch-prometheus"
DATASOURCE_NAME = "Prometheus"

TRAINING_UID = "mirrorwatch-training"
GPU_HOST_UID = "mirrorwatch-gpu-host"
FLEET_UID = "mirrorwatch-fleet"

# Every panel and query points at the `datasource` variable, never at a fixed data source,
# so the JSON needs no `${DS_...}` import inputs and works when provisioned from files.
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Clock-event reasons that cost speed; gpu_idle and the display/application settings do not.
SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)

LIMIT_LINE = "#F2495C"  # Grafana's red: dashed lines that mark a limit series


@dataclass(frozen=True)
class Limits:
    """The alert thresholds the dashboards draw, read from alerts/thresholds.yml."""

    busy_utilization_ratio: float
    imbalance_spread_ratio: float
    temperature_margin_celsius: float
    power_capped_fraction: float
    nvlink_errors_per_10m: float
    memory_used_ratio: float
    temperature_spread_celsius: float
    throughput_drop_ratio: float
    scaling_efficiency_ratio: float
    telemetry_stale_seconds: float


def load_limits(path: Path = THRESHOLDS_FILE) -> Limits:
    """Read the limits from the alert settings, so one edit there moves alerts and panels."""
    with path.open(encoding="utf-8") as f:
        settings: dict[str, Any] = yaml.safe_load(f)
    return Limits(
        busy_utilization_ratio=float(settings["busy_utilization_ratio"]),
        imbalance_spread_ratio=float(settings["GpuUtilizationImbalance"]["spread_ratio"]),
        temperature_margin_celsius=float(settings["GpuTemperatureNearSlowdown"]["margin_celsius"]),
        power_capped_fraction=float(settings["GpuPowerCapped"]["throttled_fraction"]),
        nvlink_errors_per_10m=float(settings["GpuNvlinkErrors"]["errors_per_10m"]),
        memory_used_ratio=float(settings["GpuMemoryNearlyFull"]["used_ratio"]),
        temperature_spread_celsius=float(settings["GpuTemperatureSpread"]["spread_celsius"]),
        throughput_drop_ratio=float(settings["TrainingThroughputDrop"]["below_baseline_ratio"]),
        scaling_efficiency_ratio=float(
            settings["TrainingScalingEfficiencyLow"]["efficiency_ratio"]
        ),
        telemetry_stale_seconds=float(settings["TrainingTelemetryStale"]["stale_after_seconds"]),
    )


# --- PromQL ----------------------------------------------------------------------------


def sel(metric: str, *matchers: str, gpu: bool = False, run: bool = False) -> str:
    """A selector with the job and instance matchers every query carries, plus gpu/run."""
    parts = ['job=~"$job"', 'instance=~"$instance"']
    if gpu:
        parts.append('gpu=~"$gpu"')
    if run:
        parts.append('run=~"$run"')
    parts.extend(matchers)
    return f"{metric}{{{', '.join(parts)}}}"


def rate(metric: str, *matchers: str, gpu: bool = False, run: bool = False) -> str:
    return f"rate({sel(metric, *matchers, gpu=gpu, run=run)}[$__rate_interval])"


def increase(metric: str, *matchers: str, gpu: bool = False, run: bool = False) -> str:
    return f"increase({sel(metric, *matchers, gpu=gpu, run=run)}[$__rate_interval])"


def run_gpus() -> str:
    """The (job, instance, uuid) of the GPUs the selected run reports, to filter GPU series."""
    return f"max by (job, instance, uuid) ({sel('mirrorwatch_training_replica_info', run=True)})"


def of_run(expr: str) -> str:
    """Keep the GPU series of ``expr`` that belong to the selected run."""
    return f"({expr}) and on (job, instance, uuid) {run_gpus()}"


def firing_alerts(*matchers: str) -> str:
    return sel("ALERTS", 'alertstate="firing"', *matchers)


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


# --- Panels ----------------------------------------------------------------------------

Step = tuple[float | None, str]


def steps(*pairs: Step) -> dashboard_builders.ThresholdsConfig:
    """Absolute threshold steps; the first pair's value is None (the base colour)."""
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=value, color=color) for value, color in pairs])
    )


NO_LIMIT = steps((None, "green"))


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
ACTIVE_OFF = value_text({"1": ("active", "red"), "0": ("off", "transparent")})


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
    overrides: list[Builder[models.DashboardFieldConfigSourceOverrides]] = field(
        default_factory=list
    )
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
        panel = panel.overrides(spec.overrides)
    if spec.transformations:
        panel = panel.transformations(spec.transformations)
    return panel


def time_series(
    spec: PanelSpec,
    *,
    threshold_style: common_models.GraphThresholdsStyleMode = (
        common_models.GraphThresholdsStyleMode.OFF
    ),
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
        else (common_models.BigValueColorMode.VALUE)
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


# --- Dashboards ------------------------------------------------------------------------


def _all() -> models.VariableOption:
    return models.VariableOption(selected=True, text="All", value="$__all")


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(models.VariableOption(selected=True, text=DATASOURCE_NAME, value=DATASOURCE_UID))
    )


def query_variable(
    name: str, label: str, query: str, *, multi: bool = True, description: str
) -> dashboard_builders.QueryVariable:
    """A label_values variable, refreshed when the time range changes."""
    variable = (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .description(description)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.NATURAL_ASC)
    )
    if multi:
        # `.+` rather than Grafana's default list of values: the regex stays short and
        # still matches series of hosts that appear after the variable was loaded.
        variable = variable.multi(True).include_all(True).all_value(".+").current(_all())
    return variable


RUNS_QUERY = 'label_values(mirrorwatch_training_info{job=~"$job", instance=~"$instance"}, run)'
HOST_GPUS_QUERY = 'label_values(mirrorwatch_gpu_info{job=~"$job", instance=~"$instance"}, gpu)'


def standard_variables(
    *, run_query: str, gpu_query: str, one_run: bool
) -> list[dashboard_builders.DatasourceVariable | dashboard_builders.QueryVariable]:
    return [
        datasource_variable(),
        query_variable(
            "job",
            "Job",
            "label_values(mirrorwatch_up, job)",
            description="Prometheus scrape job(s) of the mirrorwatch exporters.",
        ),
        query_variable(
            "instance",
            "Instance",
            'label_values(mirrorwatch_up{job=~"$job"}, instance)',
            description="Exporter address: one GPU host.",
        ),
        query_variable(
            "run",
            "Run",
            run_query,
            multi=not one_run,
            description="Training run, as named by the Keras callback (MIRRORWATCH_RUN).",
        ),
        query_variable(
            "gpu",
            "GPU",
            gpu_query,
            description="NVML index of the GPU, as nvidia-smi numbers it.",
        ),
    ]


def dashboard_link(title: str, uid: str, tooltip: str) -> dashboard_builders.DashboardLink:
    """A link to another mirrorwatch dashboard that keeps the time range and variables."""
    return (
        dashboard_builders.DashboardLink(title)
        .type(models.DashboardLinkType.LINK)
        .url(f"/d/{uid}")
        .tooltip(tooltip)
        .icon("dashboard")
        .include_vars(True)
        .keep_time(True)
        .target_blank(False)
        .as_dropdown(False)
        .tags([])
    )


@dataclass
class Row:
    title: str
    panels: Sequence[Any]


@dataclass
class DashboardSpec:
    uid: str
    title: str
    description: str
    variables: Sequence[Any]
    rows: Sequence[Row]
    links: Sequence[dashboard_builders.DashboardLink]
    alert_annotation: str
    tags: Sequence[str] = ("mirrorwatch",)


def build(spec: DashboardSpec) -> dict[str, Any]:
    """The dashboard as Grafana JSON data, with stable panel ids."""
    builder = (
        dashboard_builders.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(list(spec.tags))
        .readonly()
        .timezone("browser")
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .variables(list(spec.variables))
        .links(list(spec.links))
        .annotation(
            dashboard_builders.AnnotationQuery()
            .name("Alerts")
            .datasource(DATASOURCE)
            .enable(True)
            .hide(False)
            .icon_color("red")
            .expr(spec.alert_annotation)
        )
    )
    for row in spec.rows:
        builder = builder.with_row(dashboard_builders.Row(row.title))
        for panel in row.panels:
            builder = builder.with_panel(panel)
    data: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    for panel_id, panel in enumerate(data["panels"], start=1):
        panel["id"] = panel_id
    # The SDK's AnnotationQuery models only `expr`; Grafana's Prometheus annotations also
    # read these fields to title, tag and time the markers.
    for annotation in data["annotations"]["list"]:
        annotation.update(
            {
                "step": "30s",
                "titleFormat": "{{alertname}}",
                "textFormat": "{{severity}}: {{instance}} GPU {{gpu}} {{run}}",
                "tagKeys": "alertname,severity",
                "useValueForTime": False,
            }
        )
    return data


def render(data: dict[str, Any]) -> str:
    """Stable JSON text: sorted keys, so a rebuild changes the file only when content does."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
