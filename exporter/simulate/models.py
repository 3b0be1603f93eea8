"""The parts of a scenario file: durations, profiles, hardware and timed events.

Pydantic models, strict and closed (an unknown field is an error); scenario.py puts them
together into a Scenario and reads files into it.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mirrorwatch.contract.vocabulary import parse_duration
from mirrorwatch.exporter.backend import (
    ClocksEventReason,
    ComputeMode,
    EccErrorType,
    NvlinkErrorType,
    P2pLink,
)

MAX_GPUS = 64
DURATION_HINT = 'must be a duration like 90, "90s" or "5m"'


def duration_seconds(value: object) -> float:
    """Seconds in a scenario duration (vocabulary.parse_duration), or the error a file shows."""
    try:
        return parse_duration(value)
    except ValueError:
        # The scenario's own words: one line a user of a scenario file can act on.
        raise PydanticCustomError("duration", DURATION_HINT) from None


Duration = Annotated[float, BeforeValidator(duration_seconds)]


class StrictModel(BaseModel):
    # Strict: YAML already gives numbers and booleans their own types, so `count: true` or
    # `stddev: "0.1"` is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


# --- profiles -------------------------------------------------------------------------------


class RampSpec(StrictModel):
    """Linear change from `from` to `to`, beginning at `start` and lasting `over`."""

    from_: float = Field(alias="from")
    to: float
    start: Duration = 0.0
    over: Duration


class SquareSpec(StrictModel):
    """`high` for the first `duty` fraction of every `period`, `low` for the rest."""

    low: float
    high: float
    period: Duration
    duty: float = Field(default=0.5, ge=0.0, le=1.0)
    phase: Duration = 0.0

    @field_validator("period")
    @classmethod
    def _period_positive(cls, period: float) -> float:
        if period <= 0:
            raise PydanticCustomError("duration", "must be a duration above 0")
        return period


class NoiseSpec(StrictModel):
    """Gaussian noise, a fresh seeded draw every second."""

    mean: float = 0.0
    stddev: float = Field(ge=0.0)


class ProfileSpec(StrictModel):
    """A quantity over time: one base shape (or noise alone), optional noise, clamped."""

    constant: float | None = None
    ramp: RampSpec | None = None
    square: SquareSpec | None = None
    noise: NoiseSpec | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _number_is_constant(cls, data: Any) -> Any:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"constant": data}
        if not isinstance(data, dict):
            raise PydanticCustomError(
                "profile", "must be a number or a mapping with constant, ramp, square or noise"
            )
        return data

    @model_validator(mode="after")
    def _one_shape(self) -> ProfileSpec:
        shapes = [self.constant is not None, self.ramp is not None, self.square is not None]
        if sum(shapes) > 1:
            raise PydanticCustomError(
                "profile", "give only one of constant, ramp and square (noise may be added)"
            )
        if not any(shapes) and self.noise is None:
            raise PydanticCustomError("profile", "give one of constant, ramp, square or noise")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise PydanticCustomError("profile", "min must not be above max")
        return self


class Workload(StrictModel):
    """Profiles of the quantities a scenario may drive; a quantity left out is derived."""

    utilization: ProfileSpec | None = None
    memory_utilization: ProfileSpec | None = None
    memory_used_ratio: ProfileSpec | None = None
    temperature_celsius: ProfileSpec | None = None
    power_watts: ProfileSpec | None = None
    fan_ratio: ProfileSpec | None = None
    pcie_transmit_bytes_per_second: ProfileSpec | None = None
    pcie_receive_bytes_per_second: ProfileSpec | None = None
    nvlink_bytes_per_second: ProfileSpec | None = None
    # How fast the GPU computes a training step against its peers at the same clocks, for a
    # reason the driver does not report (a slower board, clocks locked by another tool, a
    # co-tenant on the same SMs without a process NVML lists): 1 is as fast as the others.
    compute_speed: ProfileSpec | None = None


WORKLOAD_QUANTITIES: tuple[str, ...] = tuple(Workload.model_fields)


class Override(Workload):
    """Workload profiles for one GPU, replacing the scenario-wide ones quantity by quantity."""

    gpu: int = Field(ge=0)


# --- hardware -------------------------------------------------------------------------------


class MigInstance(StrictModel):
    """One MIG device of a simulated GPU, which then has MIG on (an A100/H100 layout)."""

    gpu: int = Field(ge=0, lt=MAX_GPUS)
    gpu_instance: int = Field(ge=0)
    compute_instance: int = Field(default=0, ge=0)
    profile: str = Field(min_length=1)  # NVML's name, e.g. 3g.40gb
    memory_gib: float = Field(gt=0)
    memory_used_ratio: float = Field(default=0.5, ge=0, le=1)
    processes: int = Field(default=1, ge=0)


class Hardware(StrictModel):
    """The GPUs of the simulated host; the defaults describe an H100-class board."""

    count: int = Field(default=2, ge=1, le=MAX_GPUS)
    name: str = Field(default="NVIDIA H100 80GB HBM3", min_length=1)
    memory_gib: float = Field(default=80.0, gt=0)
    power_limit_watts: float = Field(default=700.0, gt=0)
    idle_power_watts: float = Field(default=70.0, ge=0, validate_default=True)
    fans: int = Field(default=2, ge=0, le=8)
    nvlinks: int = Field(default=4, ge=0, le=18)
    topology: P2pLink | None = None
    pcie_generation: int = Field(default=5, ge=1, le=6)
    pcie_width: Literal[1, 2, 4, 8, 16, 32] = 16
    ecc: bool = True
    graphics_clock_max_mhz: float = Field(default=1980.0, gt=0)
    graphics_clock_idle_mhz: float = Field(default=345.0, gt=0)
    memory_clock_max_mhz: float = Field(default=2619.0, gt=0)
    slowdown_celsius: float = 87.0
    shutdown_celsius: float = 92.0
    gpu_max_celsius: float = 87.0
    memory_max_celsius: float = 95.0
    # GPU Performance Monitoring (Hopper and later). Off by default, although the default
    # board is an H100, so that the built-in scenarios' scrapes stay as they were.
    gpm: bool = False
    # Pre-flight state (mirrorwatch-doctor reads it; no metric does).
    compute_capability: str = Field(default="9.0", pattern=r"^[0-9]{1,2}\.[0-9]$")
    persistence_mode: bool = True
    compute_mode: ComputeMode = "default"
    # The host's CPUs, split evenly over its NUMA nodes; GPU i sits on node i * nodes // count.
    numa_nodes: int = Field(default=1, ge=1, le=8)
    cpus: int = Field(default=32, ge=1, le=4096)
    # MIG devices; the GPUs they name have MIG on (no utilisation, like NVML's NotSupported on
    # a MIG parent), the others MIG off. Empty: no GPU reports MIG at all.
    mig: list[MigInstance] = Field(default_factory=list)

    @field_validator("idle_power_watts")
    @classmethod
    def _idle_below_limit(cls, idle: float, info: ValidationInfo) -> float:
        limit = info.data.get("power_limit_watts")
        if limit is not None and idle >= limit:
            raise PydanticCustomError("hardware", f"must be below power_limit_watts ({limit:g})")
        return idle

    @field_validator("topology")
    @classmethod
    def _topology_fits_nvlinks(
        cls, topology: P2pLink | None, info: ValidationInfo
    ) -> P2pLink | None:
        nvlinks = info.data.get("nvlinks")
        if nvlinks is None or topology is None:
            return topology
        if topology == "nvlink" and nvlinks == 0:
            raise PydanticCustomError("hardware", "nvlink needs gpus.nvlinks above 0")
        if topology != "nvlink" and nvlinks > 0:
            raise PydanticCustomError(
                "hardware", "GPUs with NVLink links reach each other over nvlink; set nvlinks: 0"
            )
        return topology

    def numa_node(self, gpu: int) -> int:
        """The NUMA node GPU ``gpu`` hangs off."""
        return gpu * self.numa_nodes // self.count

    def node_cpus(self, node: int) -> frozenset[int]:
        """The CPUs of NUMA node ``node`` (each node has an equal share, the last the rest)."""
        share = max(1, self.cpus // self.numa_nodes)
        last = self.cpus if node == self.numa_nodes - 1 else (node + 1) * share
        return frozenset(range(node * share, last))

    @property
    def peer_link(self) -> P2pLink:
        """How every GPU reaches every other one."""
        if self.topology is not None:
            return self.topology
        return "nvlink" if self.nvlinks > 0 else "pcie_switch"


# --- events ---------------------------------------------------------------------------------


class _Event(StrictModel):
    at: Duration
    duration: Duration | None = None
    gpu: int = Field(ge=0)

    @property
    def end(self) -> float:
        """When the event stops (infinity when it has no duration)."""
        return math.inf if self.duration is None else self.at + self.duration


class ThrottleEvent(_Event):
    """A clocks-event reason active for a while; violation time accrues meanwhile."""

    type: Literal["throttle"]
    reason: ClocksEventReason


class TemperatureEvent(_Event):
    """The GPU runs `delta_celsius` hotter, reached linearly over `ramp`."""

    type: Literal["temperature"]
    delta_celsius: float
    ramp: Duration = 0.0


class XidEvent(_Event):
    """`count` XID events of one number, spread over `duration` when given."""

    type: Literal["xid"]
    xid: int = Field(ge=1)
    count: int = Field(default=1, ge=1)


class GpuLostEvent(_Event):
    """The GPU falls off the bus: it answers nothing until `duration` ends."""

    type: Literal["gpu_lost"]


class PcieDowngradeEvent(_Event):
    """The PCIe link trains below its maximum generation and/or width."""

    type: Literal["pcie_downgrade"]
    generation: int | None = Field(default=None, ge=1, le=6)
    width: Literal[1, 2, 4, 8, 16, 32] | None = None

    @model_validator(mode="after")
    def _something_degraded(self) -> PcieDowngradeEvent:
        if self.generation is None and self.width is None:
            raise PydanticCustomError("event", "give generation, width or both")
        return self


class PcieReplaysEvent(_Event):
    """`count` PCIe replays, spread over `duration` when given."""

    type: Literal["pcie_replays"]
    count: int = Field(ge=1)


class NvlinkDownEvent(_Event):
    """One NVLink link goes down; its traffic stops."""

    type: Literal["nvlink_down"]
    link: int = Field(ge=0)


class NvlinkErrorsEvent(_Event):
    """`count` NVLink errors of one type on one link, spread over `duration` when given."""

    type: Literal["nvlink_errors"]
    link: int = Field(ge=0)
    error: NvlinkErrorType
    count: int = Field(ge=1)


class EccEvent(_Event):
    """`count` ECC errors of one type, spread over `duration` when given."""

    type: Literal["ecc"]
    error: EccErrorType
    count: int = Field(ge=1)


class PowerCapEvent(_Event):
    """The enforced power limit drops to `watts`; a GPU that wants more is pinned there."""

    type: Literal["power_cap"]
    watts: float = Field(gt=0)


class CollectiveHangEvent(_Event):
    """From `at` the GPU leaves the run's all-reduce: it stops, outside the collective, at 0%
    busy, while every other GPU of the run waits inside it (busy at near-idle power)."""

    type: Literal["collective_hang"]


Event = Annotated[
    ThrottleEvent
    | TemperatureEvent
    | XidEvent
    | GpuLostEvent
    | PcieDowngradeEvent
    | PcieReplaysEvent
    | NvlinkDownEvent
    | NvlinkErrorsEvent
    | EccEvent
    | PowerCapEvent
    | CollectiveHangEvent,
    Field(discriminator="type"),
]
EVENT_TYPES: tuple[str, ...] = tuple(
    get_args(member.model_fields["type"].annotation)[0] for member in get_args(get_args(Event)[0])
)


class Training(StrictModel):
    """The synchronous run a scenario trains on its GPUs (exporter/simulate/coupling.py)."""

    # The GPUs of the run, by index; left out: every GPU of the host.
    gpus: list[int] | None = None
    # The all-reduce's share of a step at full speed on the links it runs over.
    allreduce_share: float = Field(default=0.06, ge=0.0, lt=0.5)


# --- processes ------------------------------------------------------------------------------

# Above any Linux pid_max (2**22 at most), so a simulated pid never names a real process.
SIMULATED_PID_MIN = 2**22 + 1


class ProcessSpec(StrictModel):
    """A process with a context on one GPU from `at`, for `duration` (for good when unset).

    The GPU's own memory and utilisation readings are the scenario's profiles: describe the
    effect of a process with an override of the same GPU.
    """

    gpu: int = Field(ge=0)
    pid: int = Field(ge=SIMULATED_PID_MIN, le=2**32 - 1)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")
    type: Literal["compute", "graphics"] = "compute"
    memory_gib: float | None = Field(default=None, ge=0)
    sm_utilization: float | None = Field(default=None, ge=0, le=1)
    at: Duration = 0.0
    duration: Duration | None = None

    @property
    def end(self) -> float:
        return math.inf if self.duration is None else self.at + self.duration

    def present(self, t: float) -> bool:
        return self.at <= t < self.end
