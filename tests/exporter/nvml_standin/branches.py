"""Driver branches of the stand-in: the exact NVML symbols each one's nvml.h declares.

Each branch cites the header its symbol set comes from: NVIDIA/nvidia-settings ``src/nvml.h``
at the commit named after that release, or NVIDIA/go-nvml ``gen/nvml/nvml.h`` at the tag of the
CUDA release that ships it (the two agree function for function where both exist). A symbol is
exported from the first release whose header declares it (``FIRST``); the one removal that
matters, the three ``*RunningProcesses_v3`` in 535.98 only, is ``REMOVED``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Release = tuple[int, ...]


def release(text: str) -> Release:
    return tuple(int(part) for part in text.split("."))


# Symbols the stand-in implements that every header from 450.51 declares.
BASE: tuple[str, ...] = (
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",  # 450.66
    "nvmlDeviceGetGraphicsRunningProcesses_v2",  # 450.66
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)
# First release whose nvml.h declares each later symbol (nvidia-settings history).
FIRST: Mapping[str, str] = {
    "nvmlDeviceGetComputeRunningProcesses_v3": "510.39.01",
    "nvmlDeviceGetGraphicsRunningProcesses_v3": "510.39.01",
    "nvmlDeviceGetMemoryInfo_v2": "510.39.01",
    "nvmlDeviceGetNumFans": "510.39.01",
    "nvmlGpmQueryDeviceSupport": "520.56.06",
    "nvmlGpmSampleAlloc": "520.56.06",
    "nvmlGpmSampleFree": "520.56.06",
    "nvmlGpmSampleGet": "520.56.06",
    "nvmlGpmMetricsGet": "520.56.06",
    "nvmlGpmMigSampleGet": "525.53",
    "nvmlDeviceClearFieldValues": "525.53",
    "nvmlDeviceGetConfComputeMemSizeInfo": "535.43.02",
    "nvmlDeviceGetCurrentClocksEventReasons": "535.43.02",
    "nvmlDeviceGetSupportedClocksEventReasons": "535.43.02",
    "nvmlDeviceGetRunningProcessDetailList": "535.104.05",
    "nvmlDeviceGetProcessesUtilizationInfo": "550.40.07",
    "nvmlDeviceGetTemperatureV": "565.57.01",
}
# Declared in a branch's earlier header, absent in these releases (0cb3bef = 535.98).
REMOVED: Mapping[str, tuple[str, ...]] = {
    "535.98": (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
    ),
}
# Fields by first release (ids below 199 keep their meaning in every header): per field, a
# library older than this answers NOT_SUPPORTED in that entry's nvmlReturn.
FIELD_FIRST: Mapping[int, str] = {197: "555.42.02", 198: "555.42.02"}


@dataclass(frozen=True)
class Branch:
    """One driver release as a stand-in: its version, its header's source, its symbols."""

    name: str  # the matrix's column
    version: str  # what nvmlSystemGetDriverVersion answers on Linux
    windows_version: str  # what it answers in a WSL2 guest (the Windows driver's number)
    header: str

    @property
    def release(self) -> Release:
        return release(self.version)

    @property
    def symbols(self) -> frozenset[str]:
        later = {name for name, first in FIRST.items() if release(first) <= self.release}
        return (frozenset(BASE) | later) - set(REMOVED.get(self.version, ()))

    def has_field(self, field_id: int) -> bool:
        first = FIELD_FIRST.get(field_id)
        return first is None or release(first) <= self.release

    @property
    def v1_used_includes_reserved(self) -> bool:
        # nvml.h from 510.39.01: nvmlMemory_t.used is "Sum of Reserved and Allocated".
        return self.release >= release("510.39.01")

    @property
    def v3_entry_bytes(self) -> int:
        # 535.43.02/535.54.03/535.86.05 add usedGpuCcProtectedMemory to nvmlProcessInfo_t.
        return 32 if release("535.43.02") <= self.release < release("535.98") else 24


BRANCHES: tuple[Branch, ...] = (
    Branch("R470", "470.57.02", "472.12", "nvidia-settings src/nvml.h @ 470.57.02"),
    Branch(
        "R535.54", "535.54.03", "536.25", "nvidia-settings src/nvml.h @ 535.54.03; go-nvml 075f45f"
    ),
    Branch("R535.98", "535.98", "536.99", "nvidia-settings src/nvml.h @ 0cb3bef (535.98)"),
    Branch("R535.104", "535.104.05", "537.13", "nvidia-settings src/nvml.h @ 74cae7f (535.104.05)"),
    Branch("R550", "550.54.14", "552.55", "go-nvml gen/nvml/nvml.h @ f7ceebd (CUDA 12.4)"),
    Branch("R570", "570.86.16", "572.16", "go-nvml gen/nvml/nvml.h @ f420a32 (CUDA 12.8)"),
    Branch("R580", "580.82.07", "581.15", "nvidia-settings src/nvml.h @ 80ddf79 (580.82.07)"),
)
