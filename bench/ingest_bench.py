"""Ingest benchmark: training snapshots per second into the real exporter over loopback HTTP.

The exporter runs as its own process (simulated 'healthy' host, bearer token configured); each
of ``--workers`` client processes plays one training worker, pushing full schema-1 snapshots
with a rising sequence over one keep-alive connection. Reported: snapshots/s over all workers,
per-push latency, and the exporter's CPU per snapshot. The client processes share this
machine's cores with the exporter, so the number is a floor for the exporter alone.

    python bench/ingest_bench.py --out bench/results/ingest.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from tests.exporter.exporter_process import running_exporter

TICKS = os.sysconf("SC_CLK_TCK")
TOKEN = "bench-token"
RUN = "bench"
TARGET_SNAPSHOTS_PER_SECOND = 2000.0
WARMUP_PUSHES = 200


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def server_stack() -> dict[str, str]:
    """What uvicorn picks in this environment (its "auto"): the HTTP parser and event loop."""
    return {
        "uvicorn": importlib.metadata.version("uvicorn"),
        "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
    }


def snapshot(worker: int, sequence: int) -> bytes:
    """A realistic push: two replicas on GPUs, every optional field filled."""
    steps = sequence * 10
    body = {
        "schema": 1,
        "session": f"bench-{worker}",
        "sequence": sequence,
        "model": "resnet50",
        "strategy": "MirroredStrategy",
        "replicas": 2,
        "global_batch_size": 256,
        "steps_total": steps,
        "examples_total": steps * 256,
        "step_duration_seconds": {
            "bucket_counts": [0 if bound < 0.1 else steps for bound in STEP_DURATION_BUCKETS],
            "count": steps,
            "sum_seconds": steps * 0.08,
        },
        "examples_per_second": 3200.0,
        "epoch": sequence // 100,
        "loss": 1.0 / (1 + sequence),
        "replica_devices": [
            {
                "replica": replica,
                "device": f"/job:worker/replica:0/task:{worker}/device:GPU:{replica}",
                "pci_bus_id": f"0000:{0x1B + replica:02x}:00.0",
                "memory_current_bytes": 40e9,
                "memory_peak_bytes": 60e9,
            }
            for replica in range(2)
        ],
        "telemetry_dropped_total": 0,
    }
    return json.dumps(body).encode()


def request_bytes(worker: int, sequence: int) -> bytes:
    """One whole HTTP/1.1 PUT, prebuilt so the load generator spends little CPU per push."""
    body = snapshot(worker, sequence)
    head = (
        f"PUT /api/v1/runs/{RUN}/workers/{worker} HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"Authorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class KeepAliveClient:
    """A minimal HTTP/1.1 client over one kept-alive connection (like wrk, unlike httpx).

    It reads each answer whole by its Content-Length before sending the next request.
    """

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def exchange(self, request: bytes) -> int:
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        return int(lines[0].split()[1])

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the exporter closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def push_worker(port: int, worker: int, pushes: int, start: Any, results: Any) -> None:
    """One training worker: warm up, wait for the others, then push and time each push."""
    client = KeepAliveClient(port)
    requests = [
        request_bytes(worker, sequence) for sequence in range(1, WARMUP_PUSHES + pushes + 1)
    ]
    for request in requests[:WARMUP_PUSHES]:
        client.exchange(request)
    start.wait()
    latencies = []
    began = time.perf_counter()
    for request in requests[WARMUP_PUSHES:]:
        sent = time.perf_counter()
        status = client.exchange(request)
        latencies.append(time.perf_counter() - sent)
        if status != 200:
            raise RuntimeError(f"push answered {status}")
    results.put((began, time.perf_counter(), latencies))
    client.close()


def measure(workers: int, pushes: int) -> dict[str, Any]:
    args = ["--simulate", "healthy", "--log-level", "warning"]
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    with running_exporter(args, env, wait_for="/readyz") as exporter:
        port = int(exporter.url.rsplit(":", 1)[1])
        start = multiprocessing.Barrier(workers + 1)
        results: Any = multiprocessing.Queue()
        clients = [
            multiprocessing.Process(target=push_worker, args=(port, w, pushes, start, results))
            for w in range(workers)
        ]
        for client in clients:
            client.start()
        start.wait()  # every client has warmed up
        cpu_before = process_cpu_seconds(exporter.process.pid)
        outcomes = [results.get(timeout=300) for _ in clients]
        cpu = process_cpu_seconds(exporter.process.pid) - cpu_before
        for client in clients:
            client.join()
        text = httpx.get(exporter.url + "/metrics", timeout=10).text
    wall = max(end for _, end, _ in outcomes) - min(began for began, _, _ in outcomes)
    latencies = sorted(latency * 1000 for _, _, worker in outcomes for latency in worker)
    total = workers * pushes
    final_steps = (WARMUP_PUSHES + pushes) * 10
    published = all(
        f'mirrorwatch_training_steps_total{{run="{RUN}",worker="{w}"}} {float(final_steps)}' in text
        for w in range(workers)
    )
    return {
        "workers": workers,
        "snapshots": total,
        "snapshot_bytes": len(snapshot(0, WARMUP_PUSHES + pushes)),
        "seconds": round(wall, 3),
        "snapshots_per_second": round(total / wall, 1),
        "latency_ms_p50": round(statistics.median(latencies), 3),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1], 3),
        "exporter_cpu_us_per_snapshot": round(cpu / total * 1e6, 1),
        "final_totals_published": published,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/ingest.json"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pushes", type=int, default=5000, help="timed pushes per worker")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs, each on a fresh exporter; median judged"
    )
    args = parser.parse_args()
    rows = [measure(args.workers, args.pushes) for _ in range(args.repeats)]
    median = statistics.median(row["snapshots_per_second"] for row in rows)
    met = median >= TARGET_SNAPSHOTS_PER_SECOND and all(
        row["final_totals_published"] for row in rows
    )
    result = {
        "benchmark": "training snapshot ingest: PUT /api/v1/runs/{run}/workers/{worker} over "
        "loopback HTTP, keep-alive, real exporter process (simulated 'healthy' host, token)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "server_stack": server_stack(),
        "load_generator": "one process per worker, raw keep-alive socket, prebuilt requests",
        "warmup_pushes_per_worker": WARMUP_PUSHES,
        "target_snapshots_per_second": TARGET_SNAPSHOTS_PER_SECOND,
        "median_snapshots_per_second": median,
        "met": met,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'workers':>7} {'snapshots':>9} {'bytes':>6} {'seconds':>8} {'snap/s':>8} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'cpu us/snap':>11} {'totals ok':>9}"
    )
    for row in rows:
        print(
            f"{row['workers']:>7} {row['snapshots']:>9} {row['snapshot_bytes']:>6} "
            f"{row['seconds']:>8} {row['snapshots_per_second']:>8} {row['latency_ms_p50']:>7} "
            f"{row['latency_ms_p99']:>7} {row['exporter_cpu_us_per_snapshot']:>11} "
            f"{'yes' if row['final_totals_published'] else 'NO':>9}"
        )
    verdict = "met" if met else "NOT met"
    print(
        f"median {median:.0f} snapshots/s; target >= {TARGET_SNAPSHOTS_PER_SECOND:.0f}: {verdict}"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
