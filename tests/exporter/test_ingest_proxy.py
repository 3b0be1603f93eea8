"""X-Forwarded-For is believed from the configured proxies only, right-most untrusted hop first;
with no token, proxies beyond loopback (or uvicorn's FORWARDED_ALLOW_IPS) refuse to start."""

from __future__ import annotations

import subprocess

import pytest
from fastapi.testclient import TestClient

from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.settings import Settings
from tests.exporter.exporter_process import EXPORTER
from tests.exporter.ingest_snapshots import snapshot_body
from tests.exporter.static_gpu import StaticBackend, StaticGpu

URL = "/api/v1/runs/r1/workers/0"


def push(proxies: str, peer: str, forwarded: str) -> int:
    app = create_app(Settings(trusted_proxies=proxies), StaticBackend([StaticGpu()]))
    with TestClient(app, client=(peer, 50000)) as client:
        headers = {"X-Forwarded-For": forwarded}
        status: int = client.put(URL, json=snapshot_body(), headers=headers).status_code
        return status


def test_a_client_written_loopback_hop_is_not_believed_through_a_proxy() -> None:
    # The proxy at 10.0.0.1 appends the real client 198.51.100.7 to what the client wrote.
    assert push("10.0.0.1", "10.0.0.1", "127.0.0.1, 198.51.100.7") == 403


def test_the_right_most_untrusted_hop_is_the_client() -> None:
    assert push("10.0.0.0/8", "10.0.0.1", "198.51.100.7, 127.0.0.1, 10.0.0.2") == 200
    assert push("10.0.0.0/8", "10.0.0.1", "127.0.0.1, 198.51.100.7, 10.0.0.2") == 403


def test_forwarded_for_from_a_host_that_is_no_proxy_is_ignored() -> None:
    assert push("10.0.0.1", "10.0.0.9", "127.0.0.1") == 403


def test_by_default_only_loopback_proxies_are_believed() -> None:
    assert Settings().proxies == ["127.0.0.1/32", "::1/128"]
    assert push("127.0.0.1,::1", "127.0.0.1", "10.0.0.5") == 403


@pytest.mark.parametrize("value", ["*", "10.0.0.300", "proxy.local"])
def test_a_proxy_list_that_is_not_addresses_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="trusted_proxies"):
        Settings(trusted_proxies=value)


def start(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_INGEST_TOKEN": "", **env}
    command = [EXPORTER, "--listen", "127.0.0.1:1", "--simulate", "healthy", *args]
    return subprocess.run(command, env=clean, capture_output=True, text=True, timeout=60)


def test_no_token_and_a_proxy_beyond_loopback_refuses_to_start() -> None:
    result = start(["--trusted-proxies", "10.0.0.1"], {})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("mirrorwatch-exporter: error: --trusted-proxies: with no ingest token")


def test_uvicorns_forwarded_allow_ips_refuses_to_start() -> None:
    result = start([], {"FORWARDED_ALLOW_IPS": "*"})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("mirrorwatch-exporter: error: FORWARDED_ALLOW_IPS: not read")
    assert "--trusted-proxies" in line
