"""The training families and each worker's sample lines, written once per accepted push.

A scrape at the limits holds thousands of training samples, and building them as
prometheus_client samples and rendering those was most of a scrape's time; a worker's lines
change only with its next push, so they are written then (on the first scrape after it),
straight from the snapshot. A line's ``name{labels} `` is the same from push to push (labels
are the run, the worker, a replica, a GPU), so each is kept from the worker's previous push
and only the values are written anew. Activity and the replica -> GPU join are per scrape.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from mirrorwatch.contract import metrics as names
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.exposition import (
    LabelTemplate,
    escape_label_value,
    line_prefix,
    sample_text,
)
from mirrorwatch.exporter.ingest.replicas import GpuDirectory
from mirrorwatch.exporter.ingest.schema import StepDurations
from mirrorwatch.exporter.ingest.store import WorkerEntry

Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True)
class Family:
    """One training family: its name (a counter's without ``_total``), type and help."""

    name: str
    kind: Kind
    documentation: str

    @property
    def sample(self) -> str:
        """The name its samples carry (a histogram's get ``_bucket``, ``_count``, ``_sum``)."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _family(metric: names.Metric) -> Family:
    """The family of ``metric``'s row of the table of metric names."""
    return Family(metric.family, metric.type, metric.help)


ACTIVE = _family(names.TRAINING_ACTIVE)
INFO = _family(names.TRAINING_INFO)
REPLICAS = _family(names.TRAINING_REPLICAS)
GLOBAL_BATCH_SIZE = _family(names.TRAINING_GLOBAL_BATCH_SIZE)
STEPS = _family(names.TRAINING_STEPS_TOTAL)
EXAMPLES = _family(names.TRAINING_EXAMPLES_TOTAL)
STEP_DURATION = _family(names.TRAINING_STEP_DURATION_SECONDS)
ALLREDUCE = _family(names.TRAINING_ALLREDUCE_SECONDS)
EXAMPLES_PER_SECOND = _family(names.TRAINING_EXAMPLES_PER_SECOND)
GRADIENT_BYTES = _family(names.TRAINING_GRADIENT_BYTES)
EPOCH = _family(names.TRAINING_EPOCH)
LOSS = _family(names.TRAINING_LOSS)
REPLICA_INFO = _family(names.TRAINING_REPLICA_INFO)
REPLICA_MEMORY = _family(names.TRAINING_REPLICA_MEMORY_BYTES)
SPEEDUP = _family(names.TRAINING_SCALING_SPEEDUP)
EFFICIENCY = _family(names.TRAINING_SCALING_EFFICIENCY_RATIO)
DROPPED = _family(names.TRAINING_TELEMETRY_DROPPED_TOTAL)
LAST_PUSH = _family(names.TRAINING_LAST_PUSH_TIMESTAMP_SECONDS)
# In the order a scrape lists them.
FAMILIES = (
    ACTIVE,
    INFO,
    REPLICAS,
    GLOBAL_BATCH_SIZE,
    STEPS,
    EXAMPLES,
    STEP_DURATION,
    ALLREDUCE,
    EXAMPLES_PER_SECOND,
    GRADIENT_BYTES,
    EPOCH,
    LOSS,
    REPLICA_INFO,
    REPLICA_MEMORY,
    SPEEDUP,
    EFFICIENCY,
    DROPPED,
    LAST_PUSH,
)

WORKER = LabelTemplate("run", "worker")
_INFO = LabelTemplate("run", "worker", "model", "strategy")
_BUCKET = LabelTemplate("run", "worker", "le")
_MEMORY = LabelTemplate("run", "worker", "replica", "kind")
_REPLICA_INFO = LabelTemplate("run", "worker", "replica", "gpu", "uuid")
# The `le` of each bucket as prometheus_client writes a bound ("0.001", "1.0"), +Inf last.
BUCKET_BOUNDS = (*(repr(float(bound)) for bound in STEP_DURATION_BUCKETS), "+Inf")
_MEMORY_KINDS = ("current", "peak")

# A line prefix's key: its sample name and its labels beyond run and worker (values escaped).
PrefixKey = tuple[str, tuple[tuple[str, str], ...]]


class _Prefixes:
    """A worker's line prefixes, taken from its previous push's where the same.

    ``kept`` holds the prefixes this push's lines use (bounded by them), for the next push;
    a push only reads its predecessor's, so a stale or concurrent one changes nothing.
    """

    def __init__(self, ids: dict[str, str], previous: dict[PrefixKey, str]) -> None:
        self._ids = ids
        self._previous = previous
        self.kept: dict[PrefixKey, str] = {}

    def get(self, name: str, template: LabelTemplate, **extra: str) -> str:
        """``name{labels} ``: run and worker, and ``extra``'s labels (values escaped)."""
        key = (name, tuple(extra.items()))
        prefix = self.kept.get(key) or self._previous.get(key)
        if prefix is None:
            prefix = line_prefix(name, template.text({**self._ids, **extra}))
        self.kept[key] = prefix
        return prefix


class WorkerLines:
    """One accepted push's sample lines, by family, and the per-scrape ones.

    ``previous``: the same worker's lines as of its previous push, whose prefixes are reused.
    """

    _prefixes: _Prefixes

    def __init__(self, entry: WorkerEntry, previous: WorkerLines | None = None) -> None:
        self.entry = entry
        snapshot = entry.snapshot
        ids = {"run": escape_label_value(entry.run), "worker": str(entry.worker)}
        prefixes = _Prefixes(ids, previous._prefixes.kept if previous is not None else {})
        self._prefixes = prefixes
        lines: dict[Family, str] = {}

        def single(family: Family, value: float | None) -> None:
            if value is not None:
                lines[family] = sample_text(prefixes.get(family.sample, WORKER), value)

        model = escape_label_value(snapshot.model or "")
        strategy = escape_label_value(snapshot.strategy or "")
        info = prefixes.get(INFO.sample, _INFO, model=model, strategy=strategy)
        lines[INFO] = sample_text(info, 1)
        single(REPLICAS, snapshot.replicas)
        single(GLOBAL_BATCH_SIZE, snapshot.global_batch_size)
        single(STEPS, snapshot.steps_total)
        single(EXAMPLES, snapshot.examples_total)
        lines[STEP_DURATION] = _histogram(STEP_DURATION, prefixes, snapshot.step_duration_seconds)
        if snapshot.allreduce_seconds is not None:
            lines[ALLREDUCE] = _histogram(ALLREDUCE, prefixes, snapshot.allreduce_seconds)
        single(EXAMPLES_PER_SECOND, snapshot.examples_per_second)
        single(GRADIENT_BYTES, snapshot.gradient_bytes)
        single(EPOCH, snapshot.epoch)
        single(LOSS, snapshot.loss)
        memory = []
        for device in snapshot.replica_devices:
            replica = str(device.replica)
            values = (device.memory_current_bytes, device.memory_peak_bytes)
            for kind, value in zip(_MEMORY_KINDS, values, strict=True):
                if value is not None:
                    prefix = prefixes.get(
                        REPLICA_MEMORY.sample, _MEMORY, replica=replica, kind=kind
                    )
                    memory.append(sample_text(prefix, value))
        if memory:
            lines[REPLICA_MEMORY] = "".join(memory)
        if snapshot.scaling is not None:
            single(SPEEDUP, snapshot.scaling.speedup)
            single(EFFICIENCY, snapshot.scaling.efficiency_ratio)
        single(DROPPED, snapshot.telemetry_dropped_total)
        single(LAST_PUSH, entry.received_wall)
        self.lines = lines
        active = prefixes.get(ACTIVE.sample, WORKER)
        self._active = (sample_text(active, 0), sample_text(active, 1))
        self._replica_info: tuple[object, str] | None = None

    def active(self, active: bool) -> str:
        return self._active[active]

    def replica_info(self, gpus: GpuDirectory) -> str:
        """The replica -> GPU rows on these GPUs: written again only when the GPUs change."""
        known = self._replica_info
        if known is not None and known[0] == gpus.key:
            return known[1]
        rows = []
        for device in self.entry.snapshot.replica_devices:
            gpu = gpus.resolve(device)
            if gpu is not None:
                prefix = self._prefixes.get(
                    REPLICA_INFO.sample,
                    _REPLICA_INFO,
                    replica=str(device.replica),
                    gpu=str(gpu.index),
                    uuid=escape_label_value(gpu.uuid),
                )
                rows.append(sample_text(prefix, 1))
        text = "".join(rows)
        self._replica_info = (gpus.key, text)  # one assignment: concurrent scrapes see either
        return text


def _histogram(family: Family, prefixes: _Prefixes, durations: StepDurations) -> str:
    """Each bucket's line, then count and sum, as prometheus_client orders them."""
    bucket = family.name + "_bucket"
    counts: Iterable[float] = (*durations.bucket_counts, durations.count)
    lines = [
        sample_text(prefixes.get(bucket, _BUCKET, le=bound), count)
        for bound, count in zip(BUCKET_BOUNDS, counts, strict=True)
    ]
    lines.append(sample_text(prefixes.get(family.name + "_count", WORKER), durations.count))
    lines.append(sample_text(prefixes.get(family.name + "_sum", WORKER), durations.sum_seconds))
    return "".join(lines)
