"""docker-compose.tls.yml: the stack over TLS and basic auth, checked by the tools that run it."""

from __future__ import annotations

import copy
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from demo.stack import PROMETHEUS_CONFIG, REPO, RULES, load_yaml, write_yaml
from tests.exporter.certificates import Authority
from tests.exporter.exporter_process import running_exporter
from tests.exporter.scraping import prometheus_scraping, target_health
from tests.hang import HANG_SECONDS
from tests.stack.compose import SECRETS, env_example, run_compose, tool

TLS_OVERRIDE = REPO / "docker-compose.tls.yml"
TLS_PROMETHEUS = REPO / "prometheus" / "prometheus.tls.yml"
COMPOSE_WEB_CONFIG = REPO / "deploy" / "compose-tls" / "web-config.yml"
EXAMPLE_PASSWORD = "change-me"  # the one the example hash is of (deploy/compose-tls)
SECRETS_FOLDER = "/run/secrets"


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("compose-tls")
    result = run_compose({**env_example(), **SECRETS}, tmp, "-f", str(TLS_OVERRIDE), "config")
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ./secrets/ holds in a real stack, made here; plus the compose web config."""
    folder = tmp_path_factory.mktemp("secrets")
    authority = Authority.create(folder, "ca")
    authority.issue("exporter", hosts=("exporter", "127.0.0.1"))
    (folder / "scrape-password").write_text(EXAMPLE_PASSWORD + "\n", encoding="utf-8")
    shutil.copy(COMPOSE_WEB_CONFIG, folder / "web-config.yml")
    return folder


def _in_secrets(text: str, folder: Path) -> str:
    return text.replace(SECRETS_FOLDER, str(folder))


def test_the_override_matches_the_compose_spec_schema() -> None:
    check = tool("check-jsonschema", "install the test extra: `make install`")
    result = subprocess.run(
        [check, "--builtin-schema", "vendor.compose-spec", str(TLS_OVERRIDE)],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["exporter", "exporter-demo"])
def test_exporters_read_the_web_config_and_certificates_as_secrets(
    resolved: dict[str, Any], name: str
) -> None:
    service = resolved["services"][name]
    assert service["environment"]["MIRRORWATCH_WEB_CONFIG_FILE"] == "/run/secrets/web-config.yml"
    assert service["environment"]["MIRRORWATCH_INGEST_TOKEN"] == SECRETS["MIRRORWATCH_INGEST_TOKEN"]
    given = {secret["source"] for secret in service["secrets"]}
    assert {"web-config.yml", "exporter.crt", "exporter.key"} <= given


@pytest.mark.parametrize("name", ["trainer", "trainer-demo"])
def test_trainers_push_over_https_trusting_the_stacks_ca(
    resolved: dict[str, Any], name: str
) -> None:
    service = resolved["services"][name]
    assert service["environment"]["MIRRORWATCH_URL"] == "https://exporter:9848"
    assert service["environment"]["SSL_CERT_FILE"] == "/run/secrets/ca.crt"
    assert [secret["source"] for secret in service["secrets"]] == ["ca.crt"]


def test_prometheus_mounts_the_tls_config_in_place_of_the_plain_one(
    resolved: dict[str, Any],
) -> None:
    volumes = resolved["services"]["prometheus"]["volumes"]
    mounted = [volume for volume in volumes if ":/etc/prometheus/prometheus.yml" in str(volume)]
    assert mounted == [f"{TLS_PROMETHEUS}:/etc/prometheus/prometheus.yml:ro"]


def test_the_tls_config_is_the_plain_one_but_for_the_exporter_jobs_tls() -> None:
    tls, plain = load_yaml(TLS_PROMETHEUS), load_yaml(PROMETHEUS_CONFIG)
    job = next(job for job in tls["scrape_configs"] if job["job_name"] == "mirrorwatch")
    assert job["scheme"] == "https"
    stripped = copy.deepcopy(tls)
    for each in stripped["scrape_configs"]:
        if each["job_name"] == "mirrorwatch":
            for key in ("scheme", "tls_config", "basic_auth"):
                del each[key]
    assert stripped == plain


def test_the_tls_config_passes_promtool(secrets: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(_in_secrets(TLS_PROMETHEUS.read_text(encoding="utf-8"), secrets))
    config["rule_files"] = [str(RULES)]
    promtool = tool("promtool", "run `make tools` (Debian package prometheus)")
    result = subprocess.run(
        [promtool, "check", "config", str(write_yaml(tmp_path / "prometheus.yml", config))],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_web_config_passes_promtool(secrets: Path) -> None:
    promtool = tool("promtool", "run `make tools` (Debian package prometheus)")
    result = subprocess.run(
        [promtool, "check", "web-config", str(secrets / "web-config.yml")],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_scrapes_the_exporter_with_the_stacks_own_files(
    resolved: dict[str, Any], secrets: Path, tmp_path: Path
) -> None:
    """The exporter on the compose web config, Prometheus on the compose scrape job, and the
    exporter's healthcheck as compose runs it, with /run/secrets where the test made them."""
    web_config = secrets / "web-config.yml"
    trusting = ssl.create_default_context(cafile=secrets / "ca.crt")
    with (
        httpx.Client(verify=trusting, auth=("prometheus", EXAMPLE_PASSWORD), timeout=10) as client,
        running_exporter(
            ["--simulate", "healthy", "--web-config-file", str(web_config)],
            scheme="https",
            client=client,
        ) as exporter,
    ):
        assert client.get(exporter.url + "/metrics").status_code == 200
        port = exporter.url.rsplit(":", 1)[1]
        check = resolved["services"]["exporter"]["healthcheck"]["test"]
        assert check[:3] == ["CMD", "python", "-c"]
        script = _in_secrets(check[3], secrets).replace("127.0.0.1:9848", f"127.0.0.1:{port}")
        assert subprocess.run([sys.executable, "-c", script], timeout=HANG_SECONDS).returncode == 0
        job = next(
            job for job in load_yaml(TLS_PROMETHEUS)["scrape_configs"]
            if job["job_name"] == "mirrorwatch"
        )  # fmt: skip
        job = yaml.safe_load(_in_secrets(yaml.safe_dump(job), secrets))
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        with prometheus_scraping(tmp_path, [job]) as prometheus:
            assert target_health(prometheus, tmp_path)["mirrorwatch"] == ("up", "")
