"""A fake pynvml module: the functions mirrorwatch calls, backed by plain Python GPUs.

Constants and the NVMLError class hierarchy are the real pynvml's, so the backend sees the
same error classes and codes it sees on a host. Every function call is counted in ``calls``.
"""

from __future__ import annotations

import collections
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import pynvml


@dataclass(frozen=True)
class FakeHandle:
    index: int
    epoch: int = 0  # FakeNvml.handle_epoch when it was handed out; handles compare by both


@dataclass
class FakeLink:
    active: bool = True
    remote_pci_bus_id: str = ""
    remote_type: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    errors: dict[int, int] = field(default_factory=dict)  # NVML_NVLINK_ERROR_* -> count
    transmit_kib: int = 0
    receive_kib: int = 0


@dataclass
class FakeGpu:
    """One GPU's raw NVML answers, in NVML's own units."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA A100-SXM4-80GB"
    pci_bus_id: str = "00000000:17:00.0"
    utilization_percent: int = 87
    memory_utilization_percent: int = 41
    memory_used: int = 30 * 2**30
    memory_total: int = 80 * 2**30
    temperature: int = 64
    thresholds: dict[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 90,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 95,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 88,
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: 95,
        }
    )
    fans_percent: list[int] = field(default_factory=lambda: [30, 55])
    power_mw: int = 250_500
    power_limit_mw: int = 400_000
    energy_mj: int = 123_456_789
    clocks_mhz: dict[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_CLOCK_GRAPHICS: 1410,
            pynvml.NVML_CLOCK_SM: 1410,
            pynvml.NVML_CLOCK_MEM: 1593,
        }
    )
    max_clocks_mhz: dict[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_CLOCK_GRAPHICS: 1410,
            pynvml.NVML_CLOCK_SM: 1410,
            pynvml.NVML_CLOCK_MEM: 1593,
        }
    )
    clocks_event_active: int = 0x4 | 0x40  # sw_power_cap, hw_thermal_slowdown
    clocks_event_supported: int = 0x1FF & ~0x100  # everything but display_clock_setting
    # Per NVML_PERF_POLICY_*; None: that policy is unsupported (its field and ViolationStatus).
    violation_ns: list[int | None] = field(
        default_factory=lambda: [2_500_000_000, 1_000_000_000, 0, 500_000_000, 7_000_000_000, 0]
    )
    pcie_generation: int = 4
    pcie_generation_max: int = 4
    pcie_width: int = 16
    pcie_width_max: int = 16
    pcie_tx_kb_per_s: int = 1000
    pcie_rx_kb_per_s: int = 3000
    pcie_tx_bytes: int | None = 5_000_000  # None: the PCIe byte-counter fields are unsupported
    pcie_rx_bytes: int | None = 9_000_000
    pcie_replays: int = 3
    nvlinks: dict[int, FakeLink] = field(default_factory=dict)
    ecc_enabled: bool | None = True  # None: ECC unsupported
    ecc_corrected: int = 12
    ecc_uncorrected: int = 1
    xid_events_supported: bool = True
    errors: dict[str, int] = field(default_factory=dict)  # function -> NVML_ERROR_* it raises
    # The nvmlReturn a field answers while nvmlDeviceGetFieldValues itself succeeds, by field id
    # (any scope) or (field id, scope id) (one NVLink link).
    field_errors: dict[int | tuple[int, int], int] = field(default_factory=dict)
    lost: bool = False  # every call on this GPU raises NVML_ERROR_GPU_IS_LOST
    # Running processes; None: that list answers NVML_ERROR_NOT_SUPPORTED.
    compute_processes: list[FakeProcess] | None = None
    graphics_processes: list[FakeProcess] | None = None
    # nvmlDeviceGetProcessUtilization's samples; None: NotSupported. Only those newer than the
    # timestamp asked for are returned; none newer: NVML_ERROR_NOT_FOUND, as the driver does.
    process_samples: list[FakeProcessSample] | None = None
    # GPM: nvmlGpmQueryDeviceSupport's isSupportedDevice (None: the call is NotSupported), and
    # nvmlGpmMetricsGet's value in percent by NVML_GPM_METRIC_* id (a missing id answers
    # NotSupported in its own nvmlReturn).
    gpm_supported: bool | None = False
    gpm_percent: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeProcess:
    """pynvml's friendly object of c_nvmlProcessInfo_v3_t (usedGpuMemory None: N/A)."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's member names
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


