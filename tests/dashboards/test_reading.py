"""What a person reads off the dashboards: legends that tell hosts apart, limit and target lines
that look different, alerts first, and names and values that say what they show."""

from __future__ import annotations

import re
from typing import Any

from tests.dashboards.queries import JSON_DIR, load_dashboards, panels

DASHBOARDS = load_dashboards()


def render_legend(legend_format: str, labels: dict[str, str]) -> str:
    """Grafana's Prometheus data source: each ``{{ name }}`` becomes the series' label value,
    an unknown label the empty string (renderLegendFormat, packages/grafana-prometheus/src/
    legend.ts: ``/\\{\\{\\s*(.+?)\\s*\\}\\}/g``)."""
    return re.sub(r"\{\{\s*(.+?)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend_format)


def panel(dashboard: str, title: str) -> dict[str, Any]:
    return next(p for p in panels(DASHBOARDS[dashboard]) if p["title"] == title)


def rows(dashboard: str) -> dict[str, list[str]]:
    """Row title -> its panels' titles, in order (rows are expanded: panels follow their row)."""
    found: dict[str, list[str]] = {}
    current = ""
    for item in DASHBOARDS[dashboard]["panels"]:
        if item["type"] == "row":
            current = item["title"]
            found[current] = [p["title"] for p in item.get("panels", [])]
        else:
            found.setdefault(current, []).append(item["title"])
    return found


def test_per_gpu_legends_tell_two_hosts_apart() -> None:
    # The instance variable defaults to All: GPU 0 of two hosts must be two legends.
    one = {"gpu": "0", "instance": "gpu-a:9848", "reason": "sw_power_cap", "link": "1"}
    other = {**one, "instance": "gpu-b:9848"}
    checked = 0
    for name, dashboard in DASHBOARDS.items():
        for p in panels(dashboard):
            for target in p.get("targets", []):
                legend = target.get("legendFormat", "")
                if "{{gpu}}" in legend.replace(" ", ""):
                    checked += 1
                    assert render_legend(legend, one) != render_legend(legend, other), (
                        name,
                        p["title"],
                        legend,
                    )
    assert checked > 10


def overrides_of(p: dict[str, Any], series: str) -> dict[str, Any]:
    """The properties Grafana applies to ``series`` (byRegexp matchers, later ones winning)."""
    applied: dict[str, Any] = {}
    for item in p["fieldConfig"]["overrides"]:
        matcher = item["matcher"]
        if matcher["id"] == "byRegexp" and re.search(matcher["options"], series):
            applied.update({prop["id"]: prop["value"] for prop in item["properties"]})
    return applied


def test_the_ideal_and_the_target_speedup_are_drawn_differently() -> None:
    speedup = panel("training-balance.json", "Scaling speed-up")
    legends = [t["legendFormat"] for t in speedup["targets"]]
    ideal = overrides_of(speedup, "ideal")
    target = overrides_of(speedup, next(x for x in legends if x.endswith("x ideal")))
    assert ideal
    assert target
    assert ideal["custom.lineStyle"] != target["custom.lineStyle"]
    assert ideal["color"] != target["color"]
    assert overrides_of(speedup, legends[0]) == {}  # the measured speed-up is a plain line


def test_training_balance_opens_with_the_firing_alerts() -> None:
    first = next(p for p in DASHBOARDS["training-balance.json"]["panels"] if p["type"] != "row")
    assert first["type"] == "table"
    assert first["gridPos"]["y"] <= 1
    layout = rows("training-balance.json")
    assert "Replica memory" not in layout["Scaling"]
    assert "Replica memory" in layout["The run's GPUs"]


def test_the_energy_panel_is_named_for_what_it_shows() -> None:
    energy = next(p for p in panels(DASHBOARDS["gpu-host.json"]) if "energy counter" in p["title"])
    assert energy["fieldConfig"]["defaults"]["unit"] == "kwatt"
    assert "power" in energy["title"].lower()
    assert "per hour" not in energy["title"]


def test_collector_success_shows_the_words_its_description_uses() -> None:
    success = panel("gpu-host.json", "Collector success")
    words = {
        result["text"]
        for mapping in success["fieldConfig"]["defaults"]["mappings"]
        for result in mapping["options"].values()
    }
    assert words == {"ok", "failed"}
    assert all(word in success["description"] for word in words)


def test_the_dashboards_readme_names_every_source_module() -> None:
    readme = (JSON_DIR.parent / "README.md").read_text(encoding="utf-8")
    sources = {path.name for path in JSON_DIR.parent.glob("*.py")} - {"__init__.py"}
    assert [name for name in sorted(sources) if f"`{name}`" not in readme] == []
