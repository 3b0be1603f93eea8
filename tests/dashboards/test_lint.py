"""The dashboards follow grafana/dashboard-linter's rules (its binary is not installable here)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from tests.dashboards.queries import (
    JSON_DIR,
    Target,
    all_targets,
    load_dashboards,
    panels,
    query_variables,
    selectors,
)

DASHBOARDS = load_dashboards()
TARGETS = all_targets()
TEMPLATED = {"$datasource", "${datasource}"}

# Enumerated by the linter's panel-units-rule from Grafana's valueFormats/categories.ts.
VALID_UNITS = {
    "none", "string", "short", "percent", "percentunit", "humidity", "dB", "hex0x", "hex",
    "sci", "locale", "pixel", "bytes", "decbytes", "bits", "decbits", "kbytes", "deckbytes",
    "mbytes", "decmbytes", "gbytes", "decgbytes", "tbytes", "dectbytes", "pps", "binBps", "Bps",
    "binbps", "bps", "KiBs", "KBs", "MiBs", "MBs", "GiBs", "GBs", "dateTimeAsIso",
    "dateTimeFromNow", "watt", "kwatt", "mwatt", "watth", "kwatth", "joule", "celsius",
    "fahrenheit", "kelvin", "hertz", "ns", "µs", "ms", "s", "m", "h", "d", "dtdurationms",
    "dtdurations", "dthms", "cps", "ops", "reqps", "rps", "wps", "iops", "bool", "bool_yes_no",
    "bool_on_off",
}  # fmt: skip


each_dashboard = pytest.mark.parametrize("name", sorted(DASHBOARDS))


def variable(dashboard: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    assert len(found) == 1, f"{dashboard['title']}: expected one ${name} variable"
    return found[0]


@each_dashboard
def test_has_a_prometheus_datasource_variable(name: str) -> None:
    ds = variable(DASHBOARDS[name], "datasource")
    assert (ds["type"], ds["query"], ds["label"]) == ("datasource", "prometheus", "Data source")


@each_dashboard
@pytest.mark.parametrize(("var", "label"), [("job", "Job"), ("instance", "Instance")])
def test_job_and_instance_variables_follow_the_linter(name: str, var: str, label: str) -> None:
    v = variable(DASHBOARDS[name], var)
    assert v["type"] == "query"
    assert v["datasource"]["uid"] in TEMPLATED
    assert v["label"] == label
    assert v["multi"] is True
    assert v["includeAll"] is True
    assert v["allValue"] == ".+"


@each_dashboard
def test_host_variable_selects_one_host_behind_agents_and_all_on_one_prometheus(
    name: str,
) -> None:
    """Its "All" matches series without a `host` label too (a single Prometheus); the
    instance list follows the chosen host."""
    host = variable(DASHBOARDS[name], "host")
    assert host["allValue"] == ".*"
    assert re.fullmatch(host["allValue"], "")
    assert 'host=~"$host"' in variable(DASHBOARDS[name], "instance")["query"]


@each_dashboard
def test_has_run_and_gpu_variables(name: str) -> None:
    for var in ("run", "gpu"):
        assert variable(DASHBOARDS[name], var)["type"] == "query"


@each_dashboard
def test_query_variables_refresh_on_time_range_change(name: str) -> None:
    for v in query_variables(DASHBOARDS[name]):
        assert v["refresh"] == 2, f"${v['name']} refresh is {v['refresh']}"
        assert v["datasource"]["uid"] in TEMPLATED
        assert v["query"].startswith("label_values("), v["query"]


@each_dashboard
def test_no_import_inputs_or_fixed_datasources(name: str) -> None:
    text = (JSON_DIR / name).read_text(encoding="utf-8")
    data = json.loads(text)
    assert "__inputs" not in data
    assert "__requires" not in data
    assert "${DS_" not in text
    for panel in panels(data):
        assert panel["datasource"]["uid"] in TEMPLATED, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in TEMPLATED, panel["title"]
    for annotation in data["annotations"]["list"]:
        assert annotation["datasource"]["uid"] in TEMPLATED


@each_dashboard
def test_every_panel_has_title_description_and_queries(name: str) -> None:
    for panel in panels(DASHBOARDS[name]):
        assert panel.get("title"), panel
        assert len(panel.get("description", "")) >= 40, f"{panel['title']}: no description"
        assert panel.get("targets"), f"{panel['title']}: no queries"


@each_dashboard
def test_every_panel_has_a_valid_unit(name: str) -> None:
    for panel in panels(DASHBOARDS[name]):
        field_config = panel["fieldConfig"]
        assert field_config["defaults"].get("unit") in VALID_UNITS, panel["title"]
        for override in field_config["overrides"]:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    assert prop["value"] in VALID_UNITS, panel["title"]


def test_uids_and_titles_are_unique_and_pinned() -> None:
    uids = [d["uid"] for d in DASHBOARDS.values()]
    titles = [d["title"] for d in DASHBOARDS.values()]
    assert all(uid.startswith("mirrorwatch-") for uid in uids)
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)


@each_dashboard
def test_panel_titles_and_ids_are_unique_within_a_dashboard(name: str) -> None:
    everything = DASHBOARDS[name]["panels"]
    titles = Counter(p["title"] for p in everything)
    assert [t for t, n in titles.items() if n > 1] == []
    ids = [p["id"] for p in everything]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_every_selector_carries_job_and_instance_matchers(target: Target) -> None:
    expr = target.expr
    for selector in selectors(expr):
        assert selector.metric, f"selector without a metric name in {expr}"
        matchers = {(label, op, value) for label, op, value in selector.matchers}
        assert ("job", "=~", '"$job"') in matchers, f"{selector.metric} lacks job in {expr}"
        assert ("instance", "=~", '"$instance"') in matchers, (
            f"{selector.metric} lacks instance in {expr}"
        )
        # Behind agents hosts may share an instance: only `host` tells them apart.
        assert ("host", "=~", '"$host"') in matchers, f"{selector.metric} lacks host in {expr}"


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_every_range_is_the_rate_interval(target: Target) -> None:
    expr: str = target.expr
    for function in ("rate(", "increase(", "irate("):
        for part in expr.split(function)[1:]:
            assert "[$__rate_interval]" in part, f"{function} without $__rate_interval: {expr}"
    ranges = [chunk.split("]")[0] for chunk in expr.split("[")[1:]]
    assert all(r == "$__rate_interval" for r in ranges), f"fixed range in {expr}"


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_counters_are_read_through_rate_or_increase(target: Target) -> None:
    """The linter's target-counter-agg-rule, with no exception: even the XID panel, whose
    counters are born at their first event, reads them through increase()."""
    expr: str = target.expr
    for selector in selectors(expr):
        if selector.metric.endswith(("_total", "_bucket")):
            assert selector.in_counter_function, f"raw counter {selector.metric} in {expr}"
