"""The committed dashboards are what the sources build, provisioned as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from dashboards import build, common
from tests.dashboards.queries import (
    JSON_DIR,
    PROVISIONING,
    REPO,
    RUNBOOK,
    load_dashboards,
    panels,
)

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
        timeout=60,
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
    assert source["uid"] == common.DATASOURCE_UID
    for dashboard in DASHBOARDS.values():
        (ds,) = (v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
        assert ds["current"]["value"] == common.DATASOURCE_UID


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


@pytest.mark.parametrize(
    ("dashboard", "title", "limit"),
    [
        ("Training balance", "Utilisation spread", "imbalance_spread_ratio"),
        ("Training balance", "Deviation from run mean", "imbalance_spread_ratio"),
        ("Training balance", "Scaling efficiency", "scaling_efficiency_ratio"),
        ("Training balance", "Last push", "telemetry_stale_seconds"),
        ("GPU host", "Memory used", "memory_used_ratio"),
        ("GPU host", "Throttle time fraction", "power_capped_fraction"),
        ("GPU host", "NVLink errors", "nvlink_errors_per_10m"),
    ],
)
def test_thresholds_come_from_the_alert_settings(dashboard: str, title: str, limit: str) -> None:
    value = getattr(common.load_limits(), limit)
    assert value in threshold_values(panel(dashboard, title))


def test_a_changed_alert_setting_moves_the_panel(tmp_path: Any) -> None:
    settings = yaml.safe_load(common.THRESHOLDS_FILE.read_text(encoding="utf-8"))
    settings["GpuUtilizationImbalance"]["spread_ratio"] = 0.07
    path = tmp_path / "thresholds.yml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    fresh = build.DASHBOARDS[build.HOME](common.load_limits(path))
    (spread,) = (p for p in panels(fresh) if p["title"] == "Utilisation spread")
    assert threshold_values(spread) == [0.07]


def test_json_files_are_only_the_built_ones() -> None:
    assert sorted(p.name for p in JSON_DIR.glob("*.json")) == sorted(build.DASHBOARDS)
