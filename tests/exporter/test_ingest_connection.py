"""Every connection is bounded in memory and time before it is authenticated (the real process).

uvicorn's httptools parser buffers a header of any size and times nothing while a head is read;
the exporter's protocol (ingest/protocol.py) answers 431 past the head limit and 408 past the
head timeout, logs them at a bounded rate, and counts them as ingest refusals only on the
ingest path.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.exporter.ingest_snapshots import labels, parse_series, snapshot_body

TOKEN = "conn-token-0123456789"
PATH = "/api/v1/runs/conn/workers/0"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def exporter() -> Iterator[RunningExporter]:
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    args = ["--simulate", "healthy", "--log-level", "warning", "--header-timeout", "1"]
    with running_exporter(args, env) as exporter:
        yield exporter


def address(exporter: RunningExporter) -> tuple[str, int]:
    host, port = exporter.url.removeprefix("http://").split(":")
    return host, int(port)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def rejected(exporter: RunningExporter, reason: str) -> float:
    series = parse_series(httpx.get(exporter.url + "/metrics", timeout=10).text)
    return series["mirrorwatch_exporter_ingest_rejected_total"][labels(reason=reason)]


def exchange(exporter: RunningExporter, data: bytes, chunk: int = 65536) -> bytes:
    """Send ``data`` (as far as the server lets us), then read the answer to its end."""
    with socket.create_connection(address(exporter), timeout=10) as sock:
        try:
            for start in range(0, len(data), chunk):
                sock.sendall(data[start : start + chunk])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before we were done: what we test
        answer = b""
        try:
            while chunk_in := sock.recv(65536):
                answer += chunk_in
        except ConnectionResetError:
            pass
        return answer


def status_and_body(answer: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def big_header_request(size: int) -> bytes:
    return f"PUT {PATH} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode() + b"a" * size + b"\r\n\r\n"


def test_a_32_mib_header_is_431_and_never_held(exporter: RunningExporter) -> None:
    before = rss_bytes(exporter.process.pid)
    status, body = status_and_body(exchange(exporter, big_header_request(32 * MIB)))
    assert (status, body["reason"]) == (431, "headers_too_large")
    assert body["error"].startswith("header: request line and headers over 8192 bytes")
    assert rss_bytes(exporter.process.pid) - before < 8 * MIB  # was +62 MB
    assert rejected(exporter, "headers_too_large") >= 1


def test_four_32_mib_headers_at_once_leave_memory_flat(exporter: RunningExporter) -> None:
    before = rss_bytes(exporter.process.pid)
    answers: list[bytes] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(exchange(exporter, big_header_request(32 * MIB)))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [status_and_body(answer)[0] for answer in answers] == [431] * 4
    assert rss_bytes(exporter.process.pid) - before < 8 * MIB  # was +244 MB


def test_a_head_a_real_client_sends_passes(exporter: RunningExporter) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Padding": "p" * 6000}
    response = httpx.put(exporter.url + PATH, json=snapshot_body(), headers=headers, timeout=10)
    assert response.status_code == 200, response.text


def test_a_head_sent_too_slowly_is_408(exporter: RunningExporter) -> None:
    with socket.create_connection(address(exporter), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(f"PUT {PATH} HTTP/1.1\r\nHost: x\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        elapsed = time.monotonic() - started
    status, body = status_and_body(answer)
    assert (status, body["reason"]) == (408, "timeout")
    assert 0.5 < elapsed < 5  # --header-timeout 1
    assert rejected(exporter, "timeout") >= 1


def test_a_connection_that_never_sends_is_closed(exporter: RunningExporter) -> None:
    with socket.create_connection(address(exporter), timeout=10) as sock:
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_200_slow_connections_are_all_closed_after_the_head_timeout(
    exporter: RunningExporter,
) -> None:
    sockets = [socket.create_connection(address(exporter), timeout=10) for _ in range(200)]
    try:
        for sock in sockets:
            sock.sendall(b"PUT / HTTP/1.1\r\nX-Slow: ")
        time.sleep(3)  # 1 s timeout, with room for a loaded machine
        for sock in sockets:
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in sockets:
            sock.close()


def test_a_head_timeout_counts_as_an_ingest_refusal_only_on_the_ingest_path(
    exporter: RunningExporter,
) -> None:
    ingest = [
        f"PUT {PATH} HTTP/1.1\r\nHost: x\r\n".encode(),
        f"PUT {PATH}?retry=1 HTTP/1.1\r\n".encode(),
        b"PUT /api/v1/runs/co",  # the target so far is under /api/v1/runs
    ]
    other = [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # a scrape is no ingest request
        b"GET /api/v1/gpus HTTP/1.1\r\n",
        b"PUT /api/v1/run",  # its path has not arrived yet
        b"",
    ]
    before = rejected(exporter, "timeout")
    # All at once: each waits out the same --header-timeout (1 s).
    sockets = [socket.create_connection(address(exporter), timeout=10) for _ in ingest + other]
    try:
        for sock, head in zip(sockets, ingest + other, strict=True):
            sock.sendall(head)
        assert [sock.recv(65536).split(b" ", 2)[1] for sock in sockets] == [b"408"] * 7
    finally:
        for sock in sockets:
            sock.close()
    assert rejected(exporter, "timeout") - before == len(ingest)


@pytest.mark.parametrize(("path", "counted"), [(PATH, 1), ("/metrics", 0), ("/", 0)])
def test_a_head_too_large_counts_as_an_ingest_refusal_only_on_the_ingest_path(
    exporter: RunningExporter, path: str, counted: int
) -> None:
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode() + b"a" * 16384 + b"\r\n\r\n"
    before = rejected(exporter, "headers_too_large")
    assert status_and_body(exchange(exporter, request))[0] == 431
    assert rejected(exporter, "headers_too_large") - before == counted


def test_a_malformed_scrape_is_answered_but_not_counted_as_ingest(
    exporter: RunningExporter,
) -> None:
    before = rejected(exporter, "malformed_http")
    for path, counted in ((b"/metrics", 0), (PATH.encode(), 1)):
        answer = exchange(exporter, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        assert status_and_body(answer) == (
            400,
            {"error": "request: not a valid HTTP/1.1 request", "reason": "malformed_http",
             "field": "request"},
        )  # fmt: skip
        assert rejected(exporter, "malformed_http") - before == counted


def test_http_11_without_host_is_400_naming_it(exporter: RunningExporter) -> None:
    request = (
        f"PUT {PATH} HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    )
    status, body = status_and_body(exchange(exporter, request.encode()))
    assert (status, body["field"]) == (400, "header.host")


@pytest.mark.parametrize("run", ["..", "."])
def test_a_dot_segment_is_not_a_run(exporter: RunningExporter, run: str) -> None:
    content = json.dumps(snapshot_body()).encode()
    request = (
        f"PUT /api/v1/runs/{run}/workers/0 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(content)}\r\nConnection: close\r\n\r\n"
    ).encode() + content
    status, body = status_and_body(exchange(exporter, request))
    assert (status, body["field"]) == (422, "path.run")


def test_an_unauthenticated_body_is_not_read_and_the_connection_closes(
    exporter: RunningExporter,
) -> None:
    request = (
        f"PUT {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MIB}\r\n\r\n"
    ).encode()
    with socket.create_connection(address(exporter), timeout=10) as sock:
        sock.sendall(request + b" " * 4096)
        answer = b""
        while chunk := sock.recv(65536):  # ends: the server closed the connection
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b"connection: close" in answer.lower()


def test_refusals_are_logged_at_a_bounded_rate() -> None:
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    with running_exporter(["--simulate", "healthy"], env) as exporter:
        for _ in range(50):
            exchange(exporter, big_header_request(16 * 1024))
            httpx.put(exporter.url + PATH, json=snapshot_body(), timeout=10)  # 401
        _, log = exporter.stop()
    lines = [line for line in log.splitlines() if "ingest request refused" in line]
    assert len(lines) == 2, lines  # one per reason a minute: headers_too_large, unauthorized
