"""The simulated GPU backend: a scenario's GPUs behind the same interface as NVML."""

from __future__ import annotations

import functools
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal

from mirrorwatch.exporter.backend import (
    THROTTLE_REASONS,
    BackendStatus,
    Clock,
    DeviceConfig,
    EccErrorType,
    GpmReading,
    GpuProcess,
    GpuProcesses,
    MemoryBytes,
    MigDevice,
    NvlinkCounters,
    P2pCapability,
    P2pLink,
    P2pStatus,
    PcieLink,
    PeerLink,
    ProcessType,
    TemperatureThreshold,
)
from mirrorwatch.exporter.simulate.coupling import Run
from mirrorwatch.exporter.simulate.models import Hardware, ProcessSpec
from mirrorwatch.exporter.simulate.physics import (
    ENERGY,
    NVLINK,
    PCIE_TRANSMIT,
    THROTTLE,
    GpuPhysics,
    Sample,
)
from mirrorwatch.exporter.simulate.scenario import Scenario, ScenarioError

# The PCI buses of an 8-GPU HGX H100 baseboard; further GPUs go to further PCI domains.
_PCI_BUSES: Final = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
_TICK_SLACK_SECONDS: Final = 0.005
_GIB: Final = 1024.0**3
# GPM on a simulated Hopper-class GPU, as shares of its utilisation (NVML's "a kernel ran"
# time): busy SMs, resident warps and tensor pipes are a fraction of the time a kernel runs.
# DRAM bandwidth follows the memory-controller utilisation.
_SM_ACTIVITY_PER_UTILIZATION: Final = 0.85
_SM_OCCUPANCY_PER_UTILIZATION: Final = 0.5
_TENSOR_ACTIVITY_PER_UTILIZATION: Final = 0.6
# Peer-to-peer as NVML answers it for each way two GPUs reach each other: PCIe P2P works under
# one root complex, not across the sockets' interconnect (IOH topology not supported).
_P2P: Final[Mapping[P2pLink, Mapping[P2pCapability, P2pStatus]]] = {
    "nvlink": {"read": "ok", "write": "ok", "nvlink": "ok"},
    "pcie_switch": {"read": "ok", "write": "ok", "nvlink": "not_supported"},
    "pcie_host_bridge": {"read": "ok", "write": "ok", "nvlink": "not_supported"},
    "numa_node": {"read": "ok", "write": "ok", "nvlink": "not_supported"},
    "cross_numa": {
        "read": "topology_not_supported",
        "write": "topology_not_supported",
        "nvlink": "not_supported",
    },
}


def gpu_uuid(seed: int, index: int) -> str:
    """A stable UUID for GPU `index` of a scenario with `seed`, in NVML's "GPU-..." form."""
    digest = hashlib.sha256(f"mirrorwatch-simulated-gpu:{seed}:{index}".encode()).digest()
    return f"GPU-{uuid.UUID(bytes=digest[:16], version=4)}"


def mig_uuid(gpu_uuid: str, gpu_instance: int, compute_instance: int) -> str:
    """A stable UUID for a MIG device, in NVML's "MIG-..." form (R470 and later)."""
    key = f"mirrorwatch-simulated-mig:{gpu_uuid}:{gpu_instance}:{compute_instance}"
    digest = hashlib.sha256(key.encode()).digest()
    return f"MIG-{uuid.UUID(bytes=digest[:16], version=4)}"


def pci_bus_id(index: int) -> str:
    """A distinct canonical ``dddd:bb:dd.f`` address for GPU `index`."""
    domain, slot = divmod(index, len(_PCI_BUSES))
    return f"{domain:04x}:{_PCI_BUSES[slot]:02x}:00.0"


