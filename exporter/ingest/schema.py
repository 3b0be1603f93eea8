"""The ingest's check of the training telemetry snapshot, schema 1, as pydantic models.

The schema itself (its fields, their bounds, the histogram's buckets) is the contract's
(mirrorwatch.contract.snapshot), which the clients build from without pydantic; these models
validate what arrives against it and publish it in the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mirrorwatch.contract import snapshot as contract
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.contract.vocabulary import RUN_PATTERN

Count = Annotated[int, Field(ge=0, le=contract.MAX_COUNT)]
Amount = Annotated[float, Field(ge=0, le=contract.MAX_AMOUNT)]
ShortText = Annotated[
    str,
    Field(min_length=1, max_length=contract.SHORT_TEXT_LENGTH, pattern=contract.SHORT_TEXT_PATTERN),
]


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

    replica: Annotated[int, Field(ge=0, le=contract.MAX_REPLICA)]
    device: Annotated[str, Field(max_length=contract.DEVICE_LENGTH)] = Field(
        description="TensorFlow device name, e.g. /job:localhost/replica:0/task:0/device:GPU:0"
    )
    uuid: Annotated[str | None, Field(pattern=contract.GPU_UUID_PATTERN)] = Field(
        default=None, description="NVML UUID of the GPU, when the callback could resolve it"
    )
    pci_bus_id: Annotated[str | None, Field(pattern=contract.PCI_BUS_ID_PATTERN)] = Field(
        default=None, description="PCI bus id of the GPU; the exporter resolves it to a UUID"
    )
    memory_current_bytes: Amount | None = None
    memory_peak_bytes: Amount | None = None


class Scaling(_Strict):
    """Result of a scaling benchmark: throughput on all replicas over throughput on one."""

    speedup: Annotated[float, Field(gt=0, le=contract.MAX_SPEEDUP)]
    efficiency_ratio: Annotated[float, Field(gt=0, le=contract.MAX_EFFICIENCY_RATIO)]
    baseline_examples_per_second: Amount
    examples_per_second: Amount


class TrainingSnapshot(_Strict):
    """Schema 1: everything one worker of one run has to say, as running totals."""

    schema_version: Literal[1] = Field(alias="schema")  # contract.SCHEMA_VERSION
    # Spelled as a run id is (vocabulary.RUN_RULE).
    session: Annotated[str, Field(min_length=1, max_length=64, pattern=RUN_PATTERN.pattern)] = (
        Field(description="id of this worker process's session; a new one means a restart")
    )
    sequence: Count = Field(description="push number within the session, increasing")
    active: bool = True
    model: ShortText | None = None
    strategy: ShortText | None = None
    replicas: Annotated[int, Field(ge=1, le=contract.MAX_REPLICAS)]
    global_batch_size: Annotated[int | None, Field(ge=1, le=contract.MAX_GLOBAL_BATCH_SIZE)] = None
    steps_total: Count
    examples_total: Count | None = None
    step_duration_seconds: StepDurations
    # Optional, so schema 1 stays what it was for clients that cannot see their all-reduces.
    allreduce_seconds: StepDurations | None = Field(
        default=None,
        description="per step, the time its gradient all-reduces were in flight (the union of"
        " their intervals); only steps that all-reduced",
    )
    gradient_bytes: Annotated[int | None, Field(ge=1, le=contract.MAX_GRADIENT_BYTES)] = Field(
        default=None,
        description="bytes one replica's gradients all-reduce each step (its trainable"
        " parameters); the run report's all-reduce estimate where none is measured",
    )
    examples_per_second: Amount | None = None
    epoch: Annotated[int, Field(ge=0, le=contract.MAX_EPOCH)] = 0
    loss: Annotated[float | None, Field(ge=-contract.MAX_ABS_LOSS, le=contract.MAX_ABS_LOSS)] = None
    replica_devices: Annotated[list[Replica], Field(max_length=contract.MAX_REPLICAS)] = []
    scaling: Scaling | None = None
    telemetry_dropped_total: Count = 0
    # The worker's process, so the exporter can tell the run's processes on its GPUs from
    # others (docs/api.md): os.getpid() and the inode of /proc/self/ns/pid.
    pid: Annotated[int | None, Field(ge=1, le=contract.MAX_PID, strict=True)] = Field(
        default=None, description="the worker's process id, as os.getpid() in the worker"
    )
    pid_namespace: Annotated[
        int | None, Field(ge=1, le=contract.MAX_PID_NAMESPACE, strict=True)
    ] = Field(
        default=None,
        description="inode of the worker's PID namespace (/proc/self/ns/pid); 4026531836 is"
        " the host's",
    )

    model_config = ConfigDict(populate_by_name=True)
