"""The workers' pids: accepted in the snapshot, and used to publish the foreign processes on a
run's GPUs, across PID namespaces where the exporter can see them."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mirrorwatch.contract.metrics import (
    GPU_FOREIGN_PROCESSES,
    GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES,
)
from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.backend import GpuProcess, GpuProcesses
from mirrorwatch.exporter.collectors.training import TrainingMetrics
from mirrorwatch.exporter.ingest.errors import RejectionCounter
from mirrorwatch.exporter.ingest.owners import ProcessOwners, Worker
from mirrorwatch.exporter.ingest.schema import TrainingSnapshot
from mirrorwatch.exporter.ingest.store import Limits, RunStore
from mirrorwatch.exporter.logs import RejectionLog
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import (
    BUS0,
    BUS1,
    UUID0,
    UUID1,
    FakeClock,
    labels,
    parse_series,
    snapshot_body,
)
from tests.exporter.static_gpu import GIB, StaticBackend, StaticGpu

URL = "/api/v1/runs/r1/workers/0"
LOOPBACK = ("127.0.0.1", 50000)
CONTAINER_NS = 4026532999
FOREIGN = GPU_FOREIGN_PROCESSES
FOREIGN_MEMORY = GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES


def on_gpu(*processes: tuple[int, float | None]) -> GpuProcesses:
    return GpuProcesses(
        counts={"compute": len(processes), "graphics": 0},
        processes=tuple(GpuProcess(pid, "p", "compute", memory) for pid, memory in processes),
    )


@pytest.fixture
def backend() -> StaticBackend:
    # The run's worker is pid 4242 on both GPUs; GPU 1 (UUID0) also has pid 999 on it.
    return StaticBackend(
        [
            StaticGpu(index=0, uuid=UUID1, pci_bus_id=BUS1, process_list=on_gpu((4242, 30 * GIB))),
            StaticGpu(
                index=1,
                uuid=UUID0,
                pci_bus_id=BUS0,
                process_list=on_gpu((4242, 30 * GIB), (999, 2 * GIB), (1000, None)),
            ),
        ]
    )


@pytest.fixture
def client(backend: StaticBackend) -> Iterator[TestClient]:
    app = create_app(Settings(run_ttl=60), backend, FakeClock())
    with TestClient(app, client=LOOPBACK) as client:
        yield client


def series(client: TestClient, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return parse_series(client.get("/metrics").text).get(name, {})


def host_worker(**changes: Any) -> dict[str, Any]:
    return snapshot_body(**{"pid": 4242, "pid_namespace": INIT_PID_NAMESPACE, **changes})


def test_the_pid_and_its_namespace_are_accepted_and_kept(client: TestClient) -> None:
    assert client.put(URL, json=host_worker()).status_code in (200, 201)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pid", 0),
        ("pid", -5),
        ("pid", 2**22 + 1),
        ("pid", "4242"),
        ("pid", 1.5),
        ("pid_namespace", 0),
        ("pid_namespace", 2**32),
        ("pid_namespace", True),
    ],
)
def test_a_bad_pid_or_namespace_is_422_naming_the_field(
    client: TestClient, field: str, value: object
) -> None:
    response = client.put(URL, json=snapshot_body(**{field: value}))
    assert response.status_code == 422
    assert response.json()["field"] == f"body.{field}"
    assert response.json()["error"].startswith(f"body.{field}:")


def test_processes_that_are_not_the_runs_are_counted_per_gpu_of_the_run(
    client: TestClient,
) -> None:
    client.put(URL, json=host_worker())
    gpu1 = labels(gpu="1", uuid=UUID0, run="r1")
    gpu0 = labels(gpu="0", uuid=UUID1, run="r1")
    assert series(client, FOREIGN) == {gpu0: 0.0, gpu1: 2.0}
    # Memory NVML does not report (pid 1000) counts as a process, not as bytes.
    assert series(client, FOREIGN_MEMORY) == {gpu0: 0.0, gpu1: 2.0 * GIB}


def test_without_the_workers_pid_no_foreign_series_are_published(client: TestClient) -> None:
    client.put(URL, json=snapshot_body())
    assert series(client, FOREIGN) == {}


def test_a_finished_worker_has_no_foreign_series(client: TestClient) -> None:
    client.put(URL, json=host_worker(active=False))
    assert series(client, FOREIGN) == {}


def test_a_gpu_that_lists_no_processes_gets_no_foreign_series(
    client: TestClient, backend: StaticBackend
) -> None:
    gpu = backend.devices[0]
    assert isinstance(gpu, StaticGpu)
    gpu.process_list = None  # NVML cannot list processes there
    client.put(URL, json=host_worker())
    assert set(series(client, FOREIGN)) == {labels(gpu="1", uuid=UUID0, run="r1")}


def test_two_runs_on_one_gpu_are_each_others_foreign_process(client: TestClient) -> None:
    client.put(URL, json=host_worker())
    other = host_worker(pid=999, replica_devices=[snapshot_body()["replica_devices"][0]])
    client.put("/api/v1/runs/r2/workers/0", json=other)
    found = series(client, FOREIGN)
    assert found[labels(gpu="1", uuid=UUID0, run="r1")] == 2.0  # 999 and 1000
    assert found[labels(gpu="1", uuid=UUID0, run="r2")] == 2.0  # 4242 and 1000


# --- across PID namespaces ------------------------------------------------------------------


def fake_proc(tmp_path: Path, own: int, processes: dict[int, tuple[int, str]]) -> Path:
    """A procfs with the exporter's own namespace and, per host pid, (namespace, NSpid)."""
    proc = tmp_path / "proc"
    (proc / "self" / "ns").mkdir(parents=True)
    os.symlink(f"pid:[{own}]", proc / "self" / "ns" / "pid")
    for pid, (namespace, nspid) in processes.items():
        (proc / str(pid) / "ns").mkdir(parents=True)
        os.symlink(f"pid:[{namespace}]", proc / str(pid) / "ns" / "pid")
        (proc / str(pid) / "status").write_text(f"Name:\tpython3\nNSpid:\t{nspid}\n")
    return proc


