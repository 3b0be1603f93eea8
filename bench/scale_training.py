"""Training on every simulated host of the scale bench: workers pushing snapshots of a healthy run.

Each host's GPUs train one run (the runs span --hosts-per-run hosts, as multi-host jobs do) in
workers of at most 16 replicas (the exporter's per-worker limit), one replica per GPU, named by
the GPU's UUID. So every GPU carries `replica_info` and the per-run rules join training to
hardware at the fleet's size, not over an empty set. The pushes are full schema-1 snapshots
with a step-duration and an all-reduce histogram, steps advancing at the same pace everywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.contract.vocabulary import Address

REPLICAS_PER_WORKER = 16
PUSH_INTERVAL_SECONDS = 15.0
STEP_SECONDS = 0.25
ALLREDUCE_SECONDS = 0.05
BATCH_PER_REPLICA = 32


@dataclass(frozen=True)
class Worker:
    exporter: Address
    run: str
    worker: int
    uuids: tuple[str, ...]


def workers(exporters: Sequence[Address], hosts_per_run: int) -> list[Worker]:
    """Every worker of every exporter's host, its replicas on that host's GPUs."""
    found = []
    for index, exporter in enumerate(exporters):
        listing = httpx.get(f"{exporter.url}/api/v1/gpus", timeout=30).json()
        uuids = [gpu["uuid"] for gpu in listing["gpus"]]
        run, host_in_run = divmod(index, hosts_per_run)
        per_host = -(-len(uuids) // REPLICAS_PER_WORKER)
        for slot in range(per_host):
            share = uuids[slot * REPLICAS_PER_WORKER : (slot + 1) * REPLICAS_PER_WORKER]
            found.append(
                Worker(exporter, f"scale-{run}", host_in_run * per_host + slot, tuple(share))
            )
    return found


def histogram(count: int, seconds_each: float) -> dict[str, Any]:
    return {
        "bucket_counts": [count if bound >= seconds_each else 0 for bound in STEP_DURATION_BUCKETS],
        "count": count,
        "sum_seconds": count * seconds_each,
    }


def snapshot(worker: Worker, sequence: int, steps: int) -> dict[str, Any]:
    replicas = len(worker.uuids)
    return {
        "schema": 1,
        "session": f"{worker.run}-{worker.worker}",
        "sequence": sequence,
        "model": "resnet50",
        "strategy": "MultiWorkerMirroredStrategy",
        "replicas": replicas,
        "global_batch_size": BATCH_PER_REPLICA * replicas,
        "steps_total": steps,
        "examples_total": steps * BATCH_PER_REPLICA * replicas,
        "step_duration_seconds": histogram(steps, STEP_SECONDS),
        "allreduce_seconds": histogram(steps, ALLREDUCE_SECONDS),
        "examples_per_second": BATCH_PER_REPLICA * replicas / STEP_SECONDS,
        "epoch": steps // 1000,
        "loss": 1.0 / (1 + steps / 100),
        "replica_devices": [
            {
                "replica": replica,
                "device": f"/job:worker/replica:0/task:{worker.worker}/device:GPU:{replica}",
                "uuid": uuid,
                "memory_current_bytes": 30e9,
                "memory_peak_bytes": 40e9,
            }
            for replica, uuid in enumerate(worker.uuids)
        ],
        "telemetry_dropped_total": 0,
    }


class TrainingLoad:
    """Pushes every worker's snapshot each PUSH_INTERVAL_SECONDS from one thread until stopped."""

    def __init__(self, all_workers: Sequence[Worker]) -> None:
        self._workers = list(all_workers)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._push_all, name="training-load", daemon=True)
        self._started = time.monotonic()
        self.rejected: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _refused(self, what: str) -> None:
        if len(self.rejected) < 5:
            self.rejected.append(what)

    def _push_all(self) -> None:
        sequence = 0
        with httpx.Client(timeout=30) as client:
            while True:
                sequence += 1
                steps = int((time.monotonic() - self._started) / STEP_SECONDS)
                for worker in self._workers:
                    url = f"{worker.exporter.url}/api/v1/runs/{worker.run}/workers/{worker.worker}"
                    try:
                        response = client.put(url, json=snapshot(worker, sequence, steps))
                    except httpx.HTTPError as error:
                        self._refused(f"{url}: {error}")
                        continue
                    if response.is_error:
                        self._refused(f"{url}: {response.status_code} {response.text[:200]}")
                if self._stop.wait(PUSH_INTERVAL_SECONDS):
                    return
