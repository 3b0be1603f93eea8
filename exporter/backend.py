"""The GPU backend interface that the collectors read: NVML and the simulator both implement it.

Every reading returns its value in base units (bytes, watts, joules, hertz, seconds, ratios
0..1) or ``None`` when the GPU does not support it. ``None`` becomes an absent series, never 0.
A GPU that is lost or unreadable answers ``None`` to everything and ``alive()`` is False.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

TemperatureThreshold = Literal["slowdown", "shutdown", "gpu_max", "memory_max"]
Clock = Literal["graphics", "sm", "memory"]
NvlinkErrorType = Literal["replay", "recovery", "crc_flit", "crc_data"]
EccErrorType = Literal["corrected", "uncorrected"]
P2pLink = Literal["nvlink", "pcie_switch", "pcie_host_bridge", "numa_node", "cross_numa"]

TEMPERATURE_THRESHOLDS: tuple[TemperatureThreshold, ...] = (
    "slowdown",
    "shutdown",
    "gpu_max",
    "memory_max",
)
CLOCKS: tuple[Clock, ...] = ("graphics", "sm", "memory")
NVLINK_ERROR_TYPES: tuple[NvlinkErrorType, ...] = ("replay", "recovery", "crc_flit", "crc_data")
ECC_ERROR_TYPES: tuple[EccErrorType, ...] = ("corrected", "uncorrected")

# NVML's clocks-event reasons (nvmlClocksEventReason*), in the contract's label spelling and in
# the order of their bits: gpu_idle is 0x1, applications_clocks_setting 0x2, ... and
# display_clock_setting 0x100.
ClocksEventReason = Literal[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
]
CLOCKS_EVENT_REASONS: tuple[tuple[str, int], ...] = tuple(
    (reason, 1 << bit) for bit, reason in enumerate(get_args(ClocksEventReason))
)
# Violation-time policies (nvmlPerfPolicyType_t order), in the contract's label spelling.
THROTTLE_REASONS: tuple[str, ...] = (
    "power",
    "thermal",
    "sync_boost",
    "board_limit",
    "low_utilization",
    "reliability",
)


@dataclass(frozen=True)
class BackendStatus:
    """Whether the backend can read GPUs now, and why not when it cannot."""

    up: bool
    reason: str | None = None


@dataclass(frozen=True)
class MemoryBytes:
    used: float
    total: float


@dataclass(frozen=True)
class PcieLink:
    """Current and maximum PCIe link; a field the GPU does not report is None."""

    generation: int | None
    generation_max: int | None
    width: int | None
    width_max: int | None


@dataclass(frozen=True)
class NvlinkCounters:
    """One NVLink link: whether it is up, bytes moved, and errors by type."""

    up: bool
    transmit_bytes: float | None
    receive_bytes: float | None
    errors: Mapping[NvlinkErrorType, float]


ProcessType = Literal["compute", "graphics"]
PROCESS_TYPES: tuple[ProcessType, ...] = ("compute", "graphics")


@dataclass(frozen=True)
class GpuProcess:
    """One process with a context on the GPU (nvmlDeviceGet{Compute,Graphics}RunningProcesses).

    ``pid`` is in the host's (initial) PID namespace, as the driver reports it whatever the
    caller's namespace; ``name`` is "" when it cannot be read. ``used_memory_bytes`` is None
    where NVML does not report it (NVML_VALUE_NOT_AVAILABLE), ``sm_utilization_ratio`` where
    nvmlDeviceGetProcessUtilization has no sample of the process.
    """

    pid: int
    name: str
    type: ProcessType
    used_memory_bytes: float | None
    sm_utilization_ratio: float | None = None


@dataclass(frozen=True)
class GpuProcesses:
    """The processes on a GPU now: counts of the types NVML answered, and each process once
    (a process in both lists is listed once, as compute)."""

    counts: Mapping[ProcessType, int]
    processes: Sequence[GpuProcess]


@dataclass(frozen=True)
class GpmReading:
    """GPU Performance Monitoring metrics (Hopper and later) over the last sampling interval,
    ratios 0..1; a metric the GPU did not answer is None."""

    sm_activity_ratio: float | None
    sm_occupancy_ratio: float | None
    tensor_activity_ratio: float | None
    dram_activity_ratio: float | None


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance of a GPU instance) of a MIG-enabled GPU.

    ``profile`` is NVML's name for it (``3g.40gb``); ``memory`` its instance's framebuffer
    (None where not readable); ``processes`` how many compute processes it lists (None where
    its list is not readable); ``gpm`` the GPM metrics of its GPU instance (Hopper and later,
    driver 525 and later; None elsewhere or before a first interval).
    """

    mig_uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str
    memory: MemoryBytes | None
    processes: int | None = None
    gpm: GpmReading | None = None


@dataclass(frozen=True)
class PeerLink:
    """How this GPU reaches another GPU of the host (static topology)."""

    peer_index: int
    link: P2pLink


# --- Pre-flight readings (mirrorwatch-doctor): settings and health state read once, never on
# the scrape path. Kept apart from the scrape readings above so either can change alone.

ComputeMode = Literal["default", "exclusive_thread", "prohibited", "exclusive_process"]
P2pCapability = Literal["read", "write", "nvlink"]
P2P_CAPABILITIES: tuple[P2pCapability, ...] = ("read", "write", "nvlink")
# nvmlGpuP2PStatus_t in its order (NVML_P2P_STATUS_OK is 0 ... NVML_P2P_STATUS_UNKNOWN is 6).
P2pStatus = Literal[
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
]
P2P_STATUSES: tuple[P2pStatus, ...] = get_args(P2pStatus)


