"""The snapshot's two forms: the contract's plain dataclasses the clients build, and the ingest's
pydantic models that check them. Same fields, same defaults, same JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from mirrorwatch.contract import snapshot as contract
from mirrorwatch.exporter.ingest import schema

PAIRS = [
    (contract.TrainingSnapshot, schema.TrainingSnapshot),
    (contract.StepDurations, schema.StepDurations),
    (contract.Replica, schema.Replica),
    (contract.Scaling, schema.Scaling),
]


def wire_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Each field of ``model`` by its JSON name, and its default (``...`` where required)."""
    found = {}
    for name, info in model.model_fields.items():
        required = info.is_required()
        found[info.alias or name] = ... if required else info.get_default(call_default_factory=True)
    return found


def plain_fields(kind: type[Any]) -> dict[str, Any]:
    found = {}
    for field in dataclasses.fields(kind):
        default = field.default
        if default is dataclasses.MISSING:
            default = ...
        found[field.name] = [] if default == () else default
    return found


@pytest.mark.parametrize(("plain", "model"), PAIRS, ids=lambda kind: kind.__name__)
def test_both_forms_have_the_same_fields_and_defaults(
    plain: type[Any], model: type[BaseModel]
) -> None:
    wire = wire_fields(model)
    if "schema" in wire:  # required on the wire; the client's form always sends its own
        wire["schema"] = contract.SCHEMA_VERSION
    assert plain_fields(plain) == wire


def test_the_ingest_takes_the_contracts_schema_version() -> None:
    annotation = schema.TrainingSnapshot.model_fields["schema_version"].annotation
    assert get_args(annotation) == (contract.SCHEMA_VERSION,)


def full_snapshot() -> contract.TrainingSnapshot:
    durations = contract.StepDurations(
        bucket_counts=[i for i in range(len(contract.STEP_DURATION_BUCKETS))],
        count=20,
        sum_seconds=1.5,
    )
    return contract.TrainingSnapshot(
        session="session-1",
        sequence=7,
        active=False,
        model="resnet",
        strategy="DistributedDataParallel",
        replicas=2,
        global_batch_size=256,
        steps_total=20,
        examples_total=5120,
        step_duration_seconds=durations,
        allreduce_seconds=durations,
        examples_per_second=1234.5,
        epoch=3,
        loss=0.25,
        replica_devices=[
            contract.Replica(
                replica=0,
                device="cuda:0",
                uuid="GPU-12345678-abcd",
                pci_bus_id="0000:1b:00.0",
                memory_current_bytes=1e9,
                memory_peak_bytes=2e9,
            ),
            contract.Replica(replica=1, device="cuda:1"),
        ],
        scaling=contract.Scaling(
            speedup=1.8,
            efficiency_ratio=0.9,
            baseline_examples_per_second=100.0,
            examples_per_second=180.0,
        ),
        telemetry_dropped_total=1,
        pid=4242,
        pid_namespace=4026531836,
    )


def test_a_full_snapshot_passes_the_ingest_check_unchanged() -> None:
    sent = full_snapshot().as_json()
    checked = schema.TrainingSnapshot.model_validate_json(full_snapshot().encode())
    assert checked.model_dump(by_alias=True, exclude_none=True) == sent


def test_absent_values_are_left_out_not_null() -> None:
    bare = contract.TrainingSnapshot(
        session="s",
        sequence=1,
        replicas=1,
        steps_total=0,
        step_duration_seconds=contract.StepDurations([0] * 14, 0, 0.0),
    )
    body = json.loads(bare.encode())
    assert body["schema"] == contract.SCHEMA_VERSION
    assert None not in body.values()
    assert "loss" not in body
    assert schema.TrainingSnapshot.model_validate(body).replica_devices == []


def test_a_snapshot_with_nan_is_refused_before_it_is_sent() -> None:
    snapshot = dataclasses.replace(full_snapshot(), loss=float("nan"))
    with pytest.raises(ValueError, match="JSON compliant"):
        snapshot.encode()
