"""The committed dashboards are what the sources build, provisioned as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from dashboards import build
from dashboards.variables import DATASOURCE_UID
from mirrorwatch.alerts.thresholds import Thresholds, load_thresholds, parse_thresholds
from tests.dashboards.queries import (
    JSON_DIR,
    PROVISIONING,
    REPO,
    RUNBOOK,
    load_dashboards,
    panels,
)
from tests.hang import HANG_SECONDS

DASHBOARDS = load_dashboards()


def by_title(title: str) -> dict[str, Any]:
    (dashboard,) = (d for d in DASHBOARDS.values() if d["title"] == title)
    return dashboard


def panel(dashboard_title: str, title: str) -> dict[str, Any]:
    (found,) = (p for p in panels(by_title(dashboard_title)) if p["title"] == title)
    return found


def test_committed_json_matches_a_fresh_build() -> None:
    stale = build.stale_files()
    assert stale == [], f"out of date: {stale}; run `make dashboards` and commit the result"


def test_build_check_exits_nonzero_on_drift(tmp_path: Any) -> None:
    for name, text in build.generate().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / build.HOME).write_text("{}\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.build", "--check", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )
    assert result.returncode == 1
    assert build.HOME in result.stdout


def test_the_three_dashboards_are_built() -> None:
    assert sorted(d["title"] for d in DASHBOARDS.values()) == [
        "Fleet",
        "GPU host",
        "Training balance",
    ]
    assert DASHBOARDS[build.HOME]["title"] == "Training balance"


def test_datasource_is_provisioned_with_the_pinned_uid() -> None:
    (path,) = (PROVISIONING / "datasources").glob("*.yml")
    (source,) = yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"]
    assert source["type"] == "prometheus"
    assert source["uid"] == DATASOURCE_UID
    for dashboard in DASHBOARDS.values():
        (ds,) = (v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
        assert ds["current"]["value"] == DATASOURCE_UID


def test_dashboards_are_provisioned_into_the_mirrorwatch_folder() -> None:
    (path,) = (PROVISIONING / "dashboards").glob("*.yml")
    (provider,) = yaml.safe_load(path.read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == "mirrorwatch"
    assert provider["allowUiUpdates"] is False


def test_readme_names_the_home_dashboard_setting() -> None:
    readme = (REPO / "dashboards" / "README.md").read_text(encoding="utf-8")
    assert "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH" in readme
    assert build.HOME in readme


def runbook_panels() -> list[tuple[str, str]]:
    """(dashboard, panel) for every panel the runbook sends a reader to."""
    found: list[tuple[str, str]] = []
    text = RUNBOOK.read_text(encoding="utf-8")
    for match in re.finditer(r"^- \*\*(.+?)\*\* dashboard:(.*?)(?=^- |^\s*$)", text, re.M | re.S):
        for title in re.findall(r"(?<!\*)\*([^*]+)\*(?!\*)", match[2]):
            found.append((match[1], " ".join(title.split())))
    return found


def test_runbook_reads_the_dashboards() -> None:
    assert len(runbook_panels()) > 20


@pytest.mark.parametrize(("dashboard", "title"), runbook_panels())
def test_every_panel_the_runbook_names_exists(dashboard: str, title: str) -> None:
    assert title in {p["title"] for p in panels(by_title(dashboard))}


def threshold_values(p: dict[str, Any]) -> list[float]:
    return [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"] if s["value"]]


def limit(thresholds: Thresholds, alert: str, setting: str) -> float:
    value = getattr(thresholds.alert(alert), setting)
    assert isinstance(value, float)
    return value


@pytest.mark.parametrize(
    ("dashboard", "title", "alert", "setting"),
    [
        ("Training balance", "Utilisation spread", "GpuUtilizationImbalance", "spread_ratio"),
        ("Training balance", "Deviation from run mean", "GpuUtilizationImbalance", "spread_ratio"),
        (
            "Training balance",
            "Scaling efficiency",
            "TrainingScalingEfficiencyLow",
            "efficiency_ratio",
        ),
        ("Training balance", "Last push", "TrainingTelemetryStale", "stale_after_seconds"),
        ("GPU host", "Memory used", "GpuMemoryNearlyFull", "used_ratio"),
        ("GPU host", "Throttle time fraction", "GpuPowerCapped", "throttled_fraction"),
        ("GPU host", "NVLink errors", "GpuNvlinkErrors", "errors_per_10m"),
    ],
)
def test_thresholds_come_from_the_alert_settings(
    dashboard: str, title: str, alert: str, setting: str
) -> None:
    value = limit(load_thresholds(), alert, setting)
    assert value in threshold_values(panel(dashboard, title))


def settings_with(**changes: dict[str, object]) -> Thresholds:
    raw = yaml.safe_load(REPO.joinpath("alerts", "thresholds.yml").read_text(encoding="utf-8"))
    for alert, values in changes.items():
        raw[alert].update(values)
    return parse_thresholds(raw)


def fresh_panel(thresholds: Thresholds, file_name: str, title: str) -> dict[str, Any]:
    (found,) = (p for p in panels(build.DASHBOARDS[file_name](thresholds)) if p["title"] == title)
    return found


def test_a_changed_alert_setting_moves_the_panel() -> None:
    thresholds = settings_with(GpuUtilizationImbalance={"spread_ratio": 0.07})
    assert threshold_values(fresh_panel(thresholds, build.HOME, "Utilisation spread")) == [0.07]


def test_descriptions_name_the_alerts_for_window() -> None:
    thresholds = settings_with(GpuMemoryNearlyFull={"for": "30m"}, GpuLost={"for": "2m"})
    memory = fresh_panel(thresholds, "gpu-host.json", "Memory used")
    assert "for 30 minutes: GpuMemoryNearlyFull" in memory["description"]
    assert (
        "for 2 minutes: GpuLost"
        in fresh_panel(thresholds, "gpu-host.json", "GPU up")["description"]
    )


def test_the_xid_panel_names_the_critical_xids_of_the_settings() -> None:
    thresholds = settings_with(GpuXidError={"critical_xids": [79, 48]})
    description = fresh_panel(thresholds, "gpu-host.json", "XID errors")["description"]
    assert "48, 79 need attention now" in description


def test_json_files_are_only_the_built_ones() -> None:
    assert sorted(p.name for p in JSON_DIR.glob("*.json")) == sorted(build.DASHBOARDS)
