"""The training telemetry snapshot, schema 1: one worker's full cumulative state, as JSON.

A push carries running totals since that worker's session started, so a lost or repeated push
loses nothing and double counts nothing. The Keras callback and the torch monitor build it
(mirrorwatch.telemetry) from these plain dataclasses; the ingest API checks what arrives
against the pydantic models of mirrorwatch.exporter.ingest.schema, built from the same fields
and the bounds written here. So a training process never imports pydantic (0.4 to 1.9 s per
torch rank, issue 32); tests/contract/test_snapshot.py holds the two to the same fields.
The clients keep to the bounds where they compute a value (telemetry/); one that slips past
is refused by the ingest with a 422 naming the field, which the pusher warns of once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

SCHEMA_VERSION = 1

# Upper bounds of the step-duration histogram, in seconds: 1 ms to 30 s.
STEP_DURATION_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

# The bounds the ingest enforces, each field's in one place.
MAX_COUNT = 2**53  # counters: exact in a float64, as every JSON reader holds them
MAX_AMOUNT = 1e18  # seconds, bytes, examples per second
SHORT_TEXT_LENGTH = 128
SHORT_TEXT_PATTERN = r"^[\x20-\x7e]+$"  # printable ASCII
DEVICE_LENGTH = 256
MAX_REPLICA = 1023
MAX_REPLICAS = 4096
MAX_GLOBAL_BATCH_SIZE = 2**31
MAX_EPOCH = 2**31
# 2**44 bytes (16 TiB): beyond any model's float32 gradients.
MAX_GRADIENT_BYTES = 2**44
MAX_ABS_LOSS = 1e30
MAX_SPEEDUP = 1024
MAX_EFFICIENCY_RATIO = 2
# 2**22 is Linux's PID_MAX_LIMIT; namespace inodes are 32-bit.
MAX_PID = 2**22
MAX_PID_NAMESPACE = 2**32 - 1
PCI_BUS_ID_PATTERN = r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"
GPU_UUID_PATTERN = r"^(GPU|MIG)-[0-9a-zA-Z-]{8,64}$"


@dataclass(frozen=True)
class StepDurations:
    """Cumulative histogram of per-step seconds since the worker's session started: each step's
    wall time (``step_duration_seconds``) or its time in all-reduce (``allreduce_seconds``).

    ``bucket_counts``: cumulative count of steps at or below each of STEP_DURATION_BUCKETS;
    ``count``: all steps measured (the +Inf bucket).
    """

    bucket_counts: list[int]
    count: int
    sum_seconds: float


@dataclass(frozen=True)
class Replica:
    """One replica of the strategy and the physical GPU it runs on.

    ``device``: the framework's device name (``/job:localhost/replica:0/task:0/device:GPU:0``);
    ``uuid``: the GPU's NVML UUID where the client resolved it; ``pci_bus_id``: its PCI bus id,
    which the exporter resolves to a UUID.
    """

    replica: int
    device: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_current_bytes: float | None = None
    memory_peak_bytes: float | None = None


@dataclass(frozen=True)
class Scaling:
    """Result of a scaling benchmark: throughput on all replicas over throughput on one."""

    speedup: float
    efficiency_ratio: float
    baseline_examples_per_second: float
    examples_per_second: float


@dataclass(frozen=True)
class TrainingSnapshot:
    """Schema 1: everything one worker of one run has to say, as running totals.

    ``session``: id of this worker process's session (spelled as a run id is); a new one means
    a restart. ``sequence``: push number within the session, increasing.
    ``allreduce_seconds``: per step, the time its gradient all-reduces were in flight (the
    union of their intervals), only steps that all-reduced; optional, so schema 1 stays what
    it was for clients that cannot see their all-reduces. ``pid`` and ``pid_namespace``: the
    worker's process (os.getpid() and the inode of /proc/self/ns/pid), so the exporter can
    tell the run's processes on its GPUs from others (docs/api.md). ``gradient_bytes``: the
    bytes one replica's gradients all-reduce each step (its trainable parameters' sizes), from
    which the run report estimates the all-reduce where none is measured.
    """

    session: str
    sequence: int
    replicas: int
    steps_total: int
    step_duration_seconds: StepDurations
    schema: int = SCHEMA_VERSION
    active: bool = True
    model: str | None = None
    strategy: str | None = None
    global_batch_size: int | None = None
    examples_total: int | None = None
    allreduce_seconds: StepDurations | None = None
    gradient_bytes: int | None = None
    examples_per_second: float | None = None
    epoch: int = 0
    loss: float | None = None
    replica_devices: list[Replica] | tuple[Replica, ...] = ()
    scaling: Scaling | None = None
    telemetry_dropped_total: int = 0
    pid: int | None = None
    pid_namespace: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The snapshot as the ingest API takes it: absent values left out, never null."""
        plain: dict[str, Any] = _plain(self)
        return plain

    def encode(self) -> bytes:
        """:meth:`as_json` as the request body's bytes."""
        return json.dumps(self.as_json(), separators=(",", ":"), allow_nan=False).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, StepDurations | Replica | Scaling | TrainingSnapshot):
        return {
            field.name: _plain(getattr(value, field.name))
            for field in fields(value)
            if getattr(value, field.name) is not None
        }
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
