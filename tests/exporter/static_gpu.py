"""A GpuDevice/GpuBackend test double with fixed readings, for collector and route tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mirrorwatch.exporter.backend import (
    BackendStatus,
    Clock,
    DeviceConfig,
    EccErrorType,
    GpmReading,
    GpuDevice,
    GpuProcesses,
    MemoryBytes,
    MigDevice,
    NvlinkCounters,
    P2pCapability,
    P2pStatus,
    PcieLink,
    PeerLink,
    TemperatureThreshold,
)

GIB = 1024**3
ECC_COUNTS: dict[EccErrorType, float] = {"corrected": 2.0, "uncorrected": 0.0}


@dataclass
class StaticGpu:
    """Every reading of one GPU, fixed; set a field to None to make it unsupported."""

    index: int = 0
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "0000:1b:00.0"
    is_alive: bool = True
    utilization: float | None = 0.97
    memory_utilization: float | None = 0.41
    memory: MemoryBytes | None = field(default_factory=lambda: MemoryBytes(60 * GIB, 80 * GIB))
    temperature: float | None = 64.0
    thresholds: Mapping[TemperatureThreshold, float] = field(
        default_factory=lambda: {"slowdown": 87.0, "shutdown": 92.0, "gpu_max": 87.0}
    )
    fans: Sequence[float | None] = (0.45,)
    power: float | None = 612.5
    power_limit: float | None = 700.0
    energy: float | None = 123456.789
    clocks: Mapping[Clock, float] = field(
        default_factory=lambda: {"graphics": 1.98e9, "sm": 1.98e9, "memory": 2.619e9}
    )
    clocks_max: Mapping[Clock, float] = field(
        default_factory=lambda: {"graphics": 1.98e9, "sm": 1.98e9, "memory": 2.619e9}
    )
    event_reasons: Mapping[str, bool] | None = field(
        default_factory=lambda: {"gpu_idle": False, "sw_thermal_slowdown": True}
    )
    throttle: Mapping[str, float] = field(default_factory=lambda: {"thermal": 12.5, "power": 0.0})
    pcie: PcieLink | None = field(default_factory=lambda: PcieLink(5, 5, 16, 16))
    pcie_bytes: tuple[float, float] | None = (1e9, 2e9)
    pcie_replays: float | None = 0.0
    links: Mapping[int, NvlinkCounters] = field(
        default_factory=lambda: {
            0: NvlinkCounters(True, 5e9, 6e9, {"replay": 0, "recovery": 0, "crc_flit": 3}),
        }
    )
    ecc: Mapping[EccErrorType, float] | None = field(default_factory=lambda: dict(ECC_COUNTS))
    xids: Mapping[int, float] = field(default_factory=dict)
    xid_last_events: Mapping[int, float] = field(default_factory=dict)
    peer_links: Sequence[PeerLink] = ()
    process_list: GpuProcesses | None = None
    gpm_reading: GpmReading | None = None
    device_config: DeviceConfig | None = None  # pre-flight readings (mirrorwatch-doctor)

    def alive(self) -> bool:
        return self.is_alive

    def utilization_ratio(self) -> float | None:
        return self.utilization

    def memory_utilization_ratio(self) -> float | None:
        return self.memory_utilization

    def memory_bytes(self) -> MemoryBytes | None:
        return self.memory

    def temperature_celsius(self) -> float | None:
        return self.temperature

    def temperature_threshold_celsius(self, threshold: TemperatureThreshold) -> float | None:
        return self.thresholds.get(threshold)

    def fan_speed_ratios(self) -> Sequence[float | None]:
        return self.fans

    def power_watts(self) -> float | None:
        return self.power

    def power_limit_watts(self) -> float | None:
        return self.power_limit

    def energy_joules_total(self) -> float | None:
        return self.energy

    def clock_hertz(self, clock: Clock) -> float | None:
        return self.clocks.get(clock)

    def clock_max_hertz(self, clock: Clock) -> float | None:
        return self.clocks_max.get(clock)

    def clocks_event_reasons(self) -> Mapping[str, bool] | None:
        return self.event_reasons

    def throttle_seconds_total(self) -> Mapping[str, float]:
        return self.throttle

    def pcie_link(self) -> PcieLink | None:
        return self.pcie

    def pcie_bytes_total(self) -> tuple[float, float] | None:
        return self.pcie_bytes

    def pcie_replays_total(self) -> float | None:
        return self.pcie_replays

    def nvlinks(self) -> Mapping[int, NvlinkCounters]:
        return self.links

    def ecc_errors_total(self) -> Mapping[EccErrorType, float] | None:
        return self.ecc

    def xid_errors_total(self) -> Mapping[int, float]:
        return self.xids

    def xid_last_event_timestamp_seconds(self) -> Mapping[int, float]:
        return self.xid_last_events

    def peers(self) -> Sequence[PeerLink]:
        return self.peer_links

    def processes(self) -> GpuProcesses | None:
        return self.process_list

    def gpm(self) -> GpmReading | None:
        return self.gpm_reading

    def config(self) -> DeviceConfig | None:
        return self.device_config

    def mig_enabled(self) -> bool | None:
        return None

    def mig_devices(self) -> Sequence[MigDevice]:
        return ()


@dataclass
class StaticBackend:
    """A backend over fixed GPUs; ``status`` can be set to model NVML being unavailable."""

    devices: Sequence[GpuDevice] = ()
    status_now: BackendStatus = field(default_factory=lambda: BackendStatus(up=True))
    started: int = 0
    stopped: int = 0

    @property
    def kind(self) -> Literal["nvml", "simulated"]:
        return "nvml"

    def start(self) -> None:
        self.started += 1

    def shutdown(self) -> None:
        self.stopped += 1

    def status(self) -> BackendStatus:
        return self.status_now

    def driver_version(self) -> str | None:
        return "550.90.07" if self.status_now.up else None

    def gpus(self) -> Sequence[GpuDevice]:
        return self.devices

    def cuda_driver_version(self) -> tuple[int, int] | None:
        return (12, 4) if self.status_now.up else None

    def p2p_status(self, first: int, second: int) -> Mapping[P2pCapability, P2pStatus]:
        return {}