def test_a_container_worker_is_found_by_its_namespace_and_inner_pid(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        INIT_PID_NAMESPACE,
        {
            12345: (CONTAINER_NS, "12345\t7"),  # the worker: pid 7 in its container
            12346: (CONTAINER_NS + 1, "12346\t7"),  # pid 7 of another container
            7: (INIT_PID_NAMESPACE, "7"),  # host pid 7
        },
    )
    owners = ProcessOwners(proc)
    assert owners.sees_host_processes
    worker = Worker(pid=7, namespace=CONTAINER_NS)
    assert owners.host_pids([worker], [12345, 12346, 7]) == {12345}


def test_a_host_worker_is_matched_by_its_pid_wherever_the_exporter_runs(tmp_path: Path) -> None:
    owners = ProcessOwners(fake_proc(tmp_path, CONTAINER_NS, {}))
    worker = Worker(pid=4242, namespace=INIT_PID_NAMESPACE)
    assert owners.attributable(worker)
    assert owners.host_pids([worker], [4242, 999]) == {4242}


def test_without_the_host_pid_namespace_a_container_worker_cannot_be_matched(
    tmp_path: Path,
) -> None:
    owners = ProcessOwners(fake_proc(tmp_path, CONTAINER_NS + 5, {}))
    assert not owners.sees_host_processes
    assert not owners.attributable(Worker(pid=7, namespace=CONTAINER_NS))
    assert not owners.attributable(Worker(pid=7, namespace=None))


def test_an_unmatchable_run_gets_no_foreign_series_rather_than_all_foreign(
    tmp_path: Path, backend: StaticBackend
) -> None:
    store = RunStore(Limits.from_settings(Settings()), FakeClock())
    snapshot = TrainingSnapshot.model_validate(snapshot_body(pid=7, pid_namespace=CONTAINER_NS))
    store.put("r1", 0, snapshot)
    owners = ProcessOwners(fake_proc(tmp_path, CONTAINER_NS + 5, {}))
    rejections = RejectionCounter(RejectionLog(logging.getLogger("test")))
    names = {
        family.name for family in TrainingMetrics(store, backend, rejections, owners).collect()
    }
    assert FOREIGN not in names
    assert "mirrorwatch_training_replica_info" in names
