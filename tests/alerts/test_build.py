"""mirrorwatch.alerts.build: the committed rules match a fresh generation; one edit tunes one
alert; every alert gets its `for`, severity and runbook link in the one pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mirrorwatch.alerts import build
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.thresholds import load_thresholds
from tests.alerts.tools import GENERATE, RULES, THRESHOLDS, alert_rules, load_yaml, run


def generate(tmp_path: Path, config: object) -> tuple[int, str, Path]:
    config_path = tmp_path / "thresholds.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    output = tmp_path / "rules.yml"
    result = run([*GENERATE, "--config", str(config_path), "--output", str(output)])
    return result.returncode, result.stderr, output


def test_committed_rules_match_a_fresh_generation() -> None:
    result = run([*GENERATE, "--check"])
    assert result.returncode == 0, (
        f"{RULES.name} is out of date with {THRESHOLDS.name}: run `make alerts`\n{result.stderr}"
    )


def test_check_mode_reports_a_hand_edited_rule_file(tmp_path: Path) -> None:
    edited = tmp_path / "rules.yml"
    edited.write_text(RULES.read_text(encoding="utf-8").replace("> 0.05", "> 0.5"))
    result = run([*GENERATE, "--check", "--output", str(edited)])
    assert result.returncode == 1
    assert "out of date" in result.stderr


def test_changing_the_imbalance_threshold_is_one_edit(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["GpuUtilizationImbalance"]["spread_ratio"] = 0.08
    code, stderr, output = generate(tmp_path, config)
    assert code == 0, stderr
    rules = [
        rule
        for group in load_yaml(output)["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "GpuUtilizationImbalance"
    ]
    assert len(rules) == 2
    for rule in rules:
        assert "spread1m > 0.08" in rule["expr"]
        assert "(more than 8 pp)" in rule["annotations"]["description"]


def test_runbook_base_url_and_exporter_job_are_configurable(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["runbook_url"] = "https://wiki.example.org/gpu/runbook"
    config["exporter_job_regex"] = "gpu-exporter"
    code, stderr, output = generate(tmp_path, config)
    assert code == 0, stderr
    text = output.read_text(encoding="utf-8")
    assert "https://wiki.example.org/gpu/runbook#gpulost" in text
    assert 'up{job=~"gpu-exporter"} == 0' in text


def test_an_invalid_thresholds_file_exits_2_naming_the_setting(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["GpuLost"]["treshold"] = 1
    code, stderr, _ = generate(tmp_path, config)
    assert code == 2
    assert "GpuLost.treshold: unknown setting" in stderr


def test_every_for_is_the_alerts_own_setting() -> None:
    thresholds = load_thresholds()
    for rule in alert_rules():
        assert rule["for"] == thresholds.alert(rule["alert"]).hold, rule["alert"]


def test_the_run_ttl_is_read_from_the_exporter_not_copied() -> None:
    (stale,) = (r for r in alert_rules() if r["alert"] == "TrainingTelemetryStale")
    assert "mirrorwatch_exporter_run_ttl_seconds" in stale["expr"]
    assert set(load_yaml(THRESHOLDS)["TrainingTelemetryStale"]) == {"stale_after_seconds", "for"}


def test_every_recording_rule_an_expression_names_is_recorded() -> None:
    groups = load_yaml(RULES)["groups"]
    recorded = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    for group in groups:
        for rule in group["rules"]:
            used = set(re.findall(r"\b[a-z_]+:mirrorwatch_\w+:\w+\b", rule["expr"]))
            assert used <= recorded, (rule.get("alert") or rule["record"], used - recorded)


def test_go_templates_reach_the_rules_with_single_braces() -> None:
    text = RULES.read_text(encoding="utf-8")
    assert "{{{{" not in text
    assert "«" not in text
    assert "»" not in text


def test_an_alert_named_outside_the_contract_is_refused() -> None:
    alert = Alert("GpuOnFire", "critical", "vector(1)", "s", "d", "v")
    with pytest.raises(KeyError, match="GpuOnFire"):
        build.alerting_rule(alert, load_thresholds())
