"""Training clients push to an https exporter, verified by the system's CAs or SSL_CERT_FILE."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirrorwatch.telemetry.pusher import Endpoint, Outcome, Pusher, put
from tests.exporter.certificates import Authority, write_web_config
from tests.exporter.exporter_process import RunningExporter, running_exporter


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority.create(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def exporter(authority: Authority) -> Iterator[RunningExporter]:
    server = authority.issue("exporter")
    config = write_web_config(
        authority.folder / "web.yml",
        {"tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)}},
    )
    trusting = ssl.create_default_context(cafile=authority.cert)
    with (
        httpx.Client(verify=trusting, timeout=10) as client,
        running_exporter(
            ["--simulate", "healthy", "--web-config-file", str(config)],
            scheme="https",
            client=client,
        ) as running,
    ):
        yield running


def _endpoint(exporter: RunningExporter) -> Endpoint:
    return Endpoint.parse(exporter.url, "run", 0, None)


def test_a_push_verified_by_ssl_cert_file_reaches_the_exporter(
    exporter: RunningExporter, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.cert))
    outcome, reason = put(_endpoint(exporter), b"{}", timeout=10)
    # The exporter answered (a 422 for an empty snapshot): TLS was verified and spoken.
    assert outcome is Outcome.REJECTED, reason
    assert "HTTP 422" in reason


def test_a_certificate_no_ca_vouches_for_is_one_line_naming_the_url(
    exporter: RunningExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = Authority.create(tmp_path, "another-ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(other.cert))
    pusher = Pusher(_endpoint(exporter), lambda active, sequence, dropped: b"{}", interval=60)
    with caplog.at_level(logging.WARNING, logger="mirrorwatch"):
        for _ in range(3):
            pusher._push(active=True, timeout=10)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1, lines
    assert f"at {exporter.url} " in lines[0]
    assert "certificate does not verify" in lines[0]
    assert "training goes on" in lines[0]
    assert pusher.dropped_total == 3
