"""The training collector: families of the run store's workers (ingest/store.py), per scrape."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import GpuBackend, GpuDevice
from mirrorwatch.exporter.collectors.base import GpuFamily, counter, non_empty, written
from mirrorwatch.exporter.collectors.worker_lines import FAMILIES, Lines, WorkerLines
from mirrorwatch.exporter.exposition import WrittenFamily
from mirrorwatch.exporter.ingest.errors import RejectionCounter
from mirrorwatch.exporter.ingest.owners import ProcessOwners, Worker
from mirrorwatch.exporter.ingest.replicas import GpuDirectory
from mirrorwatch.exporter.ingest.store import RunStore, WorkerView

log = logging.getLogger(__name__)


class TrainingMetrics:
    """A prometheus_client collector over the run store, beside the GPU collector.

    Replicas are joined to this host's GPUs at scrape time, so a GPU that appears or is lost
    after the push is reflected at once.
    """

    def __init__(
        self,
        store: RunStore,
        backend: GpuBackend,
        rejections: RejectionCounter,
        owners: ProcessOwners | None = None,
    ) -> None:
        self._store = store
        self._backend = backend
        self._rejections = rejections
        self._owners = owners or ProcessOwners()
        self._gpu_failure_logged = False
        # Each known worker's lines, as of its last push; rebuilt per scrape from the
        # store's entries, so it never holds a forgotten worker.
        self._lines: dict[tuple[str, int], WorkerLines] = {}

    def collect(self) -> Iterator[Metric]:
        views = self._store.views()
        if views:
            gpus = self._directory(views)
            yield from self._training(views, gpus)
            yield from self._foreign(views, gpus)
        rejected = counter(names.EXPORTER_INGEST_REJECTED_TOTAL)
        for reason, count in self._rejections.counts().items():
            rejected.add_metric([reason], count)
        yield rejected

    def _training(self, views: Sequence[WorkerView], gpus: GpuDirectory) -> Iterator[Metric]:
        """Every worker's lines, family by family; a family no worker has is left out."""
        families: dict[names.Metric, WrittenFamily] = {}

        def add(row: names.Metric, lines: Lines) -> None:
            family = families.get(row)
            if family is None:
                family = families[row] = written(row)
            family.extend(*lines)

        for view, worker in zip(views, self._worker_lines(views), strict=True):
            add(names.TRAINING_ACTIVE, worker.active(view.active))
            rows = worker.replica_info(gpus)
            if rows[0]:
                add(names.TRAINING_REPLICA_INFO, rows)
            for row, lines in worker.lines.items():
                add(row, lines)
        for row in FAMILIES:
            if row in families:
                yield families[row]

    def _worker_lines(self, views: Sequence[WorkerView]) -> list[WorkerLines]:
        known = self._lines
        fresh: dict[tuple[str, int], WorkerLines] = {}
        workers = []
        for view in views:
            entry = view.entry
            worker = known.get((entry.run, entry.worker))
            if worker is None or worker.entry is not entry:  # an entry is replaced per push
                worker = WorkerLines(entry, worker)
            fresh[(entry.run, entry.worker)] = worker
            workers.append(worker)
        self._lines = fresh  # one assignment: a concurrent scrape sees the old or the new
        return workers

    def _foreign(self, views: Sequence[WorkerView], gpus: GpuDirectory) -> Iterator[Metric]:
        """Per GPU of each active run: the processes on it that are not the run's workers'.

        Only for runs whose every active worker reported its pid and can be matched (see
        owners.py); a GPU that lists no processes gets none either.
        """
        runs: dict[str, tuple[list[Worker], set[str]]] = {}
        unmatched: set[str] = set()
        for view in views:
            if not view.active:
                continue
            entry, snapshot = view.entry, view.entry.snapshot
            workers, uuids = runs.setdefault(entry.run, ([], set()))
            worker = Worker(snapshot.pid, snapshot.pid_namespace) if snapshot.pid else None
            if worker is None or not self._owners.attributable(worker):
                unmatched.add(entry.run)
                continue
            workers.append(worker)
            for device in snapshot.replica_devices:
                gpu = gpus.resolve(device)
                if gpu is not None:
                    uuids.add(gpu.uuid)
        devices = self._devices() if any(uuids for _, uuids in runs.values()) else {}
        count = GpuFamily(names.GPU_FOREIGN_PROCESSES)
        memory = GpuFamily(names.GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES)
        for run, (workers, uuids) in sorted(runs.items()):
            if run in unmatched:
                continue
            for uuid in sorted(uuids):
                gpu_device = devices.get(uuid)
                reading = gpu_device.processes() if gpu_device is not None else None
                if gpu_device is None or reading is None:
                    continue
                own = self._owners.host_pids(workers, (p.pid for p in reading.processes))
                foreign = [p for p in reading.processes if p.pid not in own]
                count.add(gpu_device, len(foreign), run)
                used = [p.used_memory_bytes for p in foreign if p.used_memory_bytes is not None]
                memory.add(gpu_device, sum(used), run)
        yield from non_empty(count, memory)

    def _devices(self) -> dict[str, GpuDevice]:
        try:
            if not self._backend.status().up:
                return {}
            return {gpu.uuid: gpu for gpu in self._backend.gpus()}
        except Exception:  # the GPU backend failing must cost these series only
            if not self._gpu_failure_logged:
                self._gpu_failure_logged = True
                log.exception("cannot list GPUs to find foreign processes")
            return {}

    def _directory(self, views: Sequence[WorkerView]) -> GpuDirectory:
        if not any(view.entry.snapshot.replica_devices for view in views):
            return GpuDirectory(())
        try:
            return GpuDirectory(self._backend.gpus() if self._backend.status().up else ())
        except Exception:  # the GPU backend failing must cost replica_info only, not the scrape
            if not self._gpu_failure_logged:
                self._gpu_failure_logged = True
                log.exception("cannot list GPUs to resolve training replicas")
            return GpuDirectory(())
