"""The ingest API of the real exporter process over loopback HTTP, with a token file."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.exporter.ingest_snapshots import labels, parse_series, snapshot_body

TOKEN = "live-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PATH = "/api/v1/runs/live/workers/0"
SEQUENCES = itertools.count(2)  # the tests share one exporter, so each push is a newer one


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningExporter]:
    token_file = tmp_path_factory.mktemp("secrets") / "token"
    token_file.write_text(TOKEN + "\n")
    args = ["--simulate", "healthy", "--log-level", "warning", "--ingest-token-file"]
    with running_exporter([*args, str(token_file)]) as exporter:
        yield exporter


@pytest.fixture
def client(exporter: RunningExporter) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=exporter.url, timeout=10) as client:
        yield client


def test_a_push_is_published_and_joined_to_the_hosts_gpus(client: httpx.Client) -> None:
    gpus = client.get("/api/v1/gpus").json()["gpus"]
    devices = [
        {"replica": 0, "device": "/device:GPU:0", "pci_bus_id": gpus[1]["pci_bus_id"].upper()},
        {"replica": 1, "device": "/device:GPU:1", "uuid": gpus[0]["uuid"]},
    ]
    response = client.put(PATH, json=snapshot_body(replica_devices=devices), headers=AUTH)
    assert response.status_code == 200, response.text
    series = parse_series(client.get("/metrics").text)
    worker = {"run": "live", "worker": "0"}
    assert series["mirrorwatch_training_steps_total"][labels(**worker)] == 100
    assert set(series["mirrorwatch_training_replica_info"]) == {
        labels(**worker, replica="0", gpu="1", uuid=gpus[1]["uuid"]),
        labels(**worker, replica="1", gpu="0", uuid=gpus[0]["uuid"]),
    }


def test_a_body_declared_over_1_mib_is_refused_before_it_is_sent(
    exporter: RunningExporter,
) -> None:
    host, port = exporter.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"PUT {PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["reason"] == "too_large"


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"[" * 100_000, 400), (b'{"loss": NaN}', 422), (b"\xff\xfe", 400)],
    ids=["deep nesting", "NaN", "not UTF-8"],
)
def test_hostile_bodies_get_4xx_and_the_next_push_works(
    client: httpx.Client, body: bytes, status: int
) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    assert client.put(PATH, content=body, headers=headers).status_code == status
    response = client.put(PATH, json=snapshot_body(sequence=next(SEQUENCES)), headers=AUTH)
    assert response.status_code == 200


def test_without_the_token_the_push_is_401(client: httpx.Client) -> None:
    response = client.put(PATH, json=snapshot_body())
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_rejections_are_counted_in_the_metrics(client: httpx.Client) -> None:
    client.put(PATH, json=snapshot_body(), headers={"Authorization": "Bearer nope"})
    series = parse_series(client.get("/metrics").text)
    assert series["mirrorwatch_exporter_ingest_rejected_total"][labels(reason="unauthorized")] >= 1


def test_without_a_token_loopback_may_push_and_the_start_says_so_once() -> None:
    env = {"MIRRORWATCH_INGEST_TOKEN": "", "MIRRORWATCH_INGEST_TOKEN_FILE": ""}
    with running_exporter(["--simulate", "healthy", "--log-level", "warning"], env) as exporter:
        response = httpx.put(exporter.url + PATH, json=snapshot_body(), timeout=10)
        assert response.status_code == 200, response.text
        # A local proxy forwarding a remote client: that client is refused.
        forwarded = {"X-Forwarded-For": "10.0.0.5"}
        response = httpx.put(exporter.url + PATH, json=snapshot_body(), headers=forwarded)
        assert response.status_code == 403
        _, log = exporter.stop()
    assert log.count("loopback clients only") == 1


def test_keep_alive_pushes_do_not_wait_on_delayed_acks(exporter: RunningExporter) -> None:
    # Without TCP_NODELAY on the exporter's sockets every answer on a kept-alive connection
    # waits ~40 ms for the client's delayed ACK; a healthy push takes about 1 ms.
    port = int(exporter.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {**AUTH, "Content-Type": "application/json"}
    path = "/api/v1/runs/keepalive/workers/0"
    latencies = []
    for sequence in range(1, 22):
        body = json.dumps(snapshot_body(sequence=sequence)).encode()
        started = time.perf_counter()
        connection.request("PUT", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - started)
        assert response.status == 200
    connection.close()
    assert statistics.median(latencies) < 0.02