class SimulatedGpu:
    """One simulated GPU. Readings come from whole-second samples; counters integrate them.

    Counters sum each second's rate over the whole seconds before now plus the part of the
    current one, so a reading depends only on the clock value. The running sum is cached and
    advanced incrementally under a lock (scrapes run concurrently), and rebuilt from zero when
    the clock goes backwards. `epoch` gives the Unix time of scenario second 0, for readings
    that are timestamps.
    """

    def __init__(
        self,
        physics: GpuPhysics,
        hardware: Hardware,
        seed: int,
        now: Callable[[], float],
        epoch: Callable[[], float],
        processes: Sequence[ProcessSpec] | None = None,
        sample: Callable[[int], Sample] | None = None,
    ) -> None:
        self._physics = physics
        # Each second's sample: the GPU alone, or coupled to its run's other GPUs.
        self._sample_of = physics.sample if sample is None else sample
        self._processes = (
            None if processes is None else tuple(p for p in processes if p.gpu == physics.index)
        )
        self._hardware = hardware
        self._mig = tuple(spec for spec in hardware.mig if spec.gpu == physics.index)
        self._now = now
        self._epoch = epoch
        self._index = physics.index
        self._uuid = gpu_uuid(seed, physics.index)
        self._pci_bus_id = pci_bus_id(physics.index)
        self._thresholds: Mapping[str, float] = {
            "slowdown": hardware.slowdown_celsius,
            "shutdown": hardware.shutdown_celsius,
            "gpu_max": hardware.gpu_max_celsius,
            "memory_max": hardware.memory_max_celsius,
        }
        self._clock_max_hertz: Mapping[str, float] = {
            "graphics": hardware.graphics_clock_max_mhz * 1e6,
            "sm": hardware.graphics_clock_max_mhz * 1e6,
            "memory": hardware.memory_clock_max_mhz * 1e6,
        }
        self._peers: tuple[PeerLink, ...] = tuple(
            PeerLink(peer, hardware.peer_link)
            for peer in range(hardware.count)
            if peer != physics.index
        )
        self._lock = threading.Lock()
        # The last two seconds' samples: a scrape reads gauges of the new second before its
        # counters integrate the previous one.
        self._samples: dict[int, Sample] = {}
        self._integrated_to = 0  # whole seconds already summed into _totals
        self._totals = [0.0] * physics.rate_count

    # --- identity ---------------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self._index

    @property
    def uuid(self) -> str:
        return self._uuid

    @property
    def name(self) -> str:
        return self._hardware.name

    @property
    def pci_bus_id(self) -> str:
        return self._pci_bus_id

    # --- time, samples and integration -----------------------------------------------------

    def _time(self) -> float:
        t = self._now()
        return t if t > 0.0 else 0.0

    def _sample_at(self, second: int) -> Sample:
        """The sample of `second`, cached. Caller locks."""
        sample = self._samples.get(second)
        if sample is None:
            sample = self._sample_of(second)
            if len(self._samples) >= 2:
                del self._samples[min(self._samples)]
            self._samples[second] = sample
        return sample

    def _sample(self) -> Sample | None:
        """The current sample, or None while the GPU is lost."""
        t = self._time()
        if self._physics.lost(t):
            return None
        with self._lock:
            return self._sample_at(int(t))

    def _integrate_to(self, second: int) -> list[float]:
        """The counters summed over every whole second before `second`. Caller locks."""
        if second < self._integrated_to:  # the clock went backwards: start again
            self._integrated_to = 0
            self._totals = [0.0] * len(self._totals)
        totals = self._totals
        for passed in range(self._integrated_to, second):
            cached = self._samples.get(passed)
            rates = (cached or self._sample_of(passed)).rates
            for i, rate in enumerate(rates):
                totals[i] += rate
        self._integrated_to = second
        return totals

    def _counters(self, first: int, count: int) -> list[float] | None:
        """Integrated counters `first` .. `first + count - 1` now (layout of Sample.rates).

        None while the GPU is lost.
        """
        t = self._time()
        if self._physics.lost(t):
            return None
        return self._counters_at(t, first, count)[1]

    def _counters_at(self, t: float, first: int, count: int) -> tuple[Sample, list[float]]:
        """The sample at `t` and counters `first` .. `first + count - 1` at `t`."""
        second = int(t)
        fraction = t - second
        with self._lock:
            totals = self._integrate_to(second)
            sample = self._sample_at(second)
            rates = sample.rates
            return sample, [totals[i] + fraction * rates[i] for i in range(first, first + count)]

    def catch_up(self) -> None:
        """Integrate up to now and evaluate the current second, so that reads find it done."""
        second = int(self._time())
        with self._lock:
            self._integrate_to(second)
            self._sample_at(second)

    # --- readings ---------------------------------------------------------------------------

    def alive(self) -> bool:
        return not self._physics.lost(self._time())

    def utilization_ratio(self) -> float | None:
        sample = self._sample()
        return None if sample is None or self._mig else sample.utilization

    def memory_utilization_ratio(self) -> float | None:
        sample = self._sample()
        return None if sample is None or self._mig else sample.memory_utilization

    def memory_bytes(self) -> MemoryBytes | None:
        sample = self._sample()
        return None if sample is None else sample.memory

    def temperature_celsius(self) -> float | None:
        sample = self._sample()
        return None if sample is None else sample.temperature_celsius

    def temperature_threshold_celsius(self, threshold: TemperatureThreshold) -> float | None:
        return self._thresholds[threshold] if self.alive() else None

    def fan_speed_ratios(self) -> Sequence[float | None]:
        sample = self._sample()
        return () if sample is None else sample.fans

    def power_watts(self) -> float | None:
        sample = self._sample()
        return None if sample is None else sample.power_watts

    def power_limit_watts(self) -> float | None:
        sample = self._sample()
        return None if sample is None else sample.power_limit_watts

    def energy_joules_total(self) -> float | None:
        counters = self._counters(ENERGY, 1)
        return None if counters is None else counters[0]

    def clock_hertz(self, clock: Clock) -> float | None:
        sample = self._sample()
        if sample is None:
            return None
        return sample.memory_clock_hertz if clock == "memory" else sample.graphics_clock_hertz

    def clock_max_hertz(self, clock: Clock) -> float | None:
        return self._clock_max_hertz[clock] if self.alive() else None

    def clocks_event_reasons(self) -> Mapping[str, bool] | None:
        sample = self._sample()
        return None if sample is None else sample.reasons

    def throttle_seconds_total(self) -> Mapping[str, float]:
        counters = self._counters(THROTTLE, len(THROTTLE_REASONS))
        return {} if counters is None else dict(zip(THROTTLE_REASONS, counters, strict=True))

    def pcie_link(self) -> PcieLink | None:
        sample = self._sample()
        return None if sample is None else sample.pcie

    def pcie_bytes_total(self) -> tuple[float, float] | None:
        counters = self._counters(PCIE_TRANSMIT, 2)
        return None if counters is None else (counters[0], counters[1])

    def pcie_replays_total(self) -> float | None:
        t = self._time()
        return None if self._physics.lost(t) else self._physics.pcie_replays(t)

    def nvlinks(self) -> Mapping[int, NvlinkCounters]:
        t = self._time()
        if self._physics.lost(t):
            return {}
        sample, counters = self._counters_at(t, NVLINK, 2 * self._physics.nvlink_count)
        errors = self._physics.nvlink_errors
        return {
            link: NvlinkCounters(up, counters[2 * link], counters[2 * link + 1], errors(link, t))
            for link, up in enumerate(sample.nvlink_up)
        }

    def ecc_errors_total(self) -> Mapping[EccErrorType, float] | None:
        t = self._time()
        if not self._hardware.ecc or self._physics.lost(t):
            return None
        return self._physics.ecc_counts(t)

    def xid_errors_total(self) -> Mapping[int, float]:
        t = self._time()
        return {} if self._physics.lost(t) else self._physics.xid_counts(t)

    def xid_last_event_timestamp_seconds(self) -> Mapping[int, float]:
        t = self._time()
        if self._physics.lost(t):
            return {}
        epoch = self._epoch()
        return {xid: epoch + at for xid, at in self._physics.xid_last_events(t).items()}

    def peers(self) -> Sequence[PeerLink]:
        return self._peers if self.alive() else ()

    def processes(self) -> GpuProcesses | None:
        t = self._time()
        if self._processes is None or self._physics.lost(t):
            return None
        present = [spec for spec in self._processes if spec.present(t)]
        counts: dict[ProcessType, int] = {"compute": 0, "graphics": 0}
        for spec in present:
            counts[spec.type] += 1
        return GpuProcesses(
            counts=counts,
            processes=tuple(
                GpuProcess(
                    pid=spec.pid,
                    name=spec.name,
                    type=spec.type,
                    used_memory_bytes=None if spec.memory_gib is None else spec.memory_gib * _GIB,
                    sm_utilization_ratio=spec.sm_utilization,
                )
                for spec in present
            ),
        )

    def mig_enabled(self) -> bool | None:
        return bool(self._mig) if self._hardware.mig else None

    def mig_devices(self) -> Sequence[MigDevice]:
        if not self._mig or self._sample() is None:
            return ()
        return tuple(
            MigDevice(
                mig_uuid=mig_uuid(self._uuid, spec.gpu_instance, spec.compute_instance),
                gpu_instance=spec.gpu_instance,
                compute_instance=spec.compute_instance,
                profile=spec.profile,
                memory=MemoryBytes(
                    spec.memory_gib * spec.memory_used_ratio * _GIB, spec.memory_gib * _GIB
                ),
                processes=spec.processes,
            )
            for spec in self._mig
        )

    def gpm(self) -> GpmReading | None:
        if not self._hardware.gpm or self._mig:
            return None
        sample = self._sample()
        if sample is None:
            return None
        # SM activity counts the SMs computing, not those of the all-reduce's wait kernel.
        busy = sample.compute
        return GpmReading(
            sm_activity_ratio=busy * _SM_ACTIVITY_PER_UTILIZATION,
            sm_occupancy_ratio=busy * _SM_OCCUPANCY_PER_UTILIZATION,
            tensor_activity_ratio=busy * _TENSOR_ACTIVITY_PER_UTILIZATION,
            dram_activity_ratio=sample.memory_utilization,
        )

    def config(self) -> DeviceConfig | None:
        if not self.alive():
            return None
        hardware = self._hardware
        major, minor = hardware.compute_capability.split(".")
        ecc = hardware.ecc
        return DeviceConfig(
            compute_capability=(int(major), int(minor)),
            persistence_mode=hardware.persistence_mode,
            compute_mode=hardware.compute_mode,
            ecc_enabled=ecc,
            retired_pages_pending=False if ecc else None,
            remapped_rows_pending=False if ecc else None,
            remapped_rows_failed=False if ecc else None,
            mig_enabled=bool(self._mig),
            power_limit_default_watts=hardware.power_limit_watts,
            pcie_generation_gpu_max=hardware.pcie_generation,
            numa_node=hardware.numa_node(self._index),
            local_cpus=hardware.node_cpus(hardware.numa_node(self._index)),
        )


