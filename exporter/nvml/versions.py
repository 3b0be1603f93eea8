"""Which version of each NVML call to use: the ladders, chosen by the symbols the library has.

NVML adds versioned entry points (``..._v2``, ``..._v3``) and renames APIs between driver
branches, and nvidia-ml-py's unversioned wrappers follow the header of their own release, not
the driver's: its ``nvmlDeviceGetComputeRunningProcesses`` calls ``_v3``, which R470 lacks
(and 535.98 too), so on those drivers it fails on every call. Every API whose entry point
differs between the branches the project supports is listed here once, newest first, each
version with the first driver release whose ``nvml.h`` declares it (NVIDIA/nvidia-settings
``src/nvml.h``, one commit per release; NVIDIA/go-nvml ``gen/nvml/nvml.h`` per CUDA release).
``NvmlSession.resolve`` takes the first version whose C symbol the loaded ``libnvidia-ml``
exports (a ctypes lookup through pynvml's own ``_nvmlGetFunctionPointer``), once per session.

``SYMBOLS`` is every C symbol the exporter may look up, for ``scripts/gpu_symbols.py`` (which
compares it with a real driver's library) and for the stand-in matrix test, which checks it
against what the exporter really asked for.

Field ids are not chosen here: every field id the exporter asks for is below 199, where the
ids have kept their meaning in every header from 450.51 to 610 (199/200 and 251-273 changed
meaning between 550, 555, 570, 575 and 580.82; pynvml's NVML_FI_* constants follow its own
header, so an id at or above 199 would be read wrongly on some pair). ``MAX_FIELD_ID`` states
that bound and the matrix test holds the exporter to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_FIELD_ID = 198
# Field ids a binding older than the driver may not name (nvidia-ml-py 12.535.77 has no
# PCIE_COUNT_*: they are from 555.42.02's header). Below 199 an id means the same in every
# header, so the number itself serves where the binding's constant is missing.
STABLE_FIELD_IDS: Mapping[str, int] = {
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES": 197,
    "NVML_FI_DEV_PCIE_COUNT_RX_BYTES": 198,
}


@dataclass(frozen=True)
class Version:
    """One entry point of an API.

    Args:
        symbol: the C symbol in libnvidia-ml.
        first: the first driver release whose nvml.h declares it ("450.51": at or before the
            oldest header recorded, 450.51).
        wrapper: the pynvml function that calls it ("" : the exporter calls the symbol itself
            through ctypes, see ``nvml/processes.py``).
        constants: keyword arguments of ``wrapper`` whose values are pynvml constants, by name.
    """

    symbol: str
    first: str
    wrapper: str = ""
    constants: Mapping[str, str] = field(default_factory=dict)


# Each API's versions, newest first. The sources are the headers named in the module docstring;
# the release is the first nvidia-settings commit whose src/nvml.h declares the symbol.
LADDERS: Mapping[str, tuple[Version, ...]] = {
    # 510.39.01 adds _v2 (nvmlMemory_v2_t, version word 0x02000028) and changes what v1's
    # `used` means: allocated plus reserved from 510 on, allocated alone before. _v2's `used`
    # is allocated alone on every branch, so where it exists the series means one thing.
    "memory": (
        Version(
            "nvmlDeviceGetMemoryInfo_v2",
            "510.39.01",
            "nvmlDeviceGetMemoryInfo",
            {"version": "nvmlMemory_v2"},
        ),
        Version("nvmlDeviceGetMemoryInfo", "450.51", "nvmlDeviceGetMemoryInfo"),
    ),
    # 535.43.02 renames "clocks throttle reasons" to "clocks event reasons"; the bits are the
    # same and the old names stay exported (DEPRECATED(13.0) from 580.65.06 is only an
    # attribute).
    "clocks_event_reasons": (
        Version(
            "nvmlDeviceGetCurrentClocksEventReasons",
            "535.43.02",
            "nvmlDeviceGetCurrentClocksEventReasons",
        ),
        Version(
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            "450.51",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ),
    ),
    "supported_clocks_event_reasons": (
        Version(
            "nvmlDeviceGetSupportedClocksEventReasons",
            "535.43.02",
            "nvmlDeviceGetSupportedClocksEventReasons",
        ),
        Version(
            "nvmlDeviceGetSupportedClocksThrottleReasons",
            "450.51",
            "nvmlDeviceGetSupportedClocksThrottleReasons",
        ),
    ),
    # Process lists: _v3 from 510.39.01, absent in 535.98 only (0cb3bef), back in 535.104.05
    # (74cae7f); _v2 (24-byte nvmlProcessInfo_v2_t) from 450.66; v1 (16 bytes, no instance
    # ids) before. The entry size of _v3 is chosen per library in nvml/processes.py.
    "compute_processes": (
        Version("nvmlDeviceGetComputeRunningProcesses_v3", "510.39.01"),
        Version("nvmlDeviceGetComputeRunningProcesses_v2", "450.66"),
        Version("nvmlDeviceGetComputeRunningProcesses", "450.51"),
    ),
    "graphics_processes": (
        Version("nvmlDeviceGetGraphicsRunningProcesses_v3", "510.39.01"),
        Version("nvmlDeviceGetGraphicsRunningProcesses_v2", "450.66"),
        Version("nvmlDeviceGetGraphicsRunningProcesses", "450.51"),
    ),
}

# What tells the 535.43-535.86 libraries apart, whose _v3 entries are 32 bytes (a CC-protected
# memory field added without a version bump): they have nvmlDeviceGetConfComputeMemSizeInfo
# (from 535.43.02) and not yet nvmlDeviceGetRunningProcessDetailList (535.104.05 moved that
# field there and _v3 went back to 24 bytes). nvitop's api/libnvml.py uses the same test.
CONF_COMPUTE_SYMBOL = "nvmlDeviceGetConfComputeMemSizeInfo"
PROCESS_DETAIL_SYMBOL = "nvmlDeviceGetRunningProcessDetailList"

# The C symbol behind each pynvml wrapper the exporter calls, where the two names differ (the
# binding calls a versioned entry point under an unversioned name). Every other call's wrapper
# name is its symbol.
WRAPPER_SYMBOLS: Mapping[str, str] = {
    "nvmlInit": "nvmlInitWithFlags",
    "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo": "nvmlDeviceGetPciInfo_v3",
}

# Every other NVML function the exporter calls by its pynvml name (= its C symbol); all of them
# are declared in every header from 450.51 on except where noted beside the name.
PLAIN_SYMBOLS: tuple[str, ...] = (
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetNumFans",  # 510.39.01; before it, no fan series
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetFanSpeed",  # the first fan, where nvmlDeviceGetNumFans is absent (R470)
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
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
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
    "nvmlGpmQueryDeviceSupport",  # 520.56.06
    "nvmlGpmSampleAlloc",  # 520.56.06
    "nvmlGpmSampleFree",  # 520.56.06
    "nvmlGpmSampleGet",  # 520.56.06
    "nvmlGpmMetricsGet",  # 520.56.06
)

SYMBOLS: tuple[str, ...] = tuple(
    sorted(
        {
            *(version.symbol for ladder in LADDERS.values() for version in ladder),
            CONF_COMPUTE_SYMBOL,
            PROCESS_DETAIL_SYMBOL,
            *WRAPPER_SYMBOLS.values(),
            *PLAIN_SYMBOLS,
        }
    )
)
