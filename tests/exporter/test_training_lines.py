"""The training families, written per push from each snapshot, are what prometheus_client writes.

The oracle builds the same samples with prometheus_client's own families (``add_metric``) and
renders them with its own encoders, in both formats; the exporter's lines must match byte for
byte: label order and escaping, value formatting, histogram layout, family order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.collectors.training import TrainingMetrics
from mirrorwatch.exporter.exposition import OpenMetricsRenderer, TextRenderer
from mirrorwatch.exporter.ingest.errors import RejectionCounter
from mirrorwatch.exporter.ingest.replicas import GpuDirectory
from mirrorwatch.exporter.ingest.schema import StepDurations
from mirrorwatch.exporter.ingest.store import Limits, RunStore, WorkerView
from mirrorwatch.exporter.logs import RejectionLog
from mirrorwatch.exporter.settings import Settings
from tests.exporter.broken_key import KeyChanging
from tests.exporter.ingest_snapshots import BUS0, BUS1, UUID0, UUID1, FakeClock, snapshot
from tests.exporter.static_gpu import StaticBackend, StaticGpu

TRAINING = "mirrorwatch_training_"
HISTOGRAM = {
    "bucket_counts": [3 * i for i in range(len(STEP_DURATION_BUCKETS))],
    "count": 99,
    "sum_seconds": 1e-9,
}
SCALING = {
    "speedup": 1.5,
    "efficiency_ratio": 0.75,
    "baseline_examples_per_second": 1.0,
    "examples_per_second": 1.5,
}


class Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def prometheus_client_text(families: list[Metric]) -> tuple[bytes, bytes]:
    """The text format and OpenMetrics (without its `# EOF`) as prometheus_client writes them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families))
    encoded: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry), encoded.removesuffix(b"# EOF\n")


