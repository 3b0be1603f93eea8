"""prometheus/prometheus.yml and prometheus/alertmanager.yml: valid, and wired to the stack."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from demo.stack import (
    ALERTMANAGER_CONFIG,
    DEMO_RECEIVER_URL,
    PROMETHEUS_CONFIG,
    REPO,
    RULES,
    alertmanager_config,
    load_yaml,
    prometheus_config,
    thresholds,
    write_yaml,
)
from mirrorwatch.contract.vocabulary import Address
from tests.hang import HANG_SECONDS
from tests.stack.compose import host_path, resolved_config, tool

COMPOSE_ALERTMANAGER = REPO / "prometheus" / "alertmanager.yml"
DATASOURCES = REPO / "dashboards" / "provisioning" / "datasources"


def promtool() -> str:
    return tool("promtool", "run `make tools` (Debian package prometheus)")


def amtool() -> str:
    return tool("amtool", "run `make tools` (Debian package prometheus-alertmanager)")


def check(args: list[str]) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=HANG_SECONDS, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved_config(tmp_path_factory.mktemp("compose"))


def test_compose_prometheus_config_passes_promtool_with_its_mounted_rules(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    prometheus = compose["services"]["prometheus"]
    config = load_yaml(host_path(prometheus, "/etc/prometheus/prometheus.yml"))
    config["rule_files"] = [str(host_path(prometheus, path)) for path in config["rule_files"]]
    assert config["rule_files"] == [str(RULES)]
    check([promtool(), "check", "config", str(write_yaml(tmp_path / "prometheus.yml", config))])


def test_demo_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = prometheus_config(
        exporter=Address("127.0.0.1", 9848),
        alertmanager=Address("127.0.0.1", 9093),
        prometheus=Address("127.0.0.1", 9090),
        scrape_interval="1s",
        evaluation_interval="1s",
    )
    check([promtool(), "check", "config", str(write_yaml(tmp_path / "prometheus.yml", config))])


def test_exporter_scrape_job_is_the_one_the_rules_select() -> None:
    jobs = [job["job_name"] for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]]
    regex = thresholds()["exporter_job_regex"]
    assert [job for job in jobs if re.fullmatch(regex, job)] == ["mirrorwatch"]


def test_scrape_targets_are_services_of_the_stack(compose: dict[str, Any]) -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]
    }
    assert targets["mirrorwatch"] == ["exporter:9848"]
    assert targets["alertmanager"] == ["alertmanager:9093"]
    alerting = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alerting == ["alertmanager:9093"]
    assert "--web.listen-address=0.0.0.0:9093" in compose["services"]["alertmanager"]["command"]
    exporter_env = compose["services"]["exporter"]["environment"]
    assert exporter_env["MIRRORWATCH_LISTEN"] == "0.0.0.0:9848"


def test_scrape_interval_matches_grafanas_time_interval() -> None:
    interval = load_yaml(PROMETHEUS_CONFIG)["global"]["scrape_interval"]
    for path in DATASOURCES.glob("*.yml"):
        for source in load_yaml(path)["datasources"]:
            assert source["jsonData"]["timeInterval"] == interval, path


def test_compose_alertmanager_config_routes_as_the_project_config() -> None:
    ours = load_yaml(COMPOSE_ALERTMANAGER)
    project = load_yaml(ALERTMANAGER_CONFIG)
    assert ours["route"] == project["route"]
    assert ours["global"] == project["global"]
    assert ours["templates"] == project["templates"]
    # The receivers differ only in where the webhooks go.
    for config in (ours, project):
        for receiver in config["receivers"]:
            for webhook in receiver["webhook_configs"]:
                webhook["url"] = re.sub(r"^http://[^/]+", "", webhook["url"])
    assert ours["receivers"] == project["receivers"]


def test_compose_alertmanager_sends_to_the_alert_log_service(compose: dict[str, Any]) -> None:
    alert_log = compose["services"]["alert-log"]
    assert alert_log["command"] == ["--listen", "0.0.0.0:9095"]
    urls = {
        webhook["url"]
        for receiver in load_yaml(COMPOSE_ALERTMANAGER)["receivers"]
        for webhook in receiver["webhook_configs"]
    }
    assert urls == {"http://alert-log:9095/", "http://alert-log:9095/watchdog"}


def test_compose_alertmanager_config_passes_amtool(compose: dict[str, Any], tmp_path: Path) -> None:
    alertmanager = compose["services"]["alertmanager"]
    source = host_path(alertmanager, "/etc/alertmanager/alertmanager.yml")
    config = load_yaml(source)
    # Templates are relative to the config; in the container the template is mounted beside it.
    config["templates"] = [
        str(host_path(alertmanager, f"/etc/alertmanager/{name}")) for name in config["templates"]
    ]
    assert all(Path(t).is_file() for t in config["templates"])
    check([amtool(), "check-config", str(write_yaml(tmp_path / "alertmanager.yml", config))])


def test_demo_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    config = alertmanager_config(receiver_url="http://127.0.0.1:19095")
    text = str(config)
    assert DEMO_RECEIVER_URL not in text
    assert "http://127.0.0.1:19095/watchdog" in text
    check([amtool(), "check-config", str(write_yaml(tmp_path / "alertmanager.yml", config))])
