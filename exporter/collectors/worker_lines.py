"""Each worker's training sample lines, written once per accepted push.

A scrape at the limits holds thousands of training samples, and building them as
prometheus_client samples and rendering those was most of a scrape's time; a worker's lines
change only with its next push, so they are written then (on the first scrape after it),
straight from the snapshot, by the GPU families' line writer (exposition.Series). A series'
``name{labels} `` is the same from push to push (labels are the run, the worker, a replica, a
GPU), so each push takes the worker's series from its previous push where the same and only
writes the values anew. Activity and the replica -> GPU join are per scrape.

Measured at the default ingest limits (64 workers of 16 replicas, 8 stand-in GPUs;
`bench/writer_bench.py`, bench/results/writer.json): a scrape costs 2.3 ms with the lines
kept from push to push, 12 ms when they are written on every scrape ("push_lines"); the scrape
after every worker pushed, 17 ms with the series taken from the previous push, 46 ms without
("push_series"); the replica rows kept while the GPUs stay the same save 1.3 ms of 2.6
("replica_rows").
"""

from __future__ import annotations

from collections.abc import Iterable

from mirrorwatch.contract import metrics as names
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.exposition import Point, Series
from mirrorwatch.exporter.ingest.replicas import GpuDirectory
from mirrorwatch.exporter.ingest.schema import StepDurations
from mirrorwatch.exporter.ingest.store import WorkerEntry

# In the order a scrape lists them.
FAMILIES = (
    names.TRAINING_ACTIVE,
    names.TRAINING_INFO,
    names.TRAINING_REPLICAS,
    names.TRAINING_GLOBAL_BATCH_SIZE,
    names.TRAINING_STEPS_TOTAL,
    names.TRAINING_EXAMPLES_TOTAL,
    names.TRAINING_STEP_DURATION_SECONDS,
    names.TRAINING_ALLREDUCE_SECONDS,
    names.TRAINING_EXAMPLES_PER_SECOND,
    names.TRAINING_GRADIENT_BYTES,
    names.TRAINING_EPOCH,
    names.TRAINING_LOSS,
    names.TRAINING_REPLICA_INFO,
    names.TRAINING_REPLICA_MEMORY_BYTES,
    names.TRAINING_SCALING_SPEEDUP,
    names.TRAINING_SCALING_EFFICIENCY_RATIO,
    names.TRAINING_TELEMETRY_DROPPED_TOTAL,
    names.TRAINING_LAST_PUSH_TIMESTAMP_SECONDS,
)
# The `le` of each bucket as prometheus_client writes a bound ("0.001", "1.0"), +Inf last.
BUCKET_BOUNDS = (*(repr(float(bound)) for bound in STEP_DURATION_BUCKETS), "+Inf")
_MEMORY_KINDS = ("current", "peak")
_INFO_LABELS = names.TRAINING_INFO.labels[len(names.WORKER) :]
_MEMORY_LABELS = names.TRAINING_REPLICA_MEMORY_BYTES.labels[len(names.WORKER) :]
_REPLICA_LABELS = names.TRAINING_REPLICA_INFO.labels[len(names.WORKER) :]
_BUCKET_LABELS = ("le",)

# A worker's series by its name and its label values beyond run and worker (the name fixes
# the label names).
SeriesKey = tuple[str, tuple[str, ...]]
# A family's lines for one worker, and the series and values they were written from, side by
# side. The lines are the series' own (each keeps its last), not joined: a joined copy would
# double the text kept.
Lines = tuple[list[str], list[Series], list[float]]


