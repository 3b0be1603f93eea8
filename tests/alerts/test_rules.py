"""The generated Prometheus rules: valid, linted, unit-tested with promtool, every alert covered."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.tools import (
    CONTRACT_ALERTS,
    PROMTOOL_TESTS,
    RULES,
    RUNBOOK,
    THRESHOLDS,
    alert_rules,
    binary,
    load_yaml,
    run,
)

SEVERITIES = {"critical", "warning", "info"}
# Host-wide alerts name no GPU; run-level ones name the run's GPUs by query instead.
HOST_ALERTS = {"GpuMissing", "MirrorwatchExporterDown", "MirrorwatchNvmlUnavailable", "Watchdog"}


def test_rules_pass_promtool_check_with_lint_fatal() -> None:
    result = run([binary("promtool"), "check", "rules", "--lint=all", "--lint-fatal", str(RULES)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_are_promtool_test_files() -> None:
    assert PROMTOOL_TESTS, "alerts/tests/*.yml is empty"


@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    result = run([binary("promtool"), "test", "rules", str(test_file)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_tests_use_only_features_of_promtool_2_42() -> None:
    for path in PROMTOOL_TESTS:
        assert "fuzzy_compare" not in path.read_text(encoding="utf-8"), path.name


def test_every_contract_alert_is_defined() -> None:
    defined = {rule["alert"] for rule in alert_rules()}
    assert defined == set(CONTRACT_ALERTS)


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_every_alert_has_for_severity_and_annotations(rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"([0-9]+[smhd])+", rule["for"]), rule.get("for")
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "value", "runbook_url"}
    assert all(annotations.values())


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_every_description_names_host_gpu_and_run(rule: dict[str, Any]) -> None:
    name, description = rule["alert"], rule["annotations"]["description"]
    if name == "Watchdog":
        return
    # A run over several hosts names each of them ($host.Labels.instance).
    assert re.search(r"\$(labels|host\.Labels)\.instance", description), "no host"
    if name not in HOST_ALERTS:
        # GPU series carry no run label: GPU alerts look the run up ($s.Labels.run).
        assert re.search(r"\$(labels|s\.Labels)\.run", description), "no run in the description"
        assert "gpu" in description, "no GPU in the description"


def _promtool_cases() -> tuple[dict[str, int], dict[str, int]]:
    """How many firing and not-firing alert_rule_test cases each alert has."""
    firing: dict[str, int] = defaultdict(int)
    quiet: dict[str, int] = defaultdict(int)
    for path in PROMTOOL_TESTS:
        for group in load_yaml(path)["tests"]:
            for case in group.get("alert_rule_test", []):
                expected = case.get("exp_alerts") or []
                for alert in expected:
                    # Full expectations: every alert carries severity and all annotations.
                    assert "severity" in alert["exp_labels"], (path.name, case)
                    assert set(alert["exp_annotations"]) == {
                        "summary",
                        "description",
                        "value",
                        "runbook_url",
                    }, (path.name, case)
                (firing if expected else quiet)[case["alertname"]] += 1
    return firing, quiet


@pytest.mark.parametrize("alert", CONTRACT_ALERTS)
def test_every_alert_has_a_firing_and_a_quiet_promtool_case(alert: str) -> None:
    firing, quiet = _promtool_cases()
    assert firing[alert] >= 1, f"no promtool case where {alert} fires"
    if alert != "Watchdog":  # the dead-man's switch is never quiet, by design
        assert quiet[alert] >= 1, f"no promtool case where {alert} must not fire"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub generates for a Markdown file's headings."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_runbook_url_points_at_a_runbook_section(rule: dict[str, Any]) -> None:
    base = load_yaml(THRESHOLDS)["runbook_url"]
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(f"{base}#")
    assert url.rsplit("#", 1)[1] in github_anchors(RUNBOOK.read_text(encoding="utf-8"))


def test_runbook_covers_every_alert_with_causes_checks_and_fix() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    by_name = {section.split("\n", 1)[0].strip(): section for section in sections}
    for alert in CONTRACT_ALERTS:
        section = by_name.get(alert)
        assert section is not None, f"docs/runbook.md has no '## {alert}' section"
        for part in ("**Means**", "**Likely causes**", "**Check**", "**Fix**"):
            assert part in section, f"{alert}: no {part}"
