"""The query catalog (mirrorwatch.alerts.promql and the modules built of it): one PromQL, its
selectors chosen by the reader."""

from __future__ import annotations

import re

from mirrorwatch.alerts import gpu_queries, promql, recorded, throttling
from mirrorwatch.alerts.promql import RULES, Select
from mirrorwatch.contract.causes import POWER_CAP_REASONS, THERMAL_REASONS
from tests.alerts.tools import RULES as RULE_FILE
from tests.alerts.tools import alert_rules, load_yaml


def test_a_select_adds_its_matchers_to_every_selector() -> None:
    host = Select(('instance="h1:9848"',))
    assert host("mirrorwatch_up") == 'mirrorwatch_up{instance="h1:9848"}'
    assert host.where('gpu="0"')("m", 'clock="sm"') == 'm{instance="h1:9848", gpu="0", clock="sm"}'
    assert RULES("mirrorwatch_up") == "mirrorwatch_up"


def test_the_same_query_serves_rules_and_dashboards() -> None:
    grafana = Select(('job=~"$job"',))
    assert gpu_queries.memory_used_ratio(RULES) == (
        "mirrorwatch_gpu_memory_used_bytes / mirrorwatch_gpu_memory_total_bytes"
    )
    assert gpu_queries.memory_used_ratio(grafana) == (
        'mirrorwatch_gpu_memory_used_bytes{job=~"$job"} / '
        'mirrorwatch_gpu_memory_total_bytes{job=~"$job"}'
    )


def test_one_reason_is_an_equality_several_a_regex() -> None:
    assert throttling.reasons(POWER_CAP_REASONS) == 'reason="sw_power_cap"'
    assert (
        throttling.reasons(THERMAL_REASONS) == 'reason=~"sw_thermal_slowdown|hw_thermal_slowdown"'
    )


def test_spread_parenthesises_only_what_needs_it() -> None:
    assert promql.spread("x", "run") == "max by (run) (x) - min by (run) (x)"
    assert promql.spread("(a and b)", "run") == "max by (run) (a and b) - min by (run) (a and b)"
    assert promql.spread("(a) and (b)", "run") == (
        "max by (run) ((a) and (b)) - min by (run) ((a) and (b))"
    )


def test_the_lagging_gpu_fragment_is_written_once_and_used_by_three_alerts() -> None:
    uses = [r["alert"] for r in alert_rules() if "group_right ()" in r["expr"]]
    assert sorted(uses) == sorted(
        ["GpuUtilizationImbalance", "GpuUtilizationImbalance", "GpuTemperatureSpread"]
    )
    fragment = promql.labels_of_extreme("s", "run", "min")
    assert fragment.splitlines()[0] == "+ on (run) group_right ()"
    assert "min by (run) (s)" in fragment


def test_the_recorded_names_module_holds_recorded_names_only_each_recorded() -> None:
    names = {k: v for k, v in vars(recorded).items() if not k.startswith("_") and k.isupper()}
    assert names, "mirrorwatch.alerts.recorded names the recording rules' series"
    assert all(isinstance(v, str) and re.fullmatch(r"\w+:\w+:\w+", v) for v in names.values())
    groups = load_yaml(RULE_FILE)["groups"]
    records = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    assert set(names.values()) <= records, set(names.values()) - records
