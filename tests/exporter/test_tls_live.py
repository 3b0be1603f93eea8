"""The real exporter over TLS with basic auth: scraped by the real Prometheus, refused otherwise."""

from __future__ import annotations

import contextlib
import copy
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.exporter.certificates import Authority, Pair, bcrypt_hash, write_web_config
from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.exporter.scraping import DEADLINE_SECONDS, prometheus_scraping, target_health

USER, PASSWORD = "prometheus", "scrape-secret"


class Tls:
    """A CA, the exporter's certificate, a client certificate, and a web config using them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.authority = Authority.create(folder)
        self.server = self.authority.issue("exporter")
        self.client = self.authority.issue("scraper", hosts=("scraper",), usage="clientAuth")
        self.web_config = folder / "web-config.yml"

    def write(self, *, client_auth: str = "NoClientCert", password: str = PASSWORD) -> Path:
        tls: dict[str, object] = {
            "cert_file": str(self.server.cert),
            "key_file": str(self.server.key),
            "client_auth_type": client_auth,
        }
        if client_auth != "NoClientCert":
            tls["client_ca_file"] = str(self.authority.cert)
        return write_web_config(
            self.web_config,
            {"tls_server_config": tls, "basic_auth_users": {USER: bcrypt_hash(password)}},
        )

    def elsewhere(self, web_config: Path, server: Pair | None = None) -> Tls:
        """The same CA and client, with its own web config file (and server certificate)."""
        other = copy.copy(self)
        other.web_config = web_config
        other.server = server or self.server
        return other

    def client_for(self, *, certificate: Pair | None = None, **options: Any) -> httpx.Client:
        context = ssl.create_default_context(cafile=self.authority.cert)
        if certificate is not None:
            context.load_cert_chain(certificate.cert, certificate.key)
        return httpx.Client(verify=context, timeout=10, **options)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return Tls(tmp_path_factory.mktemp("tls"))


@contextmanager
def tls_exporter(tls: Tls, client: httpx.Client) -> Iterator[RunningExporter]:
    with running_exporter(
        ["--simulate", "healthy", "--web-config-file", str(tls.web_config)],
        scheme="https",
        client=client,
    ) as exporter:
        yield exporter


@pytest.fixture(scope="module")
def exporter(tls: Tls) -> Iterator[RunningExporter]:
    tls.write()
    with tls.client_for() as client, tls_exporter(tls, client) as running:
        yield running


def test_no_password_gets_a_basic_challenge_and_no_metrics(
    tls: Tls, exporter: RunningExporter
) -> None:
    with tls.client_for() as client:
        response = client.get(exporter.url + "/metrics")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic ")
    assert "mirrorwatch_" not in response.text


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/readyz", "/", "/api/v1/gpus"])
def test_a_wrong_password_gets_401_on_every_endpoint(
    tls: Tls, exporter: RunningExporter, path: str
) -> None:
    with tls.client_for(auth=(USER, "not-it")) as client:
        assert client.get(exporter.url + path).status_code == 401


def test_the_right_password_gets_metrics_over_https(tls: Tls, exporter: RunningExporter) -> None:
    with tls.client_for(auth=(USER, PASSWORD)) as client:
        response = client.get(exporter.url + "/metrics")
    assert response.status_code == 200
    assert "mirrorwatch_gpu_info" in response.text


def test_openmetrics_gzip_and_keep_alive_work_as_over_plain_http(
    tls: Tls, exporter: RunningExporter
) -> None:
    ports: set[int] = set()
    headers = {
        "Accept": "application/openmetrics-text;version=1.0.0",
        "Accept-Encoding": "gzip",
    }
    with tls.client_for(auth=(USER, PASSWORD), headers=headers) as client:
        for _ in range(3):
            response = client.get(exporter.url + "/metrics")
            assert response.headers["content-type"].startswith("application/openmetrics-text")
            assert response.headers["content-encoding"] == "gzip"
            assert response.text.endswith("# EOF\n")
            stream = response.extensions["network_stream"]
            ports.add(stream.get_extra_info("client_addr")[1])
    assert len(ports) == 1  # one connection, one handshake, for all three


def test_ingest_put_keeps_its_bearer_token_and_needs_no_basic_auth(
    tls: Tls, exporter: RunningExporter
) -> None:
    # No token configured: loopback clients may push; a body missing fields is a 422, which
    # shows the request reached the ingest API past basic auth.
    with tls.client_for() as client:
        response = client.put(
            exporter.url + "/api/v1/runs/r/workers/0", json={"schema": 1}, timeout=10
        )
    assert response.status_code == 422


def test_plain_http_to_the_tls_port_gets_nothing(exporter: RunningExporter) -> None:
    plain = exporter.url.replace("https://", "http://")
    with pytest.raises(httpx.TransportError):
        httpx.get(plain + "/metrics", timeout=10)
    with httpx.Client(verify=False, timeout=10) as client:
        # The exporter still serves after it: the failed handshake harmed nothing.
        assert client.get(exporter.url + "/healthz").status_code == 401


@pytest.mark.parametrize("problem", ["expired", "wrong-host"])
def test_a_client_refuses_an_expired_or_wrong_host_certificate(
    tls: Tls, tmp_path: Path, problem: str
) -> None:
    server = (
        tls.authority.issue("expired", expired=True)
        if problem == "expired"
        else tls.authority.issue("elsewhere", hosts=("elsewhere.example",))
    )
    config = write_web_config(
        tmp_path / "web.yml",
        {"tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)}},
    )
    with (
        httpx.Client(verify=False, timeout=10) as insecure,
        running_exporter(
            ["--simulate", "healthy", "--web-config-file", str(config)],
            scheme="https",
            client=insecure,
        ) as running,
        tls.client_for() as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(running.url + "/healthz")


def test_a_changed_password_applies_without_a_restart(tls: Tls, tmp_path: Path) -> None:
    own = tls.elsewhere(tmp_path / "web-config.yml")
    own.write()
    with (
        own.client_for(auth=(USER, PASSWORD)) as old,
        own.client_for(auth=(USER, "rotated")) as new,
        tls_exporter(own, old) as running,
    ):
        assert old.get(running.url + "/metrics").status_code == 200
        own.write(password="rotated")  # renamed into place, as an editor or a Secret does
        assert old.get(running.url + "/metrics").status_code == 401
        assert new.get(running.url + "/metrics").status_code == 200


def test_required_client_certificates_refuse_a_client_without_one(tls: Tls, tmp_path: Path) -> None:
    own = tls.elsewhere(tmp_path / "web-config.yml")
    own.write(client_auth="RequireAndVerifyClientCert")
    with (
        own.client_for(certificate=tls.client, auth=(USER, PASSWORD)) as with_certificate,
        own.client_for(auth=(USER, PASSWORD)) as without,
        tls_exporter(own, with_certificate) as running,
    ):
        assert with_certificate.get(running.url + "/metrics").status_code == 200
        with pytest.raises(httpx.TransportError):
            without.get(running.url + "/metrics")


def test_sighup_reads_the_certificates_again(tls: Tls, tmp_path: Path) -> None:
    own = tls.elsewhere(
        tmp_path / "web-config.yml", Pair(tmp_path / "exporter.crt", tmp_path / "exporter.key")
    )
    shutil.copy(tls.server.cert, own.server.cert)
    shutil.copy(tls.server.key, own.server.key)
    own.write()
    renewed = tls.authority.issue("renewed")
    with own.client_for(auth=(USER, PASSWORD)) as client, tls_exporter(own, client) as running:
        assert _served_certificate(running) == tls.server.cert.read_text()
        shutil.copy(renewed.cert, own.server.cert)
        shutil.copy(renewed.key, own.server.key)
        running.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while _served_certificate(running) != renewed.cert.read_text():
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.05)
        assert running.process.poll() is None


def _served_certificate(running: RunningExporter) -> str:
    port = int(running.url.rsplit(":", 1)[1])
    return ssl.get_server_certificate(("127.0.0.1", port), timeout=10)


# --- the real Prometheus ------------------------------------------------------------------


def _job(name: str, exporter: RunningExporter, tls: Tls, password_file: Path) -> dict[str, Any]:
    return {
        "job_name": name,
        "scheme": "https",
        "tls_config": {
            "ca_file": str(tls.authority.cert),
            "cert_file": str(tls.client.cert),
            "key_file": str(tls.client.key),
        },
        "basic_auth": {"username": USER, "password_file": str(password_file)},
        "static_configs": [{"targets": [exporter.url.removeprefix("https://")]}],
    }


def test_prometheus_scrapes_over_https_with_basic_auth_and_a_client_certificate(
    tls: Tls, tmp_path: Path
) -> None:
    own = tls.elsewhere(tmp_path / "web-config.yml")
    own.write(client_auth="RequireAndVerifyClientCert")
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(PASSWORD, encoding="utf-8")
    wrong.write_text("not-it", encoding="utf-8")
    with (
        own.client_for(certificate=tls.client, auth=(USER, PASSWORD)) as client,
        tls_exporter(own, client) as running,
    ):
        jobs = [_job("right", running, tls, right), _job("wrong", running, tls, wrong)]
        plain = {**_job("plain", running, tls, right), "scheme": "http"}
        with prometheus_scraping(tmp_path, [*jobs, plain]) as prometheus:
            health = target_health(prometheus, tmp_path)
            assert health["right"] == ("up", "")
            assert health["wrong"][0] == "down"
            assert "401" in health["wrong"][1]
            assert health["plain"][0] == "down"


# --- hostile clients over TLS ------------------------------------------------------------

DRILL_HEAD_TIMEOUT = 1  # seconds; a stalled client is cut off after it, the test waits on that


@pytest.fixture(scope="module")
def drilled(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningExporter]:
    own = tls.elsewhere(tmp_path_factory.mktemp("drills") / "web-config.yml")
    own.write()
    with (
        own.client_for(auth=(USER, PASSWORD)) as client,
        running_exporter(
            [
                "--simulate",
                "healthy",
                "--web-config-file",
                str(own.web_config),
                "--header-timeout",
                str(DRILL_HEAD_TIMEOUT),
                "--max-header-bytes",
                "1024",
            ],
            scheme="https",
            client=client,
        ) as running,
    ):
        yield running


def _address(running: RunningExporter) -> tuple[str, int]:
    return "127.0.0.1", int(running.url.rsplit(":", 1)[1])


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the exporter sends until it closes the connection (the socket's timeout is
    far beyond the exporter's bound, so a hang fails instead of waiting for ever)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_client_stalling_in_the_tls_handshake_is_cut_off(drilled: RunningExporter) -> None:
    # Half asyncio's own 60 s handshake bound, so only the exporter's (1 s here) can pass this.
    with socket.create_connection(_address(drilled), timeout=30) as sock:
        assert _until_closed(sock) == b""  # closed by the exporter, not by the test's timeout


def test_slow_headers_over_tls_get_408(tls: Tls, drilled: RunningExporter) -> None:
    context = ssl.create_default_context(cafile=tls.authority.cert)
    with (
        socket.create_connection(_address(drilled), timeout=DEADLINE_SECONDS) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert _until_closed(sock).startswith(b"HTTP/1.1 408 ")


def test_huge_headers_over_tls_get_431(tls: Tls, drilled: RunningExporter) -> None:
    context = ssl.create_default_context(cafile=tls.authority.cert)
    with (
        socket.create_connection(_address(drilled), timeout=DEADLINE_SECONDS) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * 4096 + b"\r\n\r\n")
        assert _until_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_a_flood_of_stalled_handshakes_leaves_scrapes_served(
    tls: Tls, drilled: RunningExporter
) -> None:
    with contextlib.ExitStack() as stack:
        for _ in range(100):
            stack.enter_context(socket.create_connection(_address(drilled), timeout=10))
        with tls.client_for(auth=(USER, PASSWORD)) as client:
            assert client.get(drilled.url + "/metrics").status_code == 200