class SimulatedBackend:
    """A host of simulated GPUs driven by a scenario.

    `clock` returns seconds since the scenario started. By default that is time.monotonic()
    since start() (or since construction, for readings taken before start()), and start() also
    runs a thread that evaluates each GPU once a second, so that a scrape finds the second's
    readings and counters ready instead of catching up on the seconds since the last one.

    Timestamps (the XID latest-event times) map scenario time to Unix time as `epoch` plus
    scenario seconds. By default `epoch` is the wall-clock time at which the scenario clock
    read 0: taken at start() with the default clock, at construction with an injected one.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        clock: Callable[[], float] | None = None,
        epoch: float | None = None,
    ) -> None:
        problem = scenario.reference_problem()
        if problem is not None:
            field, what = problem
            raise ScenarioError(f"scenario: {field}: {what}")
        self._scenario = scenario
        self._clock = clock
        self._started_at = time.monotonic()
        self._fixed_epoch = epoch
        self._epoch = time.time() - self._now() if epoch is None else epoch
        physics = tuple(GpuPhysics(scenario, index) for index in range(scenario.gpus.count))
        run = Run(scenario, physics)
        self._gpus = tuple(
            SimulatedGpu(
                gpu,
                scenario.gpus,
                scenario.seed,
                self._now,
                self._wall_epoch,
                scenario.processes,
                functools.partial(run.sample, gpu.index) if run.coupled else None,
            )
            for gpu in physics
        )
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return time.monotonic() - self._started_at

    def _wall_epoch(self) -> float:
        return self._epoch

    @property
    def kind(self) -> Literal["simulated"]:
        return "simulated"

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    def start(self) -> None:
        if self._clock is not None:
            return
        self._started_at = time.monotonic()
        if self._fixed_epoch is None:
            self._epoch = time.time()
        if self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(
                target=self._tick, name="mirrorwatch-simulator", daemon=True
            )
            self._ticker.start()

    def _tick(self) -> None:
        # Wake just after each whole second, when a new sample is due.
        while not self._stop.wait(1.0 - self._now() % 1.0 + _TICK_SLACK_SECONDS):
            for gpu in self._gpus:
                gpu.catch_up()

    def shutdown(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5.0)
            self._ticker = None

    def status(self) -> BackendStatus:
        return BackendStatus(up=True)

    def driver_version(self) -> str:
        return f"simulated-{self._scenario.driver_version}"

    def gpus(self) -> Sequence[SimulatedGpu]:
        return self._gpus

    def cuda_driver_version(self) -> tuple[int, int]:
        major, minor = self._scenario.cuda_version.split(".")
        return int(major), int(minor)

    def p2p_status(self, first: int, second: int) -> Mapping[P2pCapability, P2pStatus]:
        count = len(self._gpus)
        if first == second or not (0 <= first < count and 0 <= second < count):
            return {}
        if not (self._gpus[first].alive() and self._gpus[second].alive()):
            return {}
        return _P2P[self._scenario.gpus.peer_link]