@dataclass
class FakeProcessSample:
    """pynvml's c_nvmlProcessUtilizationSample_t: percents, timestamp in microseconds."""

    pid: int
    timeStamp: int  # noqa: N815
    smUtil: int  # noqa: N815
    memUtil: int = 0  # noqa: N815
    encUtil: int = 0  # noqa: N815
    decUtil: int = 0  # noqa: N815


@dataclass
class FakeGpmSupport:
    version: int
    isSupportedDevice: int  # noqa: N815


@dataclass
class FakeGpmSample:
    """An allocated GPM sample: which GPU took it and when (the fake's take counter)."""

    gpu: int = -1
    taken: int = 0
    freed: bool = False


@dataclass
class FakeGpmMetric:
    metricId: int = 0  # noqa: N815
    nvmlReturn: int = 0  # noqa: N815
    value: float = 0.0


class FakeGpmMetricsGet:
    """pynvml's c_nvmlGpmMetricsGet_t, as the caller fills it in."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [FakeGpmMetric() for _ in range(pynvml.NVML_GPM_METRIC_MAX)]


@dataclass
class FakeValue:
    dVal: float = 0.0  # noqa: N815 - nvmlValue_t's member names
    uiVal: int = 0  # noqa: N815
    ulVal: int = 0  # noqa: N815
    ullVal: int = 0  # noqa: N815
    sllVal: int = 0  # noqa: N815
    siVal: int = 0  # noqa: N815
    usVal: int = 0  # noqa: N815


@dataclass
class FakeFieldValue:
    """pynvml's c_nvmlFieldValue_t: ``nvmlReturn`` is this one field's own outcome."""

    fieldId: int  # noqa: N815 - nvmlFieldValue_t's member names
    scopeId: int  # noqa: N815
    nvmlReturn: int  # noqa: N815
    valueType: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG  # noqa: N815
    value: FakeValue = field(default_factory=FakeValue)
    timestamp: int = 0
    latencyUsec: int = 0  # noqa: N815


@dataclass
class FakeEvent:
    device: FakeHandle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815


@dataclass
class FakePciInfo:
    busId: bytes  # noqa: N815


@dataclass
class FakeUtilization:
    gpu: int
    memory: int


@dataclass
class FakeMemory:
    used: int
    total: int
    free: int


@dataclass
class FakeViolation:
    referenceTime: int  # noqa: N815
    violationTime: int  # noqa: N815


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


class FakeNvml(types.ModuleType):
    """Stands in for the pynvml module; configure ``gpus`` and the failure knobs."""

    def __init__(self, gpus: Sequence[FakeGpu]) -> None:
        super().__init__("fake_pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = list(gpus)
        self.calls: collections.Counter[str] = collections.Counter()
        self.event_wait_timeouts_ms: list[int] = []  # each nvmlEventSetWait_v2's timeout
        self.init_error: int | None = None  # nvmlInit raises this NVML_ERROR_*
        self.driver_error: int | None = None  # every call after init raises this
        self.function_errors: dict[str, int] = {}  # function -> error, on every GPU
        self.driver_version = "550.54.15"
        self.topology: dict[frozenset[int], int] = {}
        self.events: collections.deque[FakeEvent] = collections.deque()
        self.event_sets_freed = 0
        self.initialized = 0
        self.handle_epoch = 0  # raise it to hand out handles unlike those handed out before
        self.c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet
        self.gpm_samples: list[FakeGpmSample] = []  # every sample allocated
        self.gpm_takes = 0

    # Plumbing.

    def _enter(self, function: str) -> None:
        self.calls[function] += 1
        if function in self.function_errors:
            _raise(self.function_errors[function])
        if self.driver_error is not None:
            _raise(self.driver_error)
        if self.initialized <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, function: str, handle: FakeHandle) -> FakeGpu:
        self._enter(function)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.errors:
            _raise(gpu.errors[function])
        return gpu

    def remove(self, name: str) -> None:
        """Make this binding lack ``name`` altogether, as an older nvidia-ml-py would."""
        setattr(self, name, None)

    # Lifecycle and system.

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            _raise(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:  # noqa: N802
        self._gpu("nvmlDeviceGetHandleByIndex", FakeHandle(index))
        return FakeHandle(index, self.handle_epoch)

    # Identity.

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:  # noqa: N802
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> bytes:  # noqa: N802
        return self._gpu("nvmlDeviceGetName", handle).name.encode()  # as older bindings do

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:  # noqa: N802
        return FakePciInfo(self._gpu("nvmlDeviceGetPciInfo", handle).pci_bus_id.encode())

    # Readings.

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return FakeUtilization(gpu.utilization_percent, gpu.memory_utilization_percent)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return FakeMemory(gpu.memory_used, gpu.memory_total, gpu.memory_total - gpu.memory_used)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu("nvmlDeviceGetTemperature", handle).temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: FakeHandle, which: int) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetTemperatureThreshold", handle).thresholds[which]

    def nvmlDeviceGetNumFans(self, handle: FakeHandle) -> int:  # noqa: N802
        return len(self._gpu("nvmlDeviceGetNumFans", handle).fans_percent)

    def nvmlDeviceGetFanSpeed_v2(self, handle: FakeHandle, fan: int) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetFanSpeed_v2", handle).fans_percent[fan]

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock: int) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetClockInfo", handle).clocks_mhz[clock]

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, clock: int) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetMaxClockInfo", handle).max_clocks_mhz[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clocks_event_active

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetSupportedClocksEventReasons", handle)
        return gpu.clocks_event_supported

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clocks_event_active

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetSupportedClocksThrottleReasons", handle)
        return gpu.clocks_event_supported

    def nvmlDeviceGetViolationStatus(self, handle: FakeHandle, policy: int) -> FakeViolation:  # noqa: N802
        nanoseconds = self._gpu("nvmlDeviceGetViolationStatus", handle).violation_ns[policy]
        if nanoseconds is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return FakeViolation(referenceTime=0, violationTime=nanoseconds)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_generation

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_generation_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetPcieThroughput", handle)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return gpu.pcie_tx_kb_per_s
        return gpu.pcie_rx_kb_per_s

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu("nvmlDeviceGetPcieReplayCounter", handle).pcie_replays

    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetEccMode", handle)
        if gpu.ecc_enabled is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_FEATURE_ENABLED if gpu.ecc_enabled else pynvml.NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, kind: int, counter: int) -> int:  # noqa: N802
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        assert counter == pynvml.NVML_VOLATILE_ECC
        if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    # NVLink and topology.

    def _link(self, function: str, handle: FakeHandle, link: int) -> FakeLink:
        gpu = self._gpu(function, handle)
        if not gpu.nvlinks:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link not in gpu.nvlinks:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:  # noqa: N802
        return int(self._link("nvmlDeviceGetNvLinkState", handle, link).active)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:  # noqa: N802
        errors = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link).errors
        if counter not in errors:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return errors[counter]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> FakePciInfo:  # noqa: N802
        remote = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).remote_pci_bus_id
        return FakePciInfo(remote.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:  # noqa: N802
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link).remote_type

    def nvmlDeviceGetTopologyCommonAncestor(self, first: FakeHandle, second: FakeHandle) -> int:  # noqa: N802
        self._gpu("nvmlDeviceGetTopologyCommonAncestor", first)
        pair = frozenset((first.index, second.index))
        if pair not in self.topology:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.topology[pair]

    # Field values.

    def nvmlDeviceGetFieldValues(  # noqa: N802
        self, handle: FakeHandle, field_ids: Sequence[int | tuple[int, int]]
    ) -> list[FakeFieldValue]:
        """As pynvml's: raises only when the call as a whole fails; each field's own outcome is
        its value's ``nvmlReturn`` (pynvml returns the c_nvmlFieldValue_t array unchecked)."""
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        answers = []
        for requested in field_ids:
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            value = self._field(gpu, field_id, scope)
            code = gpu.field_errors.get(
                (field_id, scope), gpu.field_errors.get(field_id, pynvml.NVML_SUCCESS)
            )
            if value is None and code == pynvml.NVML_SUCCESS:
                code = pynvml.NVML_ERROR_NOT_SUPPORTED
            answers.append(
                FakeFieldValue(field_id, scope, code, value=FakeValue(ullVal=value or 0))
            )
        return answers

    @staticmethod
    def _field(gpu: FakeGpu, field_id: int, scope: int) -> int | None:
        link = gpu.nvlinks.get(scope)
        ecc: dict[int, int] = {}
        if gpu.ecc_enabled is not None:
            ecc[pynvml.NVML_FI_DEV_ECC_CURRENT] = int(gpu.ecc_enabled)
        if gpu.ecc_enabled:
            ecc[pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = gpu.ecc_corrected
            ecc[pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL] = gpu.ecc_uncorrected
        values: dict[int, int | None] = {
            **{
                pynvml.NVML_FI_DEV_PERF_POLICY_POWER + i: ns
                for i, ns in enumerate(gpu.violation_ns)
            },
            **ecc,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: gpu.energy_mj,
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: gpu.pcie_replays,
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: gpu.pcie_tx_bytes,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: gpu.pcie_rx_bytes,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: None
            if link is None
            else link.transmit_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: None
            if link is None
            else link.receive_kib,
        }
        return values.get(field_id)

    # Events.

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        self._enter("nvmlEventSetCreate")
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types_: int, event_set: str) -> None:  # noqa: N802
        gpu = self._gpu("nvmlDeviceRegisterEvents", handle)
        assert types_ == pynvml.nvmlEventTypeXidCriticalError
        if not gpu.xid_events_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> FakeEvent:  # noqa: N802
        self._enter("nvmlEventSetWait_v2")
        self.event_wait_timeouts_ms.append(timeout_ms)
        if not self.events:
            time.sleep(min(timeout_ms, 1) / 1000)  # a token block, so a polling thread idles
            _raise(pynvml.NVML_ERROR_TIMEOUT)
        return self.events.popleft()

    def nvmlEventSetFree(self, event_set: str) -> None:  # noqa: N802
        self._enter("nvmlEventSetFree")
        self.event_sets_freed += 1

    def xid(self, gpu: int, xid: int) -> None:
        """Queue an XID event as the driver would report it."""
        handle = FakeHandle(gpu, self.handle_epoch)
        self.events.append(FakeEvent(handle, pynvml.nvmlEventTypeXidCriticalError, xid))

    # Processes.

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:  # noqa: N802
        found = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle).compute_processes
        if found is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(found)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:  # noqa: N802
        found = self._gpu("nvmlDeviceGetGraphicsRunningProcesses", handle).graphics_processes
        if found is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(found)

    def nvmlDeviceGetProcessUtilization(  # noqa: N802
        self, handle: FakeHandle, last_seen_timestamp: int
    ) -> list[FakeProcessSample]:
        samples = self._gpu("nvmlDeviceGetProcessUtilization", handle).process_samples
        if samples is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        newer = [sample for sample in samples if sample.timeStamp > last_seen_timestamp]
        if not newer:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return newer

    # GPM.

    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> FakeGpmSupport:  # noqa: N802
        supported = self._gpu("nvmlGpmQueryDeviceSupport", handle).gpm_supported
        if supported is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return FakeGpmSupport(pynvml.NVML_GPM_SUPPORT_VERSION, int(supported))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:  # noqa: N802
        self._enter("nvmlGpmSampleAlloc")
        sample = FakeGpmSample()
        self.gpm_samples.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:  # noqa: N802
        self._enter("nvmlGpmSampleFree")
        assert not sample.freed, "a GPM sample freed twice"
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: FakeGpmSample) -> FakeGpmSample:  # noqa: N802
        gpu = self._gpu("nvmlGpmSampleGet", handle)
        if not gpu.gpm_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        assert not sample.freed
        self.gpm_takes += 1
        sample.gpu, sample.taken = handle.index, self.gpm_takes
        return sample

    def nvmlGpmMetricsGet(self, request: FakeGpmMetricsGet) -> FakeGpmMetricsGet:  # noqa: N802
        self._enter("nvmlGpmMetricsGet")
        first, second = request.sample1, request.sample2
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        if first is None or second is None or first.gpu != second.gpu or first.gpu < 0:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        assert first.taken < second.taken, "sample1 must be the earlier sample"
        gpu = self.gpus[first.gpu]
        for metric in request.metrics[: request.numMetrics]:
            percent = gpu.gpm_percent.get(metric.metricId)
            metric.nvmlReturn = (
                pynvml.NVML_ERROR_NOT_SUPPORTED if percent is None else pynvml.NVML_SUCCESS
            )
            metric.value = 0.0 if percent is None else percent
        return request