class WorkerLines:
    """One accepted push's sample lines, by family, and the per-scrape ones.

    ``previous``: the same worker's lines as of its previous push, whose series are reused;
    a push only reads its predecessor's, so a stale or concurrent one changes nothing.
    """

    def __init__(self, entry: WorkerEntry, previous: WorkerLines | None = None) -> None:
        self.entry = entry
        self._ids = (entry.run, str(entry.worker))
        self._previous = previous._series if previous is not None else {}
        # The series this push's lines use (bounded by them), for the next push.
        self._series: dict[SeriesKey, Series] = {}
        snapshot = entry.snapshot
        lines: dict[names.Metric, Lines] = {}

        def single(metric: names.Metric, value: float | None) -> None:
            if value is not None:
                lines[metric] = self._write([(self._get(metric), value)])

        info = (snapshot.model or "", snapshot.strategy or "")
        lines[names.TRAINING_INFO] = self._write(
            [(self._get(names.TRAINING_INFO, _INFO_LABELS, info), 1)]
        )
        single(names.TRAINING_REPLICAS, snapshot.replicas)
        single(names.TRAINING_GLOBAL_BATCH_SIZE, snapshot.global_batch_size)
        single(names.TRAINING_STEPS_TOTAL, snapshot.steps_total)
        single(names.TRAINING_EXAMPLES_TOTAL, snapshot.examples_total)
        duration = names.TRAINING_STEP_DURATION_SECONDS
        lines[duration] = self._write(self._histogram(duration, snapshot.step_duration_seconds))
        if snapshot.allreduce_seconds is not None:
            allreduce = names.TRAINING_ALLREDUCE_SECONDS
            lines[allreduce] = self._write(self._histogram(allreduce, snapshot.allreduce_seconds))
        single(names.TRAINING_EXAMPLES_PER_SECOND, snapshot.examples_per_second)
        single(names.TRAINING_GRADIENT_BYTES, snapshot.gradient_bytes)
        single(names.TRAINING_EPOCH, snapshot.epoch)
        single(names.TRAINING_LOSS, snapshot.loss)
        memory: list[Point] = []
        for device in snapshot.replica_devices:
            replica = str(device.replica)
            values = (device.memory_current_bytes, device.memory_peak_bytes)
            for kind, value in zip(_MEMORY_KINDS, values, strict=True):
                if value is not None:
                    metric = names.TRAINING_REPLICA_MEMORY_BYTES
                    memory.append((self._get(metric, _MEMORY_LABELS, (replica, kind)), value))
        if memory:
            lines[names.TRAINING_REPLICA_MEMORY_BYTES] = self._write(memory)
        if snapshot.scaling is not None:
            single(names.TRAINING_SCALING_SPEEDUP, snapshot.scaling.speedup)
            single(names.TRAINING_SCALING_EFFICIENCY_RATIO, snapshot.scaling.efficiency_ratio)
        single(names.TRAINING_TELEMETRY_DROPPED_TOTAL, snapshot.telemetry_dropped_total)
        single(names.TRAINING_LAST_PUSH_TIMESTAMP_SECONDS, entry.received_wall)
        self.lines = lines
        self._active = self._get(names.TRAINING_ACTIVE)
        self._replica_info: tuple[object, Lines] | None = None

    def active(self, active: bool) -> Lines:
        value = 1 if active else 0
        return [self._active.line(value)], [self._active], [value]

    def replica_info(self, gpus: GpuDirectory) -> Lines:
        """The replica -> GPU rows on these GPUs: written again only when the GPUs change."""
        known = self._replica_info
        if known is not None and known[0] == gpus.key:
            return known[1]
        rows: list[Point] = []
        for device in self.entry.snapshot.replica_devices:
            gpu = gpus.resolve(device)
            if gpu is not None:
                values = (str(device.replica), str(gpu.index), gpu.uuid)
                rows.append((self._get(names.TRAINING_REPLICA_INFO, _REPLICA_LABELS, values), 1))
        written = self._write(rows)
        self._replica_info = (gpus.key, written)  # one assignment: concurrent scrapes see either
        return written

    def _get(
        self, metric: str, extra_names: tuple[str, ...] = (), extra: tuple[str, ...] = ()
    ) -> Series:
        """The series of ``metric`` (a histogram's part) for this worker and ``extra`` labels."""
        key = (metric, extra)
        series = self._series.get(key) or self._previous.get(key)
        if series is None:
            series = Series(str(metric), (*names.WORKER, *extra_names), (*self._ids, *extra))
        self._series[key] = series
        return series

    def _histogram(self, metric: names.Metric, durations: StepDurations) -> list[Point]:
        """Each bucket's point, then count and sum, as prometheus_client orders them."""
        bucket = metric.part("bucket")
        counts: Iterable[float] = (*durations.bucket_counts, durations.count)
        points: list[Point] = [
            (self._get(bucket, _BUCKET_LABELS, (bound,)), count)
            for bound, count in zip(BUCKET_BOUNDS, counts, strict=True)
        ]
        points.append((self._get(metric.part("count")), durations.count))
        points.append((self._get(metric.part("sum")), durations.sum_seconds))
        return points

    @staticmethod
    def _write(points: list[Point]) -> Lines:
        lines = [series.line(value) for series, value in points]
        return lines, [series for series, _ in points], [value for _, value in points]
