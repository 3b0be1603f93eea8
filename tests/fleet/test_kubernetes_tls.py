"""deploy/kubernetes-tls/: the exporters over TLS with basic auth, as kubectl builds them.

The overlay is built by kubectl's own kustomize, then checked as deploy/kubernetes/ is: built-in
kinds by Kubernetes' OpenAPI schemas, the ServiceMonitor by prometheus-operator's CRD. Its web
config passes promtool, and its probe, run as the kubelet runs it, passes on a real exporter.
"""

from __future__ import annotations

import copy
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from mirrorwatch.exporter.web_config import load_web_config
from tests.exporter.certificates import Authority
from tests.exporter.exporter_process import running_exporter
from tests.fleet.test_kubernetes import KUBERNETES, KUBERNETES_VERSIONS, crd_schema
from tests.hang import HANG_SECONDS

OVERLAY = KUBERNETES.parent / "kubernetes-tls"
SECRET = "mirrorwatch-exporter-web"
MOUNT = "/etc/mirrorwatch/web/"
EXAMPLE_PASSWORD = "change-me"  # the one the example hash is of


def _built(folder: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed (its kustomize builds the overlay)", pytrace=False)
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, Any]]:
    return {document["kind"]: document for document in _built(OVERLAY)}


@pytest.fixture(scope="module")
def base() -> dict[str, dict[str, Any]]:
    return {document["kind"]: document for document in _built(KUBERNETES)}


def _container(built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = built["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_built_in_resources_match_the_kubernetes_schema(
    built: dict[str, dict[str, Any]], version: str
) -> None:
    for document in built.values():
        if not document["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(document, version, strict=True)


def test_the_service_monitor_matches_its_crd_schema(built: dict[str, dict[str, Any]]) -> None:
    jsonschema.validate(built["ServiceMonitor"], crd_schema("ServiceMonitor", "v1"))


def test_the_service_monitor_differs_from_the_plain_one_only_in_tls_and_auth(
    built: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]]
) -> None:
    monitor = copy.deepcopy(built["ServiceMonitor"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint.pop("scheme") == "https"
    assert endpoint.pop("tlsConfig")["ca"]["secret"] == {"name": SECRET, "key": "ca.crt"}
    auth = endpoint.pop("basicAuth")
    assert {auth["username"]["name"], auth["password"]["name"]} == {SECRET}
    assert monitor == base["ServiceMonitor"]


def test_the_pod_mounts_what_the_web_config_and_probes_read(
    built: dict[str, dict[str, Any]],
) -> None:
    container = _container(built)
    env = {item["name"]: item for item in container["env"]}
    assert env["MIRRORWATCH_WEB_CONFIG_FILE"]["value"] == MOUNT + "web-config.yml"
    assert "MIRRORWATCH_INGEST_TOKEN" in env  # the base's settings are kept
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] + "/" == MOUNT
    assert mount["readOnly"] is True
    (volume,) = built["DaemonSet"]["spec"]["template"]["spec"]["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["secret"]["secretName"] == SECRET
    paths = {item["path"] for item in volume["secret"]["items"]}
    config = load_web_config(OVERLAY / "web-config.yml")
    assert config.tls is not None
    assert {"web-config.yml", config.tls.cert_file.name, config.tls.key_file.name} <= paths
    assert {"password", "ca.crt"} <= paths  # what the probes read
    for probe in ("readinessProbe", "livenessProbe"):
        assert set(container[probe]) - {"initialDelaySeconds", "periodSeconds"} == {
            "exec",
            "timeoutSeconds",
        }


def test_the_web_config_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run `make tools`", pytrace=False)
    shutil.copy(OVERLAY / "web-config.yml", tmp_path / "web-config.yml")
    issued = Authority.create(tmp_path, "ca").issue("server")
    issued.cert.rename(tmp_path / "tls.crt")
    issued.key.rename(tmp_path / "tls.key")
    result = subprocess.run(
        [promtool, "check", "web-config", str(tmp_path / "web-config.yml")],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_probes_pass_on_an_exporter_serving_the_web_config(
    built: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The Secret's files where the pod has them (here a folder), the probes' own commands."""
    shutil.copy(OVERLAY / "web-config.yml", tmp_path / "web-config.yml")
    authority = Authority.create(tmp_path, "ca")  # ca.crt, as the Secret's key
    issued = authority.issue("server")
    issued.cert.rename(tmp_path / "tls.crt")
    issued.key.rename(tmp_path / "tls.key")
    (tmp_path / "password").write_text(EXAMPLE_PASSWORD, encoding="utf-8")
    trusting = ssl.create_default_context(cafile=authority.cert)
    with (
        httpx.Client(verify=trusting, auth=("prometheus", EXAMPLE_PASSWORD), timeout=10) as client,
        running_exporter(
            ["--simulate", "healthy", "--web-config-file", str(tmp_path / "web-config.yml")],
            scheme="https",
            client=client,
        ) as exporter,
    ):
        port = exporter.url.rsplit(":", 1)[1]
        container = _container(built)
        for probe in ("readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            assert command[:2] == ["python", "-c"]
            script = (
                command[2]
                .replace(MOUNT, f"{tmp_path}/")
                .replace("127.0.0.1:9848", f"127.0.0.1:{port}")
            )
            ran = subprocess.run(
                [sys.executable, "-c", script, *command[3:]],
                capture_output=True,
                timeout=HANG_SECONDS,
            )
            assert ran.returncode == 0, ran.stderr