def oracle(views: list[WorkerView], gpus: GpuDirectory) -> list[Metric]:
    """The training families of ``views``, built with prometheus_client's add_metric."""
    worker = ["run", "worker"]

    def gauge(name: str, text: str, *extra: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(TRAINING + name, text, labels=[*worker, *extra])

    def counter(name: str, text: str) -> CounterMetricFamily:
        return CounterMetricFamily(TRAINING + name, text, labels=worker)

    def histogram(name: str, text: str) -> HistogramMetricFamily:
        return HistogramMetricFamily(TRAINING + name, text, labels=worker)

    active = gauge("active", "1 while the worker trains and pushed within the TTL.")
    info = gauge("info", "Model and strategy of the worker; always 1.", "model", "strategy")
    replicas = gauge("replicas", "Replicas in sync on the worker.")
    batch = gauge("global_batch_size", "Examples per step over all replicas.")
    steps = counter("steps", "Training steps since the worker's session started.")
    examples = counter("examples", "Training examples since the worker's session started.")
    duration = histogram("step_duration_seconds", "Wall time of each training step, in seconds.")
    allreduce = histogram(
        "allreduce_seconds",
        "Time each training step's gradient all-reduces were in flight, in seconds.",
    )
    throughput = gauge(
        "examples_per_second", "Training throughput over the recent window, examples/s."
    )
    epoch = gauge("epoch", "Current epoch, counted from 0.")
    loss = gauge("loss", "Loss of the last training step.")
    replica_info = gauge(
        "replica_info",
        "The GPU of this host each replica runs on; uuid matches the GPU series; always 1.",
        "replica",
        "gpu",
        "uuid",
    )
    memory = gauge(
        "replica_memory_bytes",
        "Device memory the replica's allocator holds, current and peak, in bytes.",
        "replica",
        "kind",
    )
    speedup = gauge("scaling_speedup", "Throughput on all replicas over throughput on one replica.")
    efficiency = gauge("scaling_efficiency_ratio", "Scaling speedup divided by the replica count.")
    dropped = counter("telemetry_dropped", "Snapshots the worker's callback gave up pushing.")
    last_push = gauge(
        "last_push_timestamp_seconds", "When the exporter received the worker's last push."
    )

    def add_histogram(
        family: HistogramMetricFamily, labels: list[str], durations: StepDurations
    ) -> None:
        bounds = [str(float(bound)) for bound in STEP_DURATION_BUCKETS]
        buckets = list(zip(bounds, map(float, durations.bucket_counts), strict=True))
        family.add_metric(
            labels, [*buckets, ("+Inf", float(durations.count))], durations.sum_seconds
        )

    for view in views:
        entry, s = view.entry, view.entry.snapshot
        labels = [entry.run, str(entry.worker)]
        active.add_metric(labels, 1 if view.active else 0)
        info.add_metric([*labels, s.model or "", s.strategy or ""], 1)
        replicas.add_metric(labels, s.replicas)
        if s.global_batch_size is not None:
            batch.add_metric(labels, s.global_batch_size)
        steps.add_metric(labels, s.steps_total)
        if s.examples_total is not None:
            examples.add_metric(labels, s.examples_total)
        add_histogram(duration, labels, s.step_duration_seconds)
        if s.allreduce_seconds is not None:
            add_histogram(allreduce, labels, s.allreduce_seconds)
        for family, value in (
            (throughput, s.examples_per_second),
            (epoch, s.epoch),
            (loss, s.loss),
        ):
            if value is not None:
                family.add_metric(labels, value)
        for device in s.replica_devices:
            gpu = gpus.resolve(device)
            if gpu is not None:
                replica_info.add_metric([*labels, str(device.replica), str(gpu.index), gpu.uuid], 1)
            for kind, value in (
                ("current", device.memory_current_bytes),
                ("peak", device.memory_peak_bytes),
            ):
                if value is not None:
                    memory.add_metric([*labels, str(device.replica), kind], value)
        if s.scaling is not None:
            speedup.add_metric(labels, s.scaling.speedup)
            efficiency.add_metric(labels, s.scaling.efficiency_ratio)
        dropped.add_metric(labels, s.telemetry_dropped_total)
        last_push.add_metric(labels, entry.received_wall)
    families: list[Metric] = [
        active,
        info,
        replicas,
        batch,
        steps,
        examples,
        duration,
        allreduce,
        throughput,
        epoch,
        loss,
        replica_info,
        memory,
        speedup,
        efficiency,
        dropped,
        last_push,
    ]
    return [family for family in families if family.samples]


@pytest.fixture
def backend() -> StaticBackend:
    return StaticBackend(
        [
            StaticGpu(index=0, uuid=UUID1, pci_bus_id=BUS1),
            StaticGpu(index=1, uuid=UUID0, pci_bus_id=BUS0),
        ]
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> RunStore:
    """Workers that between them use every line a snapshot can give, and every escape."""
    store = RunStore(Limits.from_settings(Settings(run_ttl=60)), clock)
    store.put("r1", 0, snapshot())  # one replica by UUID with memory, one by bus id without
    store.put(
        "run.with-odd_ID",
        1023,
        snapshot(
            model='m "quoted" \\ back',
            strategy="s\\",
            allreduce_seconds=HISTOGRAM,
            scaling=SCALING,
            loss=-1e-7,
            examples_per_second=1e17,
            epoch=0,
            examples_total=2**53,
            global_batch_size=2**31,
            steps_total=12_345_678,
            telemetry_dropped_total=0,
        ),
    )
    clock.advance(61)  # the two above are now inactive: past the TTL
    store.put(
        "r1",
        7,
        snapshot(
            model=None,
            strategy=None,
            global_batch_size=None,
            examples_total=None,
            examples_per_second=None,
            loss=None,
            replicas=3,
            replica_devices=[
                {"replica": 2, "device": "d", "memory_peak_bytes": 5.5},
                {"replica": 0, "device": "d", "uuid": UUID1, "memory_current_bytes": 0.0},
                {"replica": 1, "device": "d", "uuid": "GPU-99999999-9999"},  # not this host's
            ],
        ),
    )
    store.put("z", 3, snapshot(replica_devices=[], replicas=1, active=False))
    return store


def collector(store: RunStore, backend: StaticBackend) -> TrainingMetrics:
    return TrainingMetrics(store, backend, RejectionCounter(RejectionLog(logging.getLogger("t"))))


def rendered(metrics: TrainingMetrics) -> tuple[bytes, bytes]:
    """The exporter's training families, in the text format and OpenMetrics (no `# EOF`)."""
    families = [family for family in metrics.collect() if family.name.startswith(TRAINING)]
    return (
        TextRenderer().render(families),
        OpenMetricsRenderer().render(families).removesuffix(b"# EOF\n"),
    )


def expected(store: RunStore, backend: StaticBackend) -> tuple[bytes, bytes]:
    return prometheus_client_text(oracle(store.views(), GpuDirectory(backend.gpus())))


def test_every_training_line_is_what_prometheus_client_writes_in_both_formats(
    store: RunStore, backend: StaticBackend
) -> None:
    metrics = collector(store, backend)
    text, om = rendered(metrics)
    assert (text, om) == expected(store, backend)
    assert b'model="m \\"quoted\\" \\\\ back"' in text  # the escapes are exercised
    assert b"mirrorwatch_training_allreduce_seconds_bucket" in om
    assert rendered(metrics) == (text, om)  # the kept lines, at the next scrape


def test_a_push_that_replaces_the_entry_rebuilds_its_lines(
    store: RunStore, backend: StaticBackend, clock: FakeClock
) -> None:
    metrics = collector(store, backend)
    before = rendered(metrics)
    clock.advance(5)
    # Everything a line shows changes: values, the labels of info, the replicas and their
    # memory, the optional families (scaling gone, allreduce new).
    store.put(
        "run.with-odd_ID",
        1023,
        snapshot(
            sequence=2,
            steps_total=12_345_679,
            examples_total=2**53,
            model="another",
            loss=0.5,
            replicas=1,
            replica_devices=[
                {"replica": 5, "device": "d", "uuid": UUID0, "memory_peak_bytes": 7.0}
            ],
            allreduce_seconds=None,
            scaling=None,
        ),
    )
    store.put("r1", 0, snapshot(sequence=2, steps_total=150, allreduce_seconds=HISTOGRAM))
    after = rendered(metrics)
    assert after != before
    assert after == expected(store, backend)
    assert b'mirrorwatch_training_steps_total{run="r1",worker="0"} 150.0\n' in after[0]
    assert b'model="m \\"quoted' not in after[0]


def test_lines_are_kept_until_the_next_push(store: RunStore, backend: StaticBackend) -> None:
    metrics = collector(store, backend)
    rendered(metrics)
    kept = dict(metrics._lines)
    rendered(metrics)
    assert all(metrics._lines[key] is lines for key, lines in kept.items())
    store.put("r1", 0, snapshot(sequence=2, steps_total=150))
    rendered(metrics)
    assert metrics._lines[("r1", 0)] is not kept[("r1", 0)]
    assert metrics._lines[("z", 3)] is kept[("z", 3)]


def test_a_gpu_that_leaves_takes_its_replica_rows_with_it_at_the_next_scrape(
    store: RunStore, backend: StaticBackend
) -> None:
    metrics = collector(store, backend)
    rendered(metrics)
    backend.devices = backend.devices[:1]  # GPU 1 (UUID0) is gone; the kept lines are not
    assert rendered(metrics) == expected(store, backend)


def test_pushes_whose_values_repeat_change_and_flip_zeros_sign_stay_what_prometheus_client_writes(
    store: RunStore, backend: StaticBackend, clock: FakeClock
) -> None:
    # Each push rewrites the worker's lines from its previous push's series: a value that
    # repeats, one that changes, 0.0 and -0.0, a replica that comes and goes, a worker that is
    # forgotten and one that is new.
    metrics = collector(store, backend)
    losses = (0.25, 0.25, -0.0, 0.0, 0.0, -0.0, 1e-7, 1e-7)
    for sequence, loss in enumerate(losses, start=2):
        clock.advance(1)
        devices = [{"replica": 0, "device": "d", "uuid": UUID0, "memory_peak_bytes": loss}]
        if sequence % 3:
            devices.append({"replica": 1, "device": "d", "uuid": UUID1, "memory_peak_bytes": 2.0})
        store.put(
            "r1",
            0,
            snapshot(sequence=sequence, loss=loss, epoch=sequence // 3, replica_devices=devices),
        )
        if sequence == 5:
            store.delete("z", 3)
            store.put("new", 4, snapshot())
        assert rendered(metrics) == expected(store, backend), (sequence, loss)


def test_a_broken_series_reuse_key_fails_the_oracle(
    store: RunStore, backend: StaticBackend, clock: FakeClock
) -> None:
    # The next push finds each series by its name alone, the extra label values dropped from
    # the key (a bucket's le, a replica's number and kind): the oracle must see it.
    metrics = collector(store, backend)
    assert rendered(metrics) == expected(store, backend)
    for lines in metrics._lines.values():
        lines._series = KeyChanging(lambda key: key[:1], lines._series)
    clock.advance(1)
    store.put("r1", 0, snapshot(sequence=2, steps_total=150))
    assert rendered(metrics) != expected(store, backend)
