"""Paths and tool lookups shared by the alert tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"
RULES = ALERTS / "mirrorwatch.rules.yml"
THRESHOLDS = ALERTS / "thresholds.yml"
# The rule generator, as `make alerts` runs it.
GENERATE = [sys.executable, "-m", "mirrorwatch.alerts.build"]
# The inhibit rules' generator, as `make alerts` runs it.
GENERATE_INHIBITIONS = [sys.executable, "-m", "mirrorwatch.alerts.alertmanager"]
PROMTOOL_TESTS = sorted((ALERTS / "tests").glob("*.yml"))
ALERTMANAGER_CONFIG = ALERTS / "alertmanager.yml"
ALERTMANAGER_EXAMPLE = ALERTS / "alertmanager.slack-email.example.yml"
TEMPLATE = ALERTS / "mirrorwatch.tmpl"
RUNBOOK = REPO / "docs" / "runbook.md"

# The alert names of the project contract (CONTRACT.md, "Alert names"), and those added
# beyond it (GpuSharedWithForeignProcess), in thresholds.yml's order.
CONTRACT_ALERTS = (
    "GpuUtilizationImbalance",
    "GpuThermalThrottling",
    "GpuTemperatureNearSlowdown",
    "GpuHardwareSlowdown",
    "GpuPowerCapped",
    "GpuPcieLinkDegraded",
    "GpuNvlinkDown",
    "GpuNvlinkErrors",
    "GpuXidError",
    "GpuEccUncorrectable",
    "GpuMemoryNearlyFull",
    "GpuTemperatureSpread",
    "GpuSharedWithForeignProcess",
    "GpuMissing",
    "GpuLost",
    "TrainingStalled",
    "TrainingThroughputDrop",
    "TrainingScalingEfficiencyLow",
    "TrainingTelemetryStale",
    "TrainingHeldBack",
    "TrainingHungInCollective",
    "MirrorwatchExporterDown",
    "MirrorwatchNvmlUnavailable",
    "Watchdog",
)


def binary(name: str) -> str:
    """The path of a Prometheus tool; a missing one fails the test (CI must have it)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make tools` (Debian packages prometheus and "
            "prometheus-alertmanager)",
            pytrace=False,
        )
    return path


# A guard against a hung tool, not a speed bar: promtool runs a file's cases in well under 10 s
# on an idle machine, and took over 60 s on this 2-core one at a load of 40.
TOOL_TIMEOUT_SECONDS = 600


def run(
    args: list[str], cwd: Path = REPO, timeout: float = TOOL_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def promtool_expr_test(
    path: Path,
    interval: str,
    input_series: list[dict[str, str]],
    cases: list[dict[str, Any]],
    rule_files: Sequence[Path] = (),
) -> str:
    """`promtool test rules` of ``cases`` (promql_expr_test entries) on ``input_series``,
    sampled and evaluated every ``interval`` with ``rule_files`` loaded, written to ``path``:
    promtool's output where a case fails, empty where all pass."""
    test = {
        "rule_files": [str(f) for f in rule_files],
        "evaluation_interval": interval,
        "tests": [{"interval": interval, "input_series": input_series, "promql_expr_test": cases}],
    }
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = run([binary("promtool"), "test", "rules", str(path)])
    return result.stdout + result.stderr if result.returncode else ""


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule of the generated rule file."""
    groups = load_yaml(RULES)["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def firing_alert(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    """One firing alert as Alertmanager hands it to a notification template."""
    return {
        "status": "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": "2024-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": "0",
    }


def render_template(tmp_path: Path, alert: dict[str, Any], name: str) -> str:
    """``name`` of alerts/mirrorwatch.tmpl for one firing alert, as amtool renders it."""
    data = {
        "receiver": "default",
        "status": "firing",
        "alerts": [alert],
        "groupLabels": {"alertname": alert["labels"]["alertname"]},
        "commonLabels": alert["labels"],
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
    }
    data_file = tmp_path / "data.json"
    data_file.write_text(json.dumps(data), encoding="utf-8")
    result = run(
        [
            binary("amtool"),
            "template",
            "render",
            f"--template.glob={TEMPLATE}",
            f"--template.data={data_file}",
            f'--template.text={{{{ template "{name}" . }}}}',
        ]
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
