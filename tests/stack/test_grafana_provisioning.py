"""Grafana's provisioning files as Grafana itself reads them inside the compose stack.

No Grafana server runs here, so its rules are applied from its source (tests/stack/
grafana_expand.py cites them): every string of every provisioning file is expanded against the
grafana service's environment as docker-compose resolves it, and the results must name what
the stack really has: a compose service and the port it listens on, a mounted folder holding
the dashboards, a mounted home dashboard.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.stack import services as stack
from tests.stack.compose import host_path, resolved_config
from tests.stack.grafana_expand import interpolate, interpolate_tree

# Where the grafana image looks for provisioning files (GF_PATHS_PROVISIONING in the image).
PROVISIONING = "/etc/grafana/provisioning"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved_config(tmp_path_factory.mktemp("compose"))


def grafana(config: dict[str, Any]) -> dict[str, Any]:
    service: dict[str, Any] = config["services"]["grafana"]
    return service


def provisioned(config: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """Each provisioning file of ``kind`` the grafana container sees, expanded as Grafana does."""
    folder = host_path(grafana(config), f"{PROVISIONING}/{kind}")
    files = sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))
    assert files, f"no provisioning file in {folder}"
    environment = grafana(config)["environment"]
    return [
        interpolate_tree(yaml.safe_load(path.read_text(encoding="utf-8")), environment)
        for path in files
    ]


# --- the expansion rule itself, on the cases that matter here ------------------------------


def test_shell_default_syntax_expands_to_nothing_in_grafana() -> None:
    # The bug this suite exists for: Grafana reads "PROMETHEUS_URL:-http://..." as one name.
    assert interpolate("${PROMETHEUS_URL:-http://prometheus:9090}", {"PROMETHEUS_URL": "x"}) == ""


@pytest.mark.parametrize(
    ("value", "expanded"),
    [
        ("${URL}", "http://p:9090"),
        ("$URL/api", "http://p:9090/api"),
        ("$__env{URL}", "http://p:9090"),
        ("cost $$5", "cost $5"),
        ("${MISSING}", ""),
        ("${}", ""),
        ("a$", "a$"),
        ("$-x", "x"),  # "$-" is a shell special variable: unset, so empty
    ],
)
def test_grafana_expansion_follows_go_os_expandenv(value: str, expanded: str) -> None:
    assert interpolate(value, {"URL": "http://p:9090"}) == expanded


# --- the stack's files under that rule -------------------------------------------------------


@pytest.mark.parametrize("profile", stack.PROFILES)
def test_every_data_source_url_names_a_service_and_the_port_it_listens_on(
    config: dict[str, Any], profile: str
) -> None:
    running = stack.active(config, profile)
    sources = [s for file in provisioned(config, "datasources") for s in file["datasources"]]
    assert sources
    for source in sources:
        url = urlsplit(source["url"])
        assert url.scheme in ("http", "https"), f"url {source['url']!r}"
        assert url.hostname, f"url {source['url']!r}"
        service = stack.resolve(running, url.hostname)
        assert url.port == stack.listen_port(running[service]), source["url"]


def test_a_changed_prometheus_url_reaches_the_data_source(tmp_path: Path) -> None:
    changed = resolved_config(tmp_path, PROMETHEUS_URL="http://central.example:8428")
    (file,) = provisioned(changed, "datasources")
    assert file["datasources"][0]["url"] == "http://central.example:8428"


def test_every_dashboard_provider_path_is_a_mounted_folder_holding_the_dashboards(
    config: dict[str, Any],
) -> None:
    providers = [p for file in provisioned(config, "dashboards") for p in file["providers"]]
    assert providers
    for provider in providers:
        folder = host_path(grafana(config), provider["options"]["path"])
        dashboards = sorted(folder.glob("*.json"))
        assert dashboards, f"{provider['options']['path']} holds no dashboard"
        for path in dashboards:
            assert json.loads(path.read_text(encoding="utf-8"))["uid"], path


def test_home_dashboard_is_a_mounted_dashboard(config: dict[str, Any]) -> None:
    environment = grafana(config)["environment"]
    home = interpolate(environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"], environment)
    path = host_path(grafana(config), home)
    assert path.is_file(), home
    assert json.loads(path.read_text(encoding="utf-8"))["title"] == "Training balance"


def test_provisioning_folders_are_mounted_where_grafana_reads_them(config: dict[str, Any]) -> None:
    for kind in ("datasources", "dashboards"):
        assert host_path(grafana(config), f"{PROVISIONING}/{kind}").is_dir(), kind
