"""deploy/fleet/'s compose files as docker-compose resolves them, and Grafana reads them.

The central stack (VictoriaMetrics, vmalert, Alertmanager, Grafana) and the per-host one
(exporter, vmagent) are interpolated and validated by Debian's docker-compose with their
example env files; Grafana's provisioning is expanded by Grafana's own rule
(tests/stack/grafana_expand.py) against the central grafana service's environment. Every URL
a service is given must name a service of its stack and the port that service listens on.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.hang import HANG_SECONDS
from tests.stack import services as stack
from tests.stack.compose import bind_mounts, docker_compose, host_path
from tests.stack.grafana_expand import interpolate_tree

FLEET = Path(__file__).resolve().parents[2] / "deploy" / "fleet"
CENTRAL = FLEET / "central.compose.yml"
HOST = FLEET / "host.compose.yml"
SECRETS = {
    "GF_ADMIN_PASSWORD": "test-password",
    "MIRRORWATCH_INGEST_TOKEN": "test-token",
    "MIRRORWATCH_HOST": "gpu-01",
    "MIRRORWATCH_CLUSTER": "lab",
}
PROVISIONING = "/etc/grafana/provisioning"


def env_example(compose: Path) -> dict[str, str]:
    path = compose.with_name(compose.name.replace(".compose.yml", ".env.example"))
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def compose_config(compose: Path, tmp: Path, **overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**env_example(compose), **SECRETS, **overrides}
    env_file = tmp / f"{compose.stem}.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    return subprocess.run(
        [docker_compose(), "--env-file", str(env_file), "-f", str(compose), "config"],
        cwd=compose.parent,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)},
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )


def resolved(compose: Path, tmp: Path, **overrides: str) -> dict[str, Any]:
    result = compose_config(compose, tmp, **overrides)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved(CENTRAL, tmp_path_factory.mktemp("central"))


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved(HOST, tmp_path_factory.mktemp("host"), COMPOSE_PROFILES="demo")


def listen_port(service: dict[str, Any]) -> int:
    """The port a service listens on: VictoriaMetrics' -httpListenAddr, else as tests/stack
    reads the single-host services."""
    for word in stack.argv(service):
        if word.startswith("-httpListenAddr="):
            return int(word.rpartition(":")[2])
    return stack.listen_port(service)


def assert_reaches(services: dict[str, dict[str, Any]], url: str) -> None:
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https"), url
    assert parts.hostname, url
    name = stack.resolve(services, parts.hostname)
    assert parts.port == listen_port(services[name]), url


# --- both files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compose", [CENTRAL, HOST], ids=["central", "host"])
def test_every_mounted_file_exists_and_is_read_only(
    compose: Path, tmp_path: Path, central: dict[str, Any], host: dict[str, Any]
) -> None:
    config = central if compose == CENTRAL else host
    for service in config["services"].values():
        for source, target, read_only in bind_mounts(service):
            assert Path(source).exists(), f"{source} (mounted at {target})"
            assert read_only, f"{source} is mounted writable"


@pytest.mark.parametrize("compose", [CENTRAL, HOST], ids=["central", "host"])
def test_every_port_is_published_on_loopback_by_default(
    compose: Path, central: dict[str, Any], host: dict[str, Any]
) -> None:
    config = central if compose == CENTRAL else host
    for name, service in config["services"].items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else port.get("host_ip", "")
            assert str(published).startswith("127.0.0.1"), f"{name}: {port}"


@pytest.mark.parametrize(
    ("compose", "variable"),
    [
        (CENTRAL, "GF_ADMIN_PASSWORD"),
        (HOST, "MIRRORWATCH_HOST"),
        (HOST, "MIRRORWATCH_CLUSTER"),
        (HOST, "MIRRORWATCH_INGEST_TOKEN"),
    ],
)
def test_refuses_to_start_without_a_required_setting(
    compose: Path, variable: str, tmp_path: Path
) -> None:
    result = compose_config(compose, tmp_path, **{variable: ""})
    assert result.returncode != 0
    assert variable in result.stderr


def test_the_victoria_metrics_images_are_the_release_the_tests_run(
    central: dict[str, Any], host: dict[str, Any]
) -> None:
    # tests/fleet runs Debian's victoria-metrics package; the images must be that release.
    query = ["dpkg-query", "-W", "-f=${Version}", "victoria-metrics"]
    version = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    upstream = re.match(r"(?:\d+:)?([\d.]+)", version)
    assert upstream, version
    images = [
        s["image"]
        for config in (central, host)
        for s in config["services"].values()
        if s["image"].startswith("victoriametrics/")
    ]
    assert len(images) == 3
    assert all(image.endswith(f":v{upstream[1]}") for image in images), images


# --- the central stack -----------------------------------------------------------------------


def test_grafana_data_source_is_victoria_metrics_on_its_port(central: dict[str, Any]) -> None:
    grafana = central["services"]["grafana"]
    folder = host_path(grafana, f"{PROVISIONING}/datasources")
    sources = [
        source
        for path in sorted(folder.glob("*.yml"))
        for source in interpolate_tree(
            yaml.safe_load(path.read_text(encoding="utf-8")), grafana["environment"]
        )["datasources"]
    ]
    assert sources
    for source in sources:
        assert urlsplit(source["url"]).hostname == "victoria-metrics"
        assert_reaches(central["services"], source["url"])


def test_the_home_dashboard_is_the_fleet_dashboard(central: dict[str, Any]) -> None:
    grafana = central["services"]["grafana"]
    home = host_path(grafana, grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert yaml.safe_load(home.read_text(encoding="utf-8"))["title"] == "Fleet"


def test_vmalert_reads_writes_and_notifies_services_of_the_stack(central: dict[str, Any]) -> None:
    services = central["services"]
    flags = dict(
        word.partition("=")[::2] for word in stack.argv(services["vmalert"]) if "=" in word
    )
    for flag in ("-datasource.url", "-remoteWrite.url", "-remoteRead.url", "-notifier.url"):
        assert_reaches(services, flags[flag])
    assert urlsplit(flags["-datasource.url"]).hostname == "victoria-metrics"
    assert urlsplit(flags["-notifier.url"]).hostname == "alertmanager"


def test_vmalert_evaluates_the_generated_rule_file(central: dict[str, Any]) -> None:
    vmalert = central["services"]["vmalert"]
    (rule,) = [w.partition("=")[2] for w in stack.argv(vmalert) if w.startswith("-rule=")]
    source = host_path(vmalert, rule)
    assert source.resolve() == (FLEET.parents[1] / "alerts" / "mirrorwatch.rules.yml")


# --- the per-host stack ------------------------------------------------------------------------


@pytest.mark.parametrize("profile", stack.PROFILES)
def test_vmagent_scrapes_the_exporter_where_it_listens(host: dict[str, Any], profile: str) -> None:
    services = stack.active(host, profile)
    vmagent = services["vmagent"]
    (config_path,) = [
        w.partition("=")[2] for w in stack.argv(vmagent) if w.startswith("-promscrape.config=")
    ]
    scrape = yaml.safe_load(host_path(vmagent, config_path).read_text(encoding="utf-8"))
    (job,) = scrape["scrape_configs"]
    (target,) = job["static_configs"][0]["targets"]
    assert_reaches(services, f"http://{target}")
    # The %{...} placeholders of the scrape config are in vmagent's environment.
    placeholders = set(re.findall(r"%\{(\w+)\}", yaml.safe_dump(scrape)))
    assert placeholders == {"MIRRORWATCH_HOST", "MIRRORWATCH_CLUSTER"}
    assert placeholders <= set(vmagent["environment"])
