"""Snapshot builders and a fake clock shared by the ingest tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.ingest.schema import (
    Replica,
    Scaling,
    StepDurations,
    TrainingSnapshot,
)

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"
BUS0 = "0000:1b:00.0"
BUS1 = "0000:3d:00.0"


def snapshot_body(**changes: Any) -> dict[str, Any]:
    """A valid schema-1 body as JSON data: 100 steps of 40 ms on two replicas."""
    body: dict[str, Any] = {
        "schema": 1,
        "session": "s-1",
        "sequence": 1,
        "active": True,
        "model": "resnet50",
        "strategy": "MirroredStrategy",
        "replicas": 2,
        "global_batch_size": 64,
        "steps_total": 100,
        "examples_total": 6400,
        "step_duration_seconds": {
            # 0.04 s steps fall in the 0.05 bucket and every one above it.
            "bucket_counts": [0 if bound < 0.04 else 100 for bound in STEP_DURATION_BUCKETS],
            "count": 100,
            "sum_seconds": 4.0,
        },
        "examples_per_second": 1600.0,
        "epoch": 2,
        "loss": 0.25,
        "replica_devices": [
            {
                "replica": 0,
                "device": "/job:localhost/replica:0/task:0/device:GPU:0",
                "uuid": UUID0,
                "memory_current_bytes": 1e9,
                "memory_peak_bytes": 2e9,
            },
            {
                "replica": 1,
                "device": "/job:localhost/replica:0/task:0/device:GPU:1",
                "pci_bus_id": BUS1,
            },
        ],
        "telemetry_dropped_total": 3,
    }
    body.update(changes)
    return body


def snapshot(**changes: Any) -> TrainingSnapshot:
    return TrainingSnapshot.model_validate(snapshot_body(**changes))


@dataclass
class FakeClock:
    """Monotonic and wall time that move only when a test says so."""

    now: float = 1000.0
    wall_offset: float = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_offset + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def parse_series(text: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """Exposition text as {sample name: {label set: value}}."""
    series: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return series


def training_series(text: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    return {
        name: values
        for name, values in parse_series(text).items()
        if name.startswith("mirrorwatch_training_")
    }


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


def steady_training(
    gpus: Sequence[Mapping[str, Any]],
    sequence: int,
    *,
    session: str,
    model: str,
    steps_per_second: int,
    step_seconds: float,
    epoch: int,
    loss: float,
    scaling: Scaling | None = None,
    trained_seconds: int | None = None,
) -> str:
    """A push body: ``sequence`` seconds of steady training on ``gpus`` (from /api/v1/gpus).

    Every step takes ``step_seconds``; each replica sits on one GPU, joined by its bus id.
    ``trained_seconds`` (at most ``sequence``) stops the steps there: a worker that still
    pushes while its steps are frozen, as one hung in a collective does.
    """
    trained = sequence if trained_seconds is None else min(sequence, trained_seconds)
    steps = steps_per_second * trained
    return TrainingSnapshot(
        schema=1,
        session=session,
        sequence=sequence,
        model=model,
        strategy="MirroredStrategy",
        replicas=len(gpus),
        global_batch_size=64,
        steps_total=steps,
        examples_total=64 * steps,
        step_duration_seconds=StepDurations(
            bucket_counts=[0 if bound < step_seconds else steps for bound in STEP_DURATION_BUCKETS],
            count=steps,
            sum_seconds=step_seconds * steps,
        ),
        examples_per_second=64.0 * steps_per_second,
        epoch=epoch,
        loss=loss,
        replica_devices=[
            Replica(
                replica=i,
                device=f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                pci_bus_id=gpu["pci_bus_id"],
                memory_current_bytes=30e9,
                memory_peak_bytes=40e9,
            )
            for i, gpu in enumerate(gpus)
        ],
        scaling=scaling,
    ).model_dump_json(by_alias=True, exclude_none=True)
