"""A stand-in libnvidia-ml at the ctypes boundary: one driver branch on one class of board.

Installed as the binding's ``nvmlLib`` (what ``CDLL("libnvidia-ml.so.1")`` would return), so the
real nvidia-ml-py runs unchanged and looks each C symbol up by name: a symbol the branch's
header does not declare raises AttributeError, which pynvml turns into FunctionNotFound, as
``bench/peers/fakenvml`` does. Each method takes the C arguments pynvml passes (handles,
``byref`` pointers, arrays) and answers an NVML return code. Process lists are written as raw
bytes with the entry size that branch's library writes, so a reader with the wrong struct gets
the scrambled pids users saw (nvitop#75).
"""

# ruff: noqa: N802, N815 -- the methods are NVML's own C symbols.
from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from tests.exporter.nvml_standin.boards import GIB, Board, MigSlot
from tests.exporter.nvml_standin.branches import Branch

OK, INVALID, NOT_SUPPORTED, INSUFFICIENT_SIZE, NOT_FOUND = 0, 2, 3, 7, 6
VERSION_MISMATCH = 25
NOT_AVAILABLE = 2**64 - 1
NO_INSTANCE = 2**32 - 1
MEMORY_V2 = 0x02000028
UTILIZATION = (83, 41)  # percent: gpu, memory
TEMPERATURE = 61
THRESHOLDS = {0: 92, 1: 89, 2: 95, 3: 87}  # shutdown, slowdown, mem max, gpu max
POWER_MW, LIMIT_MW, ENERGY_MJ = 250_500, 400_000, 123_456_789
CLOCKS = {0: 1410, 1: 1410, 2: 1593}
PCIE = (4, 16)  # generation, width
ACTIVE_REASONS, SUPPORTED_REASONS = 0x4, 0x1FF & ~0x100
VIOLATION_NS = (2_500_000_000, 1_000_000_000, 0, 500_000_000, 7_000_000_000, 0)
FAN_PERCENT = 37
PCIE_BYTES = (11 * GIB, 22 * GIB)
NVLINK_KIB = (1000, 2000)


def _v(value: Any) -> Any:
    return getattr(value, "value", value)


def _obj(ref: Any) -> Any:
    return getattr(ref, "_obj", ref)


