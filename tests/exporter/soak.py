"""A soak against the real exporter process: scrapes, pushes and hostile requests together.

Every second: a scrape of /metrics, pushes from a few workers, and a round of hostile requests
(an oversized header, a head that never completes, an unauthenticated 1 MiB body, a heavy
valid-shape body, garbage bytes). The exporter's RSS is sampled after a warm-up and at the
end; the test (test_soak.py) and the bench (bench/soak_bench.py) judge the growth.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.exporter.exporter_process import RunningExporter
from tests.exporter.ingest_snapshots import snapshot_body

TOKEN = "soak-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORKERS = 4


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class SoakResult:
    seconds: float
    rss_after_warmup_bytes: int = 0
    rss_end_bytes: int = 0
    scrapes: int = 0
    pushes: int = 0
    hostile: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def rss_growth_bytes(self) -> int:
        return self.rss_end_bytes - self.rss_after_warmup_bytes


def _raw(address: tuple[str, int], data: bytes, wait: bool = True) -> int:
    """Send ``data`` on a fresh connection and return the answer's status (0: none)."""
    with socket.create_connection(address, timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close mid-send
            sock.sendall(data)
        if not wait:
            return 0
        answer = b""
        try:
            while (chunk := sock.recv(65536)) and b"\r\n" not in answer:
                answer += chunk
        except OSError:
            pass
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _hostile_round(address: tuple[str, int], path: str) -> list[int]:
    heavy = "{" + ",".join(f'"k{i}": "{"v" * 10}"' for i in range(20_000)) + "}"
    return [
        _raw(address, f"PUT {path} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode() + b"a" * 2**20),
        _raw(
            address,
            f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {2**20}\r\n\r\n".encode()
            + b" " * 2**16,
        ),
        _raw(
            address,
            f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(heavy)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + heavy.encode(),
        ),
        _raw(address, b"\x16\x03\x01 not http at all\r\n\r\n"),
    ]


def soak(exporter: RunningExporter, seconds: float, warmup: float = 3.0) -> SoakResult:
    """Drive ``exporter`` for ``warmup`` + ``seconds``; RSS after the warm-up and at the end."""
    host, port = exporter.url.removeprefix("http://").split(":")
    address = (host, int(port))
    result = SoakResult(seconds=seconds)
    slow: list[socket.socket] = []  # heads that never complete: the head timeout ends them
    sequence = 0
    started = time.monotonic()
    warm_until = started + warmup
    end = warm_until + seconds
    with httpx.Client(base_url=exporter.url, timeout=10) as client:
        while time.monotonic() < end:
            tick = time.monotonic()
            if result.rss_after_warmup_bytes == 0 and tick >= warm_until:
                result.rss_after_warmup_bytes = rss_bytes(exporter.process.pid)
            scrape = client.get("/metrics")
            result.scrapes += 1
            if scrape.status_code != 200:
                result.failures.append(f"scrape {scrape.status_code}")
            for _ in range(10):
                sequence += 1
                for worker in range(WORKERS):
                    body = snapshot_body(sequence=sequence, steps_total=sequence * 10)
                    response = client.put(
                        f"/api/v1/runs/soak/workers/{worker}",
                        content=json.dumps(body),
                        headers={**AUTH, "Content-Type": "application/json"},
                    )
                    result.pushes += 1
                    if response.status_code != 200:
                        result.failures.append(f"push {response.status_code}")
            for status in _hostile_round(address, "/api/v1/runs/soak/workers/9"):
                result.hostile += 1
                result.statuses[str(status)] = result.statuses.get(str(status), 0) + 1
            sock = socket.create_connection(address, timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(sock)
            while len(slow) > 20:
                slow.pop(0).close()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    for sock in slow:
        sock.close()
    time.sleep(0.5)
    result.rss_end_bytes = rss_bytes(exporter.process.pid)
    return result
