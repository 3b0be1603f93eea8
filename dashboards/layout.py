"""A dashboard from its rows: pinned uid, links, the alert annotation, stable panel ids, JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models

from dashboards.variables import DATASOURCE, Variable

TRAINING_UID = "mirrorwatch-training"
GPU_HOST_UID = "mirrorwatch-gpu-host"
FLEET_UID = "mirrorwatch-fleet"


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
    variables: Sequence[Variable]
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
