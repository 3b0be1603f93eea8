"""alerts/build_rules.py: the committed rules match a fresh generation; one edit tunes one alert."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tests.alerts.tools import GENERATOR, RULES, THRESHOLDS, load_yaml, run


def generate(tmp_path: Path, config: object) -> tuple[int, str, Path]:
    config_path = tmp_path / "thresholds.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    output = tmp_path / "rules.yml"
    result = run(
        [sys.executable, str(GENERATOR), "--config", str(config_path), "--output", str(output)]
    )
    return result.returncode, result.stderr, output


def test_committed_rules_match_a_fresh_generation() -> None:
    result = run([sys.executable, str(GENERATOR), "--check"])
    assert result.returncode == 0, (
        f"{RULES.name} is out of date with {THRESHOLDS.name}: run `make alerts`\n{result.stderr}"
    )


def test_check_mode_reports_a_hand_edited_rule_file(tmp_path: Path) -> None:
    edited = tmp_path / "rules.yml"
    edited.write_text(RULES.read_text(encoding="utf-8").replace("> 0.05", "> 0.5"))
    result = run([sys.executable, str(GENERATOR), "--check", "--output", str(edited)])
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
        assert "(more than 8%)" in rule["annotations"]["description"]


def test_runbook_base_url_and_exporter_job_are_configurable(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["runbook_url"] = "https://wiki.example.org/gpu/runbook"
    config["exporter_job_regex"] = "gpu-exporter"
    code, stderr, output = generate(tmp_path, config)
    assert code == 0, stderr
    text = output.read_text(encoding="utf-8")
    assert "https://wiki.example.org/gpu/runbook#gpulost" in text
    assert 'up{job=~"gpu-exporter"} == 0' in text


def test_an_unknown_setting_is_rejected_by_name(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["GpuLost"]["treshold"] = 1
    code, stderr, _ = generate(tmp_path, config)
    assert code == 2
    assert "GpuLost: unknown setting(s) treshold" in stderr


def test_a_ratio_above_one_is_rejected(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["GpuMemoryNearlyFull"]["used_ratio"] = 95
    code, stderr, _ = generate(tmp_path, config)
    assert code == 2
    assert "GpuMemoryNearlyFull.used_ratio: expected a number between 0 and 1" in stderr


def test_a_missing_alert_section_is_rejected(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    del config["Watchdog"]
    code, stderr, _ = generate(tmp_path, config)
    assert code == 2
    assert "missing setting(s) Watchdog" in stderr


def test_a_bad_duration_is_rejected(tmp_path: Path) -> None:
    config = load_yaml(THRESHOLDS)
    config["GpuLost"]["for"] = "5 minutes"
    code, stderr, _ = generate(tmp_path, config)
    assert code == 2
    assert "GpuLost.for: expected a Prometheus duration" in stderr
