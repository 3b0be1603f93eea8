"""A scrape that holds every family the exporter can serve: the golden `every-family.prom`.

Two fixed GPUs between them have every reading (processes, GPM, XIDs, NVLink, topology, MIG
with GPM), a training worker pushes a snapshot with every optional field, a second one runs
on them as a foreign process, and one push is refused, all through the real app and its
/metrics route at a fixed clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastapi.testclient import TestClient

from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.backend import (
    GpmReading,
    GpuProcess,
    GpuProcesses,
    MemoryBytes,
    MigDevice,
    PeerLink,
)
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import BUS0, BUS1, UUID0, UUID1, FakeClock, snapshot_body
from tests.exporter.static_gpu import GIB, StaticBackend, StaticGpu

GPM = GpmReading(0.5, 0.25, 0.125, 0.375)
WORKER_PID = 4242


@dataclass
class MigGpu(StaticGpu):
    """A StaticGpu with MIG on and one MIG device."""

    def mig_enabled(self) -> bool | None:
        return True

    def mig_devices(self) -> Sequence[MigDevice]:
        memory = MemoryBytes(10 * GIB, 40 * GIB)
        return (MigDevice("MIG-11111111-2222-3333", 1, 0, "3g.40gb", memory, 1, GPM),)


def backend() -> StaticBackend:
    processes = GpuProcesses(
        counts={"compute": 2, "graphics": 0},
        processes=(
            GpuProcess(WORKER_PID, "python", "compute", 30 * GIB, 0.9),
            GpuProcess(999, "other", "compute", 2 * GIB, 0.05),
        ),
    )
    return StaticBackend(
        [
            StaticGpu(
                index=0,
                uuid=UUID0,
                pci_bus_id=BUS0,
                process_list=processes,
                gpm_reading=GPM,
                xids={79: 1.0},
                xid_last_events={79: 1_700_000_500.0},
                peer_links=(PeerLink(1, "nvlink"),),
            ),
            MigGpu(index=1, uuid=UUID1, pci_bus_id=BUS1, peer_links=(PeerLink(0, "nvlink"),)),
        ]
    )


def exposition() -> str:
    """The app's /metrics text, without the collectors' wall-clock durations."""
    histogram = {
        "bucket_counts": [0 if bound < 0.04 else 100 for bound in STEP_DURATION_BUCKETS],
        "count": 100,
        "sum_seconds": 1.0,
    }
    body = snapshot_body(
        pid=WORKER_PID,
        pid_namespace=INIT_PID_NAMESPACE,
        allreduce_seconds=histogram,
        gradient_bytes=4 * 25_557_032,  # ResNet-50's float32 parameters
        scaling={
            "speedup": 1.8,
            "efficiency_ratio": 0.9,
            "baseline_examples_per_second": 100.0,
            "examples_per_second": 180.0,
        },
    )
    app = create_app(Settings(run_ttl=60), backend(), FakeClock())
    with TestClient(app, client=("127.0.0.1", 50000)) as client:
        assert client.put("/api/v1/runs/r1/workers/0", json=body).status_code in (200, 201)
        assert client.put("/api/v1/runs/r1/workers/1", json={"schema": 2}).status_code == 422
        text = client.get("/metrics").text
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if not line.startswith("mirrorwatch_exporter_collector_duration_seconds{")
    )
