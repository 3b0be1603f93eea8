"""Snapshots built from a meter and a job alone: no Keras, no TensorFlow, a fake device probe."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest

from mirrorwatch.exporter.ingest.schema import TrainingSnapshot
from mirrorwatch.telemetry.meter import StepMeter
from mirrorwatch.telemetry.snapshot import (
    MEMORY_SAMPLE_SECONDS,
    THROUGHPUT_WINDOW_SECONDS,
    SnapshotBuilder,
    short_text,
)
from tests.hang import HANG_SECONDS

GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"
CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
UUID0 = "GPU-00000000-aaaa-0000-0000-000000000000"


class FakeProbe:
    """Two GPUs the framework lists with their bus ids; NVML knows the first; memory per GPU."""

    def __init__(self, framework_uuids: dict[int, str] | None = None) -> None:
        self.memory_asked: list[int] = []
        self.framework_uuids = framework_uuids or {}

    def gpu_bus_ids(self) -> dict[int, str]:
        return {0: "0000:1b:00.0", 1: "0000:3b:00.0"}

    def gpu_uuids(self) -> dict[int, str]:
        return self.framework_uuids

    def nvml_uuids(self, bus_ids: Sequence[str]) -> dict[str, str]:
        return {"0000:1b:00.0": UUID0} if "0000:1b:00.0" in bus_ids else {}

    def memory_bytes(self, gpu: int) -> tuple[float, float] | None:
        self.memory_asked.append(gpu)
        return (1e9, 2e9) if gpu == 0 else None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def steps(meter: StepMeter, count: int, seconds_each: float, start: float = 0.0) -> float:
    """``count`` steps of one epoch, each ``seconds_each`` long; returns the clock after them."""
    now = start
    for batch in range(count):
        meter.begin_step(now, batch)
        now += seconds_each
        meter.end_step(batch, now, loss=0.25)
    return now


def builder(
    batch_size: int | None = 32, devices: Sequence[str] = (GPU.format(0), GPU.format(1))
) -> tuple[SnapshotBuilder, StepMeter, FakeProbe, Clock]:
    meter, probe, clock = StepMeter(), FakeProbe(), Clock()
    snapshots = SnapshotBuilder(meter, "session-1", batch_size, probe=probe, clock=clock)
    snapshots.describe_job("resnet", "MirroredStrategy", devices, batch_size=None)
    meter.begin_training()
    meter.begin_epoch(1)
    return snapshots, meter, probe, clock


def test_a_snapshot_carries_the_meters_counts_and_the_job(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, meter, _, _ = builder()
    steps(meter, 10, 0.1)
    snapshot = snapshots.build(active=True, sequence=3, dropped=1)
    assert (snapshot.session, snapshot.sequence, snapshot.active) == ("session-1", 3, True)
    assert (snapshot.model, snapshot.strategy, snapshot.replicas) == (
        "resnet",
        "MirroredStrategy",
        2,
    )
    assert (snapshot.steps_total, snapshot.examples_total, snapshot.global_batch_size) == (
        10,
        320,
        32,
    )
    assert snapshot.step_duration_seconds.count == 10
    assert (snapshot.epoch, snapshot.loss, snapshot.telemetry_dropped_total) == (1, 0.25, 1)


def test_the_body_is_schema_json_without_absent_values(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, meter, _, _ = builder(batch_size=None)
    steps(meter, 3, 0.1)
    body = json.loads(snapshots.body(active=False, sequence=1, dropped=0))
    assert body["schema"] == 1
    assert "examples_total" not in body
    assert "examples_per_second" not in body
    assert TrainingSnapshot.model_validate(body).active is False


def test_replicas_map_to_bus_ids_and_uuids_through_the_probe(
    clean_env: pytest.MonkeyPatch,
) -> None:
    snapshots, _, _, _ = builder()
    assert snapshots.build(True, 1, 0).replica_devices == []  # before the GPUs are found
    snapshots.find_gpus()
    replicas = snapshots.build(True, 2, 0).replica_devices
    assert [(r.pci_bus_id, r.uuid) for r in replicas] == [
        ("0000:1b:00.0", UUID0),
        ("0000:3b:00.0", None),
    ]


def test_a_uuid_the_framework_reports_serves_where_nvml_knows_none_after_the_job_changed(
    clean_env: pytest.MonkeyPatch,
) -> None:
    uuid1 = "GPU-11111111-bbbb-0000-0000-000000000000"
    meter, probe = StepMeter(), FakeProbe({0: "GPU-ignored-0000-0000", 1: uuid1})
    snapshots = SnapshotBuilder(meter, "session-1", 32, probe=probe)
    snapshots.describe_job("m", "DataParallel", ["cpu"], batch_size=None)
    snapshots.find_gpus()  # the pusher's first act
    snapshots.describe_job("m", "DataParallel", ["cuda:0", "cuda:1"], batch_size=None)
    replicas = snapshots.build(True, 1, 0).replica_devices  # the job changed: found again
    # NVML's answer for GPU 0's bus id wins; GPU 1, unknown to NVML, takes torch's UUID.
    assert [(r.pci_bus_id, r.uuid) for r in replicas] == [
        ("0000:1b:00.0", UUID0),
        ("0000:3b:00.0", uuid1),
    ]


def test_bus_ids_from_the_environment_win_for_cpu_replicas(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("MIRRORWATCH_REPLICA_PCI_BUS_IDS", "00000000:3B:00.0,0000:1b:00.0")
    snapshots, _, probe, _ = builder(devices=[CPU.format(0), CPU.format(1)])
    snapshots.find_gpus()
    replicas = snapshots.build(True, 1, 0).replica_devices
    assert [r.pci_bus_id for r in replicas] == ["0000:3b:00.0", "0000:1b:00.0"]
    assert [r.uuid for r in replicas] == [None, UUID0]
    assert all(r.memory_current_bytes is None for r in replicas)  # CPUs: absent, never 0
    assert probe.memory_asked == []


def test_gpu_memory_is_sampled_at_most_every_few_seconds(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, _, probe, clock = builder()
    snapshots.find_gpus()
    first = snapshots.build(True, 1, 0).replica_devices
    assert (first[0].memory_current_bytes, first[0].memory_peak_bytes) == (1e9, 2e9)
    assert first[1].memory_current_bytes is None  # the probe does not know: absent
    snapshots.build(True, 2, 0)
    assert probe.memory_asked == [0, 1]
    clock.now += MEMORY_SAMPLE_SECONDS
    snapshots.build(True, 3, 0)
    assert probe.memory_asked == [0, 1] * 2


def test_throughput_is_over_the_recent_window(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, meter, _, clock = builder(batch_size=10)
    now = steps(meter, 11, 0.1)  # the first step is tracing: 10 measured steps in 1 s
    assert snapshots.build(True, 1, 0).examples_per_second == pytest.approx(100.0)
    clock.now += THROUGHPUT_WINDOW_SECONDS / 2
    for batch in range(11, 21):  # 10 slower steps: half the rate
        meter.begin_step(now, batch)
        now += 0.2
        meter.end_step(batch, now, loss=0.25)
    # Measured from the oldest push inside the window: only the slower steps count.
    assert snapshots.build(True, 2, 0).examples_per_second == pytest.approx(50.0)
    clock.now += THROUGHPUT_WINDOW_SECONDS
    steps(meter, 10, 0.05, start=now)  # a new epoch of fast steps, after the window moved on
    assert snapshots.build(True, 3, 0).examples_per_second == pytest.approx(200.0)


def test_a_scaling_baseline_gives_speedup_and_efficiency(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, meter, _, _ = builder(batch_size=10)
    steps(meter, 11, 0.1)
    assert snapshots.build(True, 1, 0).scaling is None
    assert snapshots.steady_examples_per_second() == pytest.approx(100.0)
    snapshots.set_scaling_baseline(62.5)
    scaling = snapshots.build(True, 2, 0).scaling
    assert scaling is not None
    assert scaling.speedup == pytest.approx(1.6)
    assert scaling.efficiency_ratio == pytest.approx(0.8)  # two replicas


def test_an_impossible_speedup_is_left_out(clean_env: pytest.MonkeyPatch) -> None:
    snapshots, meter, _, _ = builder(batch_size=10)
    steps(meter, 11, 0.1)
    snapshots.set_scaling_baseline(1.0)  # 100x on two replicas: efficiency over the schema's 2
    assert snapshots.build(True, 1, 0).scaling is None


def test_the_batch_size_keras_reports_is_used_only_without_one() -> None:
    meter = StepMeter()
    told = SnapshotBuilder(meter, "s", 64, probe=FakeProbe())
    told.describe_job("m", "s", [], batch_size=16)
    assert told.job.global_batch_size == 64
    inferred = SnapshotBuilder(meter, "s", None, probe=FakeProbe())
    inferred.describe_job("m", "s", [], batch_size=16)
    assert inferred.job.global_batch_size == 16
    inferred.describe_job("m", "s", [], batch_size=None)  # a later fit keeps what it knew
    assert inferred.job.global_batch_size == 16
    assert inferred.job.replicas == 1  # the default strategy: one replica


def test_names_become_the_schemas_short_text() -> None:
    assert short_text("tiny\nmodel\x00") == "tinymodel"
    assert short_text("x" * 200) == "x" * 128
    assert short_text("\x01") is None


def test_building_snapshots_imports_neither_keras_nor_tensorflow() -> None:
    program = (
        "import sys\n"
        "from mirrorwatch.telemetry.meter import StepMeter\n"
        "from mirrorwatch.telemetry.snapshot import SnapshotBuilder\n"
        "meter = StepMeter()\n"
        "from mirrorwatch.trainer import tf_devices\n"
        "builder = SnapshotBuilder(meter, 's', 8, tf_devices)\n"
        "builder.describe_job('m', 'MirroredStrategy', ['/device:CPU:0'], None)\n"
        "meter.begin_step(0.0, 0); meter.end_step(0, 0.1, 1.0)\n"
        "assert b'\"steps_total\":1' in builder.body(True, 1, 0)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('keras', 'tensorflow')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_a_worker_of_a_multi_worker_run_reports_its_share_of_the_examples(
    clean_env: pytest.MonkeyPatch,
) -> None:
    # Worker with 2 of the run's 8 replicas (4 hosts): a quarter of every global batch of 32.
    meter, probe, clock = StepMeter(), FakeProbe(), Clock()
    snapshots = SnapshotBuilder(meter, "session-1", 32, probe=probe, clock=clock)
    worker_gpus = [f"/job:worker/replica:0/task:2/device:GPU:{i}" for i in range(2)]
    snapshots.describe_job("cnn", "MultiWorkerMirroredStrategy", worker_gpus, None, 8)
    meter.begin_training()
    meter.begin_epoch(1)
    steps(meter, 11, 0.1)
    clock.now += 1
    snapshot = snapshots.build(active=True, sequence=1, dropped=0)
    # steps: the run's (every worker steps through each global batch); replicas: its own;
    # global_batch_size: the run's; examples: its share, so the workers' shares add up.
    assert (snapshot.steps_total, snapshot.replicas, snapshot.global_batch_size) == (11, 2, 32)
    assert snapshot.examples_total == 11 * 8
    # The first step is tracing and left out; then 10 steps of 8 examples in 1 s.
    assert snapshot.examples_per_second == pytest.approx(80)
    assert snapshots.steady_examples_per_second() == pytest.approx(80)


def test_on_one_host_every_replica_is_in_sync_and_the_share_is_the_whole_batch(
    clean_env: pytest.MonkeyPatch,
) -> None:
    snapshots, meter, _, _ = builder()
    snapshots.describe_job("resnet", "MirroredStrategy", [GPU.format(0), GPU.format(1)], None, 2)
    steps(meter, 10, 0.1)
    assert snapshots.build(active=True, sequence=1, dropped=0).examples_total == 10 * 32
