"""The training collector: families of the run store's workers (ingest/store.py), per scrape."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from mirrorwatch.exporter.backend import GpuBackend, GpuDevice
from mirrorwatch.exporter.exposition import label_set, sample_line
from mirrorwatch.exporter.ingest.errors import RejectionCounter
from mirrorwatch.exporter.ingest.owners import ProcessOwners, Worker
from mirrorwatch.exporter.ingest.replicas import GpuDirectory
from mirrorwatch.exporter.ingest.schema import STEP_DURATION_BUCKETS, TrainingSnapshot
from mirrorwatch.exporter.ingest.store import RunStore, WorkerEntry, WorkerView

log = logging.getLogger(__name__)

WORKER = ["run", "worker"]
BUCKET_BOUNDS = [repr(float(bound)) for bound in STEP_DURATION_BUCKETS]  # "0.001", "1.0"


class _Families:
    """One scrape's training families, filled worker by worker."""

    def __init__(self) -> None:
        def gauge(name: str, text: str, extra: Sequence[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"mirrorwatch_training_{name}", text, labels=[*WORKER, *extra])

        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(f"mirrorwatch_training_{name}", text, labels=WORKER)

        self.active = gauge("active", "1 while the worker trains and pushed within the TTL.")
        self.info = gauge(
            "info", "Model and strategy of the worker; always 1.", ["model", "strategy"]
        )
        self.replicas = gauge("replicas", "Replicas in sync on the worker.")
        self.global_batch_size = gauge("global_batch_size", "Examples per step over all replicas.")
        self.steps = counter("steps", "Training steps since the worker's session started.")
        self.examples = counter("examples", "Training examples since the worker's session started.")
        self.step_duration = HistogramMetricFamily(
            "mirrorwatch_training_step_duration_seconds",
            "Wall time of each training step, in seconds.",
            labels=WORKER,
        )
        self.examples_per_second = gauge(
            "examples_per_second", "Training throughput over the recent window, examples/s."
        )
        self.epoch = gauge("epoch", "Current epoch, counted from 0.")
        self.loss = gauge("loss", "Loss of the last training step.")
        self.replica_info = gauge(
            "replica_info",
            "The GPU of this host each replica runs on; uuid matches the GPU series; always 1.",
            ["replica", "gpu", "uuid"],
        )
        self.replica_memory = gauge(
            "replica_memory_bytes",
            "Device memory the replica's allocator holds, current and peak, in bytes.",
            ["replica", "kind"],
        )
        self.speedup = gauge(
            "scaling_speedup", "Throughput on all replicas over throughput on one replica."
        )
        self.efficiency = gauge(
            "scaling_efficiency_ratio", "Scaling speedup divided by the replica count."
        )
        self.dropped = counter(
            "telemetry_dropped", "Snapshots the worker's callback gave up pushing."
        )
        self.last_push = gauge(
            "last_push_timestamp_seconds", "When the exporter received the worker's last push."
        )

    def add(self, view: WorkerView, gpus: GpuDirectory, worker: _WorkerSamples) -> None:
        """The worker's samples: activity and replica -> GPU now, the rest as pushed."""
        self.active.samples.append(Sample(self.active.name, worker.labels, 1 if view.active else 0))
        self.replica_info.samples.extend(worker.replica_info(gpus))
        for name, samples in worker.samples:
            getattr(self, name).samples.extend(samples)

    def add_snapshot(self, entry: WorkerEntry) -> None:
        """What the worker's last accepted push says: it changes only with the next push."""
        snapshot = entry.snapshot
        labels = [entry.run, str(entry.worker)]
        self.info.add_metric([*labels, snapshot.model or "", snapshot.strategy or ""], 1)
        self.replicas.add_metric(labels, snapshot.replicas)
        if snapshot.global_batch_size is not None:
            self.global_batch_size.add_metric(labels, snapshot.global_batch_size)
        self.steps.add_metric(labels, snapshot.steps_total)
        if snapshot.examples_total is not None:
            self.examples.add_metric(labels, snapshot.examples_total)
        self._add_histogram(labels, snapshot)
        if snapshot.examples_per_second is not None:
            self.examples_per_second.add_metric(labels, snapshot.examples_per_second)
        self.epoch.add_metric(labels, snapshot.epoch)
        if snapshot.loss is not None:
            self.loss.add_metric(labels, snapshot.loss)
        for device in snapshot.replica_devices:
            replica = str(device.replica)
            if device.memory_current_bytes is not None:
                self.replica_memory.add_metric(
                    [*labels, replica, "current"], device.memory_current_bytes
                )
            if device.memory_peak_bytes is not None:
                self.replica_memory.add_metric([*labels, replica, "peak"], device.memory_peak_bytes)
        if snapshot.scaling is not None:
            self.speedup.add_metric(labels, snapshot.scaling.speedup)
            self.efficiency.add_metric(labels, snapshot.scaling.efficiency_ratio)
        self.dropped.add_metric(labels, snapshot.telemetry_dropped_total)
        self.last_push.add_metric(labels, entry.received_wall)

    def _add_histogram(self, labels: list[str], snapshot: TrainingSnapshot) -> None:
        durations = snapshot.step_duration_seconds
        buckets: list[tuple[str, float]] = list(
            zip(BUCKET_BOUNDS, map(float, durations.bucket_counts), strict=True)
        )
        buckets.append(("+Inf", float(durations.count)))
        self.step_duration.add_metric(labels, buckets, durations.sum_seconds)

    def __iter__(self) -> Iterator[Metric]:
        for family in vars(self).values():
            if family.samples:
                yield family


class _WorkerSamples:
    """One accepted push's samples, each line rendered once (exposition.sample_line).

    A scrape at the limits holds thousands of training samples, and building and rendering
    them was most of its time; a worker's push changes them at most once per push, so they
    are built then (on the first scrape after it) and only activity and the replica -> GPU
    join are redone per scrape.
    """

    def __init__(self, entry: WorkerEntry, scratch: _Families) -> None:
        # ``scratch`` is shared by the workers built in one scrape: making the families anew
        # for each worker (name checks and all) cost more than the samples themselves.
        self.entry = entry
        self.labels = label_set({"run": entry.run, "worker": str(entry.worker)})
        families = vars(scratch)
        start = {name: len(family.samples) for name, family in families.items()}
        scratch.add_snapshot(entry)
        self.samples = [
            (name, [sample_line(s.name, s.labels, s.value) for s in added])
            for name, added in (
                (name, family.samples[start[name] :]) for name, family in families.items()
            )
            if added
        ]
        self._replica_info: tuple[object, list[Sample]] | None = None

    def replica_info(self, gpus: GpuDirectory) -> list[Sample]:
        """The replica -> GPU rows on these GPUs: resolved again only when the GPUs change."""
        known = self._replica_info
        if known is not None and known[0] == gpus.key:
            return known[1]
        name = "mirrorwatch_training_replica_info"
        samples = []
        for device in self.entry.snapshot.replica_devices:
            gpu = gpus.resolve(device)
            if gpu is not None:
                replica = {"replica": str(device.replica), "gpu": str(gpu.index), "uuid": gpu.uuid}
                samples.append(sample_line(name, {**self.labels, **replica}, 1))
        self._replica_info = (gpus.key, samples)  # one assignment, as in _worker_samples
        return samples


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
        # Each known worker's samples, as of its last push; rebuilt per scrape from the
        # store's entries, so it never holds a forgotten worker.
        self._samples: dict[tuple[str, int], _WorkerSamples] = {}

    def collect(self) -> Iterator[Metric]:
        views = self._store.views()
        if views:
            families = _Families()
            gpus = self._directory(views)
            for view, worker in zip(views, self._worker_samples(views), strict=True):
                families.add(view, gpus, worker)
            yield from families
            yield from self._foreign(views, gpus)
        rejected = CounterMetricFamily(
            "mirrorwatch_exporter_ingest_rejected",
            "Training telemetry pushes and deletes the ingest API refused, by reason.",
            labels=["reason"],
        )
        for reason, count in self._rejections.counts().items():
            rejected.add_metric([reason], count)
        yield rejected

    def _worker_samples(self, views: Sequence[WorkerView]) -> list[_WorkerSamples]:
        known = self._samples
        fresh: dict[tuple[str, int], _WorkerSamples] = {}
        workers = []
        scratch: _Families | None = None
        for view in views:
            entry = view.entry
            worker = known.get((entry.run, entry.worker))
            if worker is None or worker.entry is not entry:  # an entry is replaced per push
                scratch = scratch or _Families()
                worker = _WorkerSamples(entry, scratch)
            fresh[(entry.run, entry.worker)] = worker
            workers.append(worker)
        self._samples = fresh  # one assignment: a concurrent scrape sees the old or the new
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
        count = GaugeMetricFamily(
            "mirrorwatch_gpu_foreign_processes",
            "Processes on a GPU of the run that are not the run's own workers.",
            labels=["gpu", "uuid", "run"],
        )
        memory = GaugeMetricFamily(
            "mirrorwatch_gpu_foreign_processes_memory_used_bytes",
            "Device memory those processes use, in bytes (where NVML reports it).",
            labels=["gpu", "uuid", "run"],
        )
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
                labels = [str(gpu_device.index), uuid, run]
                count.add_metric(labels, len(foreign))
                used = [p.used_memory_bytes for p in foreign if p.used_memory_bytes is not None]
                memory.add_metric(labels, sum(used))
        for family in (count, memory):
            if family.samples:
                yield family

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
