"""The training telemetry snapshot, schema 1: one worker's full cumulative state, as JSON.

A push carries running totals since that worker's session started, so a lost or repeated push
loses nothing and double counts nothing. The Keras callback and the torch monitor build it (one
snapshot builder, mirrorwatch.telemetry); the ingest API checks it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mirrorwatch.exporter.vocabulary import RUN_PATTERN

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

Count = Annotated[int, Field(ge=0, le=2**53)]
Amount = Annotated[float, Field(ge=0, le=1e18)]
ShortText = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\x20-\x7e]+$")]
PCI_BUS_ID = r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"
GPU_UUID = r"^(GPU|MIG)-[0-9a-zA-Z-]{8,64}$"


class _Strict(BaseModel):
    # Unknown fields are an error (a typo must not pass silently); NaN and infinities too.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class StepDurations(_Strict):
    """Cumulative histogram of per-step seconds since the worker's session started: each step's
    wall time (``step_duration_seconds``) or its time in all-reduce (``allreduce_seconds``)."""

    bucket_counts: list[Count] = Field(
        min_length=len(STEP_DURATION_BUCKETS),
        max_length=len(STEP_DURATION_BUCKETS),
        description="cumulative count of steps at or below each of STEP_DURATION_BUCKETS",
    )
    count: Count = Field(description="all steps measured (the +Inf bucket)")
    sum_seconds: Amount

    @model_validator(mode="after")
    def _cumulative(self) -> StepDurations:
        previous = 0
        for value in [*self.bucket_counts, self.count]:
            if value < previous:
                raise ValueError("bucket_counts must not decrease and must not exceed count")
            previous = value
        return self


class Replica(_Strict):
    """One replica of the strategy and the physical GPU it runs on."""

    replica: Annotated[int, Field(ge=0, le=1023)]
    device: Annotated[str, Field(max_length=256)] = Field(
        description="TensorFlow device name, e.g. /job:localhost/replica:0/task:0/device:GPU:0"
    )
    uuid: Annotated[str | None, Field(pattern=GPU_UUID)] = Field(
        default=None, description="NVML UUID of the GPU, when the callback could resolve it"
    )
    pci_bus_id: Annotated[str | None, Field(pattern=PCI_BUS_ID)] = Field(
        default=None, description="PCI bus id of the GPU; the exporter resolves it to a UUID"
    )
    memory_current_bytes: Amount | None = None
    memory_peak_bytes: Amount | None = None


class Scaling(_Strict):
    """Result of a scaling benchmark: throughput on all replicas over throughput on one."""

    speedup: Annotated[float, Field(gt=0, le=1024)]
    efficiency_ratio: Annotated[float, Field(gt=0, le=2)]
    baseline_examples_per_second: Amount
    examples_per_second: Amount


class TrainingSnapshot(_Strict):
    """Schema 1: everything one worker of one run has to say, as running totals."""

    schema_version: Literal[1] = Field(alias="schema")
    # Spelled as a run id is (vocabulary.RUN_RULE).
    session: Annotated[str, Field(min_length=1, max_length=64, pattern=RUN_PATTERN.pattern)] = (
        Field(description="id of this worker process's session; a new one means a restart")
    )
    sequence: Count = Field(description="push number within the session, increasing")
    active: bool = True
    model: ShortText | None = None
    strategy: ShortText | None = None
    replicas: Annotated[int, Field(ge=1, le=4096)]
    global_batch_size: Annotated[int | None, Field(ge=1, le=2**31)] = None
    steps_total: Count
    examples_total: Count | None = None
    step_duration_seconds: StepDurations
    # Optional, so schema 1 stays what it was for clients that cannot see their all-reduces.
    allreduce_seconds: StepDurations | None = Field(
        default=None,
        description="per step, the time its gradient all-reduces were in flight (the union of"
        " their intervals); only steps that all-reduced",
    )
    examples_per_second: Amount | None = None
    epoch: Annotated[int, Field(ge=0, le=2**31)] = 0
    loss: Annotated[float | None, Field(ge=-1e30, le=1e30)] = None
    replica_devices: Annotated[list[Replica], Field(max_length=4096)] = []
    scaling: Scaling | None = None
    telemetry_dropped_total: Count = 0
    # The worker's process, so the exporter can tell the run's processes on its GPUs from
    # others (docs/api.md): os.getpid() and the inode of /proc/self/ns/pid. 2**22 is Linux's
    # PID_MAX_LIMIT; namespace inodes are 32-bit.
    pid: Annotated[int | None, Field(ge=1, le=2**22, strict=True)] = Field(
        default=None, description="the worker's process id, as os.getpid() in the worker"
    )
    pid_namespace: Annotated[int | None, Field(ge=1, le=2**32 - 1, strict=True)] = Field(
        default=None,
        description="inode of the worker's PID namespace (/proc/self/ns/pid); 4026531836 is"
        " the host's",
    )

    model_config = ConfigDict(populate_by_name=True)
