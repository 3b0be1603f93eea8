"""The scale bench's training load: what it pushes is what the exporter accepts."""

from __future__ import annotations

from bench.scale_rules import prometheus_group
from bench.scale_training import REPLICAS_PER_WORKER, Worker, snapshot
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.exporter.ingest.schema import TrainingSnapshot

UUIDS = tuple(f"GPU-00000000-0000-4000-8000-{i:012d}" for i in range(REPLICAS_PER_WORKER))


def test_a_worker_snapshot_passes_the_exporters_schema() -> None:
    worker = Worker(Address("127.0.0.1", 9848), "scale-0", 3, UUIDS)

    parsed = TrainingSnapshot.model_validate(snapshot(worker, sequence=2, steps=40))

    assert parsed.replicas == REPLICAS_PER_WORKER
    assert [r.uuid for r in parsed.replica_devices] == list(UUIDS)
    assert parsed.step_duration_seconds.count == 40
    assert len(parsed.step_duration_seconds.bucket_counts) == len(STEP_DURATION_BUCKETS)
    assert parsed.allreduce_seconds is not None


def test_prometheus_group_labels_name_the_group_without_its_file() -> None:
    assert prometheus_group("/rules/mirrorwatch.rules.yml;mirrorwatch.causes") == (
        "mirrorwatch.causes"
    )