@dataclass(frozen=True)
class DeviceConfig:
    """A GPU's settings and health state, as a pre-flight check reads them; None: not reported.

    ``pcie_generation_gpu_max`` is the GPU's own best PCIe generation whatever the slot
    (``PcieLink.generation_max`` is the best the GPU and the slot manage together);
    ``local_cpus`` are the CPUs NVML names as close to the GPU (its CPU affinity).
    """

    compute_capability: tuple[int, int] | None
    persistence_mode: bool | None
    compute_mode: ComputeMode | None
    ecc_enabled: bool | None
    retired_pages_pending: bool | None
    remapped_rows_pending: bool | None
    remapped_rows_failed: bool | None
    mig_enabled: bool | None
    power_limit_default_watts: float | None
    pcie_generation_gpu_max: int | None
    numa_node: int | None
    local_cpus: frozenset[int] | None


class GpuDevice(Protocol):
    """One GPU. Identity is read once; every other method is a fresh reading."""

    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def pci_bus_id(self) -> str:
        """Canonical ``dddd:bb:dd.f`` lower-case form, as sysfs and TensorFlow print it."""
        ...

    def alive(self) -> bool:
        """Probe the GPU; False when it is lost or answers with an unknown error."""
        ...

    def utilization_ratio(self) -> float | None: ...

    def memory_utilization_ratio(self) -> float | None: ...

    def memory_bytes(self) -> MemoryBytes | None: ...

    def temperature_celsius(self) -> float | None: ...

    def temperature_threshold_celsius(self, threshold: TemperatureThreshold) -> float | None: ...

    def fan_speed_ratios(self) -> Sequence[float | None]:
        """One entry per fan; an empty sequence when the board has no fans NVML controls."""
        ...

    def power_watts(self) -> float | None: ...

    def power_limit_watts(self) -> float | None: ...

    def energy_joules_total(self) -> float | None: ...

    def clock_hertz(self, clock: Clock) -> float | None: ...

    def clock_max_hertz(self, clock: Clock) -> float | None: ...

    def clocks_event_reasons(self) -> Mapping[str, bool] | None:
        """Active flag per supported reason (labels of CLOCKS_EVENT_REASONS)."""
        ...

    def throttle_seconds_total(self) -> Mapping[str, float]:
        """Cumulative violation time per supported reason (labels of THROTTLE_REASONS)."""
        ...

    def pcie_link(self) -> PcieLink | None: ...

    def pcie_bytes_total(self) -> tuple[float, float] | None:
        """Cumulative (transmit, receive) bytes over PCIe."""
        ...

    def pcie_replays_total(self) -> float | None: ...

    def nvlinks(self) -> Mapping[int, NvlinkCounters]:
        """Every NVLink link the GPU has, by link number; empty when it has none."""
        ...

    def ecc_errors_total(self) -> Mapping[EccErrorType, float] | None:
        """Volatile ECC error counts (since the driver loaded); None when ECC is off."""
        ...

    def xid_errors_total(self) -> Mapping[int, float]:
        """XID events seen since the exporter started, by XID number."""
        ...

    def xid_last_event_timestamp_seconds(self) -> Mapping[int, float]:
        """Unix time of the latest XID event of each number seen since the exporter started.

        Only XID numbers with at least one event; lets alerts tell a new event from an old
        count across scrape gaps and exporter restarts.
        """
        ...

    def peers(self) -> Sequence[PeerLink]: ...

    def processes(self) -> GpuProcesses | None:
        """The processes on the GPU; None where NVML lists neither compute nor graphics ones."""
        ...

    def gpm(self) -> GpmReading | None:
        """The latest GPM metrics; None where the GPU has no GPM or no interval is done yet."""
        ...

    def config(self) -> DeviceConfig | None:
        """Pre-flight: the GPU's settings and health state; None while it is lost."""
        ...

    def mig_enabled(self) -> bool | None:
        """Whether MIG is on; None where the GPU has no MIG (NVML answers NotSupported)."""
        ...

    def mig_devices(self) -> Sequence[MigDevice]:
        """The MIG devices of a MIG-enabled GPU, in NVML's index order; none otherwise."""
        ...


class GpuBackend(Protocol):
    """The source of GPU readings: NVML on a real host, the simulator elsewhere."""

    @property
    def kind(self) -> Literal["nvml", "simulated"]: ...

    def start(self) -> None:
        """Begin serving readings and background work; never raises for a missing driver."""
        ...

    def shutdown(self) -> None: ...

    def status(self) -> BackendStatus: ...

    def driver_version(self) -> str | None: ...

    def gpus(self) -> Sequence[GpuDevice]:
        """The GPUs known now; empty while the backend is down."""
        ...

    def cuda_driver_version(self) -> tuple[int, int] | None:
        """Pre-flight: the newest CUDA (major, minor) the driver supports; None: unknown."""
        ...

    def p2p_status(self, first: int, second: int) -> Mapping[P2pCapability, P2pStatus]:
        """Pre-flight: whether GPU ``first`` reaches GPU ``second`` peer to peer, by capability.

        Only the capabilities NVML answered; empty when it answered none.
        """
        ...