class StandIn:
    """The library one branch x board cell loads. ``asked`` records every symbol looked up."""

    def __init__(self, nvml: ModuleType, branch: Branch, board: Board) -> None:
        self._nvml = nvml
        self._branch = branch
        self._board = board
        self._gpm_samples: dict[int, tuple[Any, tuple[int, int | None] | None]] = {}
        self._exports = branch.symbols
        self.asked: set[str] = set()
        self.fields_asked: set[int] = set()
        device = nvml.struct_c_nvmlDevice_t
        self._gpus = [device() for _ in range(board.gpus)]
        self._migs = {
            (gpu, slot.index): device() for gpu in range(board.gpus) for slot in board.mig
        }
        self._by_address: dict[int, tuple[int, MigSlot | None]] = {
            ctypes.addressof(d): (i, None) for i, d in enumerate(self._gpus)
        }
        for (gpu, index), handle in self._migs.items():
            slot = next(s for s in board.mig if s.index == index)
            self._by_address[ctypes.addressof(handle)] = (gpu, slot)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            self_dict = object.__getattribute__(self, "__dict__")
            self_dict["asked"].add(name)
            if name not in self_dict["_exports"]:
                raise AttributeError(name)
        return object.__getattribute__(self, name)

    # Identity.

    def uuid(self, gpu: int) -> str:
        return f"GPU-{gpu:08x}-1111-2222-3333-{abs(hash(self._board.name)) % 10**12:012d}"

    @staticmethod
    def mig_uuid(gpu: int, slot: MigSlot) -> str:
        return (
            f"MIG-{gpu:08x}-{slot.gpu_instance:04x}-{slot.compute_instance:04x}-0000-000000000000"
        )

    def _target(self, handle: Any) -> tuple[int, MigSlot | None] | None:
        try:
            return self._by_address.get(ctypes.addressof(handle.contents))
        except (AttributeError, ValueError, TypeError):
            return None

    def _gpu(self, handle: Any) -> int | None:
        """The index of a GPU (not MIG device) handle."""
        target = self._target(handle)
        return None if target is None or target[1] is not None else target[0]

    # Library and system.

    def nvmlInit_v2(self) -> int:
        return OK

    def nvmlInitWithFlags(self, flags: Any) -> int:
        return OK

    def nvmlShutdown(self) -> int:
        return OK

    def nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        branch = self._branch
        buf.value = (branch.windows_version if self._board.wsl else branch.version).encode()
        return OK

    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        _obj(ref).value = len(self._gpus)
        return OK

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        i = _v(index)
        if not 0 <= i < len(self._gpus):
            return INVALID
        _obj(ref).contents = self._gpus[i]
        return OK

    def nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:
        target = self._target(handle)
        if target is None:
            return INVALID
        gpu, slot = target
        buf.value = (self.uuid(gpu) if slot is None else self.mig_uuid(gpu, slot)).encode()
        return OK

    def nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        target = self._target(handle)
        if target is None:
            return INVALID
        _, slot = target
        product = self._board.product
        buf.value = (product if slot is None else f"{product} MIG {slot.profile}").encode()
        return OK

    def nvmlDeviceGetSerial(self, handle: Any, buf: Any, size: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None:
            return INVALID
        if not self._board.serial:
            return NOT_SUPPORTED
        buf.value = f"1324{gpu:09d}".encode()
        return OK

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None:
            return INVALID
        bus = f"00000000:{0x17 + gpu * 0x10:02X}:00.0".encode()
        info = _obj(ref)
        info.busId = bus
        info.busIdLegacy = bus[4:]
        info.bus = 0x17 + gpu * 0x10
        return OK

    # Utilisation and memory.

    def nvmlDeviceGetUtilizationRates(self, handle: Any, ref: Any) -> int:
        if self._gpu(handle) is None:
            return INVALID
        if self._board.mig_on:
            return NOT_SUPPORTED  # nvml.h: "not currently supported" on a MIG-enabled parent
        rates = _obj(ref)
        rates.gpu, rates.memory = UTILIZATION
        return OK

    def _memory(self, handle: Any) -> tuple[int, int, int] | None:
        """(total, allocated, reserved) of a GPU or MIG device."""
        target = self._target(handle)
        if target is None:
            return None
        _, slot = target
        if slot is not None:
            return slot.memory_total, slot.memory_used, 0
        board = self._board
        if board.mig_on:
            allocated = sum(s.memory_used for s in board.mig)
            return board.memory_total, allocated, board.memory_reserved
        return board.memory_total, board.memory_allocated, board.memory_reserved

    def nvmlDeviceGetMemoryInfo(self, handle: Any, ref: Any) -> int:
        memory = self._memory(handle)
        if memory is None:
            return INVALID
        total, allocated, reserved = memory
        used = allocated + reserved if self._branch.v1_used_includes_reserved else allocated
        info = _obj(ref)
        info.total, info.used, info.free = total, used, total - allocated - reserved
        return OK

    def nvmlDeviceGetMemoryInfo_v2(self, handle: Any, ref: Any) -> int:
        memory = self._memory(handle)
        if memory is None:
            return INVALID
        info = _obj(ref)
        if info.version != MEMORY_V2:
            return VERSION_MISMATCH
        total, allocated, reserved = memory
        info.total, info.reserved, info.used = total, reserved, allocated
        info.free = total - allocated - reserved
        return OK

    # Thermal, fans, power.

    def _uint(self, handle: Any, ref: Any, value: int, supported: bool = True) -> int:
        if self._gpu(handle) is None:
            return INVALID
        if not supported:
            return NOT_SUPPORTED
        _obj(ref).value = value
        return OK

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, ref: Any) -> int:
        return self._uint(handle, ref, TEMPERATURE)

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, which: Any, ref: Any) -> int:
        kind = _v(which)
        # GDDR boards have no memory temperature sensor (FI 82 / MEM_MAX answer N/A).
        hbm = self._board.product.startswith(("NVIDIA H100", "NVIDIA A100", "Tesla V100"))
        supported = kind in THRESHOLDS and (kind != 2 or hbm)
        return self._uint(handle, ref, THRESHOLDS.get(kind, 0), supported)

    def nvmlDeviceGetNumFans(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, self._board.fans)

    def nvmlDeviceGetFanSpeed(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, FAN_PERCENT, self._board.fans > 0)

    def nvmlDeviceGetFanSpeed_v2(self, handle: Any, fan: Any, ref: Any) -> int:
        return self._uint(handle, ref, FAN_PERCENT, 0 <= _v(fan) < self._board.fans)

    def nvmlDeviceGetPowerUsage(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, POWER_MW)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, LIMIT_MW)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, ENERGY_MJ, self._board.energy)

    # Clocks and throttling.

    def nvmlDeviceGetClockInfo(self, handle: Any, which: Any, ref: Any) -> int:
        return self._uint(handle, ref, CLOCKS.get(_v(which), 0), _v(which) in CLOCKS)

    nvmlDeviceGetMaxClockInfo = nvmlDeviceGetClockInfo

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, ACTIVE_REASONS)

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, SUPPORTED_REASONS)

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons
    nvmlDeviceGetSupportedClocksThrottleReasons = nvmlDeviceGetSupportedClocksEventReasons

    def nvmlDeviceGetViolationStatus(self, handle: Any, policy: Any, ref: Any) -> int:
        if self._gpu(handle) is None:
            return INVALID
        which = _v(policy)
        if not 0 <= which < len(VIOLATION_NS):
            return NOT_SUPPORTED
        _obj(ref).violationTime = VIOLATION_NS[which]
        return OK

    # PCIe and NVLink.

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, PCIE[0])

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, PCIE[1])

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: Any, ref: Any) -> int:
        return self._uint(handle, ref, 1000)

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any, ref: Any) -> int:
        return self._uint(handle, ref, 0)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: Any, ref: Any) -> int:
        return self._uint(handle, ref, 1, _v(link) < self._board.nvlinks)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: Any, kind: Any, ref: Any) -> int:
        return self._uint(handle, ref, 0, _v(link) < self._board.nvlinks)

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: Any, link: Any, ref: Any) -> int:
        if self._gpu(handle) is None or _v(link) >= self._board.nvlinks:
            return NOT_SUPPORTED
        _obj(ref).busId = b"00000000:C0:00.0"  # every link to an NVSwitch
        return OK

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: Any, ref: Any) -> int:
        return self._uint(handle, ref, 2, _v(link) < self._board.nvlinks)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any, ref: Any) -> int:
        _obj(ref).value = 30  # NVML_TOPOLOGY_HOSTBRIDGE
        return OK

    # ECC.

    def nvmlDeviceGetEccMode(self, handle: Any, current: Any, pending: Any) -> int:
        if self._gpu(handle) is None:
            return INVALID
        if not self._board.ecc:
            return NOT_SUPPORTED
        _obj(current).value = _obj(pending).value = 1
        return OK

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: Any, counter: Any, ref: Any) -> int:
        return self._uint(handle, ref, 0, self._board.ecc)

    # Field values: each entry answers on its own, the call as a whole succeeds.

    def _field(self, field_id: int, scope: int) -> tuple[int, str, int] | None:
        board = self._board
        if not self._branch.has_field(field_id):
            return None
        if field_id == 1:
            return (1, "uiVal", 1) if board.ecc else None
        if field_id in (3, 4):
            return (3, "ullVal", 0) if board.ecc else None
        if 74 <= field_id <= 79:
            return 3, "ullVal", VIOLATION_NS[field_id - 74]
        if field_id == 83:
            return (3, "ullVal", ENERGY_MJ) if board.energy else None
        if field_id == 94:
            return 1, "uiVal", 0
        if field_id in (138, 139):
            if scope >= board.nvlinks:
                return None
            return 3, "ullVal", NVLINK_KIB[field_id - 138]
        if field_id in (197, 198):
            return 3, "ullVal", PCIE_BYTES[field_id - 197]
        return None

    def nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values: Any) -> int:
        if self._gpu(handle) is None:
            return INVALID
        entries = _obj(values)
        for i in range(_v(count)):
            entry = entries[i]
            self.fields_asked.add(int(entry.fieldId))
            answer = self._field(int(entry.fieldId), int(entry.scopeId))
            if answer is None:
                entry.nvmlReturn = NOT_SUPPORTED
                continue
            entry.valueType, member, value = answer
            setattr(entry.value, member, value)
            entry.nvmlReturn = OK
        return OK

    # Processes.

    def processes_of(self, gpu: int, slot: MigSlot | None) -> list[tuple[int, int, int, int]]:
        """(pid, bytes, gpu instance, compute instance) as this library lists them."""
        board = self._board
        if board.mig_on:
            slots = board.mig if slot is None else (slot,)
            # nvitop device.py: per-process memory on MIG is N/A.
            return [
                (pid, NOT_AVAILABLE, s.gpu_instance, s.compute_instance)
                for s in slots
                for pid in s.pids
            ]
        return [
            (pid + 100 * gpu, NOT_AVAILABLE if used < 0 else used, NO_INSTANCE, NO_INSTANCE)
            for pid, used in board.processes
        ]

    def _list(self, handle: Any, count_ref: Any, array: Any, entry_bytes: int, kind: str) -> int:
        target = self._target(handle)
        if target is None:
            return INVALID
        found = self.processes_of(*target) if kind == "compute" else []
        count = _obj(count_ref)
        if not found:
            count.value = 0
            return OK
        if array is None or count.value < len(found):
            count.value = len(found)
            return INSUFFICIENT_SIZE
        buffer = (ctypes.c_char * (entry_bytes * len(found))).from_address(
            ctypes.addressof(_obj(array))
        )
        for i, (pid, used, gpu_instance, compute_instance) in enumerate(found):
            fields: Sequence[int] = (pid, used, gpu_instance, compute_instance, 0)
            layout = {16: "<I4xQ", 24: "<I4xQII", 32: "<I4xQIIQ"}[entry_bytes]
            struct.pack_into(
                layout, buffer, i * entry_bytes, *fields[: layout.count("I") + layout.count("Q")]
            )
        count.value = len(found)
        return OK

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, self._branch.v3_entry_bytes, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, self._branch.v3_entry_bytes, "graphics")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, 24, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, 24, "graphics")

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, 16, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any, count: Any, array: Any) -> int:
        return self._list(h, count, array, 16, "graphics")

    def nvmlDeviceGetProcessUtilization(
        self, handle: Any, samples: Any, count: Any, last_seen: Any
    ) -> int:
        if self._gpu(handle) is None:
            return INVALID
        if self._board.mig_on or self._board.wsl:
            return NOT_SUPPORTED
        return NOT_FOUND  # no sample newer than asked for: quiet, like an idle GPU

    def nvmlDeviceGetConfComputeMemSizeInfo(self, handle: Any, ref: Any) -> int:
        return NOT_SUPPORTED

    def nvmlDeviceGetRunningProcessDetailList(self, handle: Any, ref: Any) -> int:
        return NOT_SUPPORTED

    # MIG.

    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        if self._gpu(handle) is None:
            return NOT_SUPPORTED  # a MIG handle
        if not self._board.mig_capable:
            return NOT_SUPPORTED
        _obj(current).value = _obj(pending).value = int(self._board.mig_on)
        return OK

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, ref: Any) -> int:
        if not self._board.mig_capable:
            return NOT_SUPPORTED
        return self._uint(handle, ref, self._board.max_mig_devices)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None or not self._board.mig_capable:
            return NOT_SUPPORTED
        mig = self._migs.get((gpu, _v(index)))
        if mig is None:
            return NOT_FOUND
        _obj(ref).contents = mig
        return OK

    def _mig_id(self, handle: Any, ref: Any, which: str) -> int:
        target = self._target(handle)
        if target is None or target[1] is None:
            return INVALID
        _obj(ref).value = getattr(target[1], which)
        return OK

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, ref: Any) -> int:
        return self._mig_id(handle, ref, "gpu_instance")

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, ref: Any) -> int:
        return self._mig_id(handle, ref, "compute_instance")

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any, ref: Any) -> int:
        target = self._target(handle)
        if target is None:
            return INVALID
        _obj(ref).value = int(target[1] is not None)
        return OK

    # GPM: samples remember what they sampled and when; a metric's value is the target's own
    # (per GPU instance on a MIG parent), so a reading from the wrong target shows.

    def gpm_percent(self, gpu: int, gpu_instance: int | None, metric: int) -> float:
        return 10.0 + metric + 100 * gpu + (0 if gpu_instance is None else 3 * gpu_instance)

    def nvmlGpmQueryDeviceSupport(self, handle: Any, ref: Any) -> int:
        if self._gpu(handle) is None:
            return INVALID
        _obj(ref).isSupportedDevice = int(self._board.gpm)
        return OK

    def nvmlGpmSampleAlloc(self, ref: Any) -> int:
        sample = self._nvml.struct_c_nvmlGpmSample_t()
        self._gpm_samples[ctypes.addressof(sample)] = (sample, None)
        _obj(ref).contents = sample
        return OK

    def nvmlGpmSampleFree(self, sample: Any) -> int:
        self._gpm_samples.pop(ctypes.addressof(sample.contents), None)
        return OK

    def _take(self, sample: Any, target: tuple[int, int | None]) -> int:
        key = ctypes.addressof(sample.contents)
        if key not in self._gpm_samples:
            return INVALID
        self._gpm_samples[key] = (self._gpm_samples[key][0], target)
        return OK

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None or not self._board.gpm:
            return NOT_SUPPORTED
        return self._take(sample, (gpu, None))

    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance: Any, sample: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None or not self._board.gpm:
            return NOT_SUPPORTED
        if _v(gpu_instance) not in {slot.gpu_instance for slot in self._board.mig}:
            return NOT_FOUND
        return self._take(sample, (gpu, _v(gpu_instance)))

    def nvmlGpmMetricsGet(self, ref: Any) -> int:
        request = _obj(ref)
        first = self._gpm_samples.get(ctypes.addressof(request.sample1.contents))
        second = self._gpm_samples.get(ctypes.addressof(request.sample2.contents))
        if first is None or second is None or first[1] != second[1] or first[1] is None:
            return INVALID  # two samples of one target are needed
        gpu, gpu_instance = first[1]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = self.gpm_percent(gpu, gpu_instance, int(metric.metricId))
            metric.nvmlReturn = OK
        return OK

    # Events.

    def nvmlEventSetCreate(self, ref: Any) -> int:
        return OK

    def nvmlDeviceRegisterEvents(self, handle: Any, types: Any, event_set: Any) -> int:
        return OK

    def nvmlEventSetWait_v2(self, event_set: Any, ref: Any, timeout_ms: Any) -> int:
        return 10  # NVML_ERROR_TIMEOUT

    def nvmlEventSetFree(self, event_set: Any) -> int:
        return OK
