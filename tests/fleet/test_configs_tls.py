"""The fleet's agents over TLS: checked by vmagent and promtool, and vmagent scraping for real."""

from __future__ import annotations

import copy
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.exporter.certificates import Authority
from tests.exporter.exporter_process import running_exporter
from tests.fleet.fleet import PROMETHEUS_AGENT_CONFIG, VMAGENT_CONFIG, binary
from tests.hang import HANG_SECONDS
from tests.ports import free_port
from tests.stack.compose import docker_compose
from tests.stack.test_fleet_compose import HOST, SECRETS, env_example

HOST_TLS = HOST.with_name("host.tls.compose.yml")
VMAGENT_TLS = VMAGENT_CONFIG.with_name("scrape.tls.yml")
PROMETHEUS_AGENT_TLS = PROMETHEUS_AGENT_CONFIG.with_name("prometheus.tls.yml")
WEB_CONFIG = HOST.parents[1] / "compose-tls" / "web-config.yml"
EXAMPLE_PASSWORD = "change-me"  # the one the example hash is of
HOST_ENV = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_HOST": "gpu-01", "MIRRORWATCH_CLUSTER": "lab"}
DEADLINE_SECONDS = 60


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What /run/secrets holds on a host, made here."""
    folder = tmp_path_factory.mktemp("secrets")
    Authority.create(folder, "ca").issue("exporter", hosts=("exporter", "localhost", "127.0.0.1"))
    (folder / "scrape-password").write_text(EXAMPLE_PASSWORD + "\n", encoding="utf-8")
    return folder


def _mapped(path: Path, secrets: Path, tmp: Path) -> Path:
    """``path`` with /run/secrets where the test made the files."""
    mapped = tmp / path.name
    mapped.write_text(
        path.read_text(encoding="utf-8").replace("/run/secrets", str(secrets)), encoding="utf-8"
    )
    return mapped


@pytest.mark.parametrize(
    ("tls", "plain"),
    [(VMAGENT_TLS, VMAGENT_CONFIG), (PROMETHEUS_AGENT_TLS, PROMETHEUS_AGENT_CONFIG)],
    ids=["vmagent", "prometheus-agent"],
)
def test_each_tls_config_is_the_plain_one_but_for_the_exporter_jobs_tls(
    tls: Path, plain: Path
) -> None:
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(tls.read_text(encoding="utf-8")))
    (job,) = (job for job in config["scrape_configs"] if job["job_name"] == "mirrorwatch")
    assert job.pop("scheme") == "https"
    assert job.pop("tls_config") == {"ca_file": "/run/secrets/ca.crt"}
    assert job.pop("basic_auth")["password_file"] == "/run/secrets/scrape-password"
    assert config == yaml.safe_load(plain.read_text(encoding="utf-8"))


def test_vmagent_accepts_the_tls_scrape_config_strictly(secrets: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            binary("vmagent"),
            f"-promscrape.config={_mapped(VMAGENT_TLS, secrets, tmp_path)}",
            "-promscrape.config.dryRun",
            "-promscrape.config.strictParse",
            "-loggerLevel=ERROR",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env=HOST_ENV,
    )
    assert result.returncode == 0, result.stderr


def test_promtool_accepts_the_tls_prometheus_agent_config(secrets: Path, tmp_path: Path) -> None:
    config = _mapped(PROMETHEUS_AGENT_TLS, secrets, tmp_path)
    result = subprocess.run(
        [binary("promtool"), "check", "config", "--agent", str(config)],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_host_override_resolves_with_the_host_stack(tmp_path: Path) -> None:
    env = {**env_example(HOST), **SECRETS, "COMPOSE_PROFILES": "demo"}
    env_file = tmp_path / "host.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    files = ["-f", str(HOST), "-f", str(HOST_TLS)]
    result = subprocess.run(
        [docker_compose(), "--env-file", str(env_file), *files, "config"],
        cwd=HOST.parent,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    exporter = services["exporter-demo"]
    assert exporter["environment"]["MIRRORWATCH_WEB_CONFIG_FILE"] == "/run/secrets/web-config.yml"
    vmagent = services["vmagent"]
    assert f"{VMAGENT_TLS}:/etc/vmagent/scrape.yml:ro" in vmagent["volumes"]
    assert {secret["source"] for secret in vmagent["secrets"]} == {"ca.crt", "scrape-password"}


def test_vmagent_scrapes_the_exporter_over_https_with_the_fleet_config(
    secrets: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load(_mapped(VMAGENT_TLS, secrets, tmp_path).read_text(encoding="utf-8"))
    trusting = ssl.create_default_context(cafile=secrets / "ca.crt")
    # The web config names its certificate relative to its folder, as in /run/secrets.
    web_config = secrets / "web-config.yml"
    web_config.write_text(WEB_CONFIG.read_text(encoding="utf-8"), encoding="utf-8")
    with (
        httpx.Client(verify=trusting, auth=("prometheus", EXAMPLE_PASSWORD), timeout=10) as client,
        running_exporter(
            ["--simulate", "healthy", "--web-config-file", str(web_config)],
            scheme="https",
            client=client,
        ) as exporter,
    ):
        port = exporter.url.rsplit(":", 1)[1]
        config["global"]["scrape_interval"] = "1s"
        config["global"]["scrape_timeout"] = "1s"
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [f"localhost:{port}"]}]
        path = tmp_path / "vmagent.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        listen = free_port()
        with (tmp_path / "vmagent.log").open("w", encoding="utf-8") as log:
            process = subprocess.Popen(
                [
                    binary("vmagent"),
                    f"-promscrape.config={path}",
                    "-remoteWrite.url=http://127.0.0.1:9/api/v1/write",  # nothing listens
                    f"-remoteWrite.tmpDataPath={tmp_path / 'vmagent-data'}",
                    f"-httpListenAddr=127.0.0.1:{listen}",
                    "-loggerLevel=ERROR",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=HOST_ENV,
            )
        try:
            assert _health(f"http://127.0.0.1:{listen}", tmp_path) == ("up", "")
        finally:
            process.terminate()
            process.wait(timeout=30)


def _health(vmagent: str, tmp: Path) -> tuple[str, str]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        try:
            targets = httpx.get(f"{vmagent}/api/v1/targets", timeout=10).json()["data"][
                "activeTargets"
            ]
        except (httpx.TransportError, ValueError, KeyError):
            targets = []
        for target in targets:
            # vmagent says `down` with no error before its first scrape: not an answer yet.
            if target["health"] == "up" or target["lastError"]:
                return target["health"], target["lastError"]
        if time.monotonic() > deadline:
            pytest.fail(f"vmagent never scraped; see {tmp / 'vmagent.log'}")
        time.sleep(0.2)
