"""A stand-in for libnvidia-ml at the ctypes boundary, for benchmarking exporters side by side.

Copied, with types added and reformatted, from the project's reference harness (shared
peers/fakenvml/sitecustomize.py, itself extended from steering/bars/lib/fakenvml), so that
`make bench` needs nothing outside this repository. The real pynvml module runs unchanged and
calls this object instead of the C library (``pynvml.nvmlLib``); both exporters of
bench/peers_bench.py load it through PYTHONPATH, so both pay the same cost per NVML call.

Environment:
  MW_FAKE_GPUS        GPU count (default 8)
  MW_FAKE_NVLINKS     NVLink links per GPU (default 0: PCIe cards, NVLink calls NOT_SUPPORTED)
  MW_FAKE_PCIE_MS     how long nvmlDeviceGetPcieThroughput blocks (real driver: ~20 ms, sleeping
                      in C with the GIL released); default 0
  MW_FAKE_NO_EVENTS   1: nvmlDeviceRegisterEvents answers NOT_SUPPORTED (no XID event wait loop)
  MW_FAKE_TRACE       a file: each (pid, function, return code) pair is appended once, and each
                      function asked for but not defined here as "MISSING" (FunctionNotFound)
  MW_FAKE_COUNT       a file: calls per function, rewritten as JSON every 0.5 s (for counting
                      NVML calls per scrape or per collection cycle; adds overhead)

The GPUs look like H100 PCIe boards: ECC on, one fan, field values for energy, throttle time,
PCIe byte counters, replays and ECC (as a 550-series driver answers), XID events registerable
(no event ever arrives: each wait sleeps its timeout, like the driver blocking in C), and one
compute process per GPU whose pid is the exporter's own (so /proc lookups of it succeed).
Values are fixed per GPU index (utilisation, temperature, memory, power, clocks...), counters
(energy, throttle ns, PCIe/NVLink bytes) grow with time, so both exporters see the same host.
Functions not defined here are missing, as in an older driver (pynvml raises FunctionNotFound).
"""

# ruff: noqa: N802, N815 -- the methods and fields are NVML's own C names.
# Values cross the ctypes boundary as pynvml's byref()/pointer objects: Any is their type.
from __future__ import annotations

import ctypes
import os
import time
from typing import Any

_p: Any = None
try:
    import pynvml

    _p = pynvml
except Exception:  # the process may not have pynvml at all
    pass

OK, INVALID, NOT_SUPPORTED, INSUFFICIENT_SIZE, TIMEOUT = 0, 2, 3, 7, 10
_T0 = time.time()
_N = max(1, int(os.environ.get("MW_FAKE_GPUS", "8")))
_NVLINKS = max(0, int(os.environ.get("MW_FAKE_NVLINKS", "0")))
_PCIE_S = float(os.environ.get("MW_FAKE_PCIE_MS", "0")) / 1000.0
_TRACE = os.environ.get("MW_FAKE_TRACE")
_COUNT = os.environ.get("MW_FAKE_COUNT")
_NO_EVENTS = os.environ.get("MW_FAKE_NO_EVENTS") == "1"
_GIB = 2**30

_DEVS = [_p.struct_c_nvmlDevice_t() for _ in range(_N)] if _p is not None else []
_BY_ADDR = {ctypes.addressof(d): i for i, d in enumerate(_DEVS)}


def _make_gpu(i: Any) -> Any:
    util = 40 + (i * 13) % 56  # 40..95 %
    temp = 50 + (i * 7) % 36  # 50..85 C
    hot = temp >= 80
    return dict(
        index=i,
        name=b"NVIDIA H100 80GB HBM3" if _NVLINKS else b"NVIDIA H100 PCIe",
        uuid=f"GPU-{0x0A0A0000 + i:08x}-1111-2222-3333-{0x444444440000 + i:012x}".encode(),
        serial=f"13240{i:08d}".encode(),
        bus=f"{i // 64:08X}:{0x10 + (i % 64) * 3:02X}:00.0".encode(),
        util=util,
        memutil=util // 2,
        enc=(i * 3) % 10,
        dec=(i * 5) % 10,
        temp=temp,
        mem_temp=temp + 5,
        power=200_000 + (i % 10) * 15_000,
        limit=350_000,
        mem_used=(20 + (i * 5) % 55) * _GIB,
        fan=30 + (i * 4) % 50,
        reasons=0x20 if hot else 0x0,  # SW thermal slowdown when hot
        thermal_ns_per_s=400_000_000 if hot else 0,
        power_ns_per_s=100_000_000 if i % 4 == 3 else 0,
        pcie_tx=(100 + i) * 1024,
        pcie_rx=(300 + 2 * i) * 1024,  # KiB/s
        nvlink_kib_s=50_000 + i * 100,
        numa=0 if i < max(1, _N // 2) else 1,
    )


_GPUS = [_make_gpu(i) for i in range(_N)]
_MEM_TOTAL = 80 * _GIB
_MEM_RESERVED = 512 * 2**20
_THRESHOLDS = {0: 92, 1: 89, 2: 87, 3: 95, 4: 85}  # shutdown, slowdown, mem max, gpu max, acoustic
_CLOCKS = {0: 1755, 1: 1755, 2: 2619, 3: 1650}  # graphics, sm, mem, video (MHz)
_MAX_CLOCKS = {0: 1980, 1: 1980, 2: 2619, 3: 1755}


def _v(x: Any) -> Any:
    return getattr(x, "value", x)


def _obj(ref: Any) -> Any:
    return getattr(ref, "_obj", ref)


def _gpu(handle: Any) -> Any:
    try:
        return _GPUS[_BY_ADDR[ctypes.addressof(handle.contents)]]
    except Exception:
        return None


def _elapsed() -> Any:
    return time.time() - _T0


def _field(g: Any, fid: Any, scope: Any) -> Any:
    """(valueType, member, value) for a supported field id, else None (NOT_SUPPORTED)."""
    t = _elapsed()
    if fid == 1:  # ECC_CURRENT
        return 1, "uiVal", 1
    if fid in (3, 4):  # ECC SBE/DBE volatile totals
        return 3, "ullVal", 0
    if fid == 74:  # PERF_POLICY_POWER (ns)
        return 3, "ullVal", int(t * g["power_ns_per_s"])
    if fid == 75:  # PERF_POLICY_THERMAL (ns)
        return 3, "ullVal", int(t * g["thermal_ns_per_s"])
    if fid in (76, 77, 78, 79):  # sync boost, board limit, low util, reliability
        return 3, "ullVal", 0
    if fid == 83:  # TOTAL_ENERGY_CONSUMPTION (mJ)
        return 3, "ullVal", int(5e9 + t * g["power"])
    if fid == 91:  # NVLINK_LINK_COUNT
        return (1, "uiVal", _NVLINKS) if _NVLINKS else None
    if fid == 94:  # PCIE_REPLAY_COUNTER
        return 1, "uiVal", 0
    if fid in (138, 139):  # NVLINK_THROUGHPUT_DATA_TX/RX (KiB), per link
        if not _NVLINKS or scope >= _NVLINKS:
            return None
        return 3, "ullVal", int(t * g["nvlink_kib_s"] * (1 if fid == 138 else 1.1))
    if fid == 197:  # PCIE_COUNT_TX_BYTES
        return 3, "ullVal", int(t * g["pcie_tx"] * 1024)
    if fid == 198:  # PCIE_COUNT_RX_BYTES
        return 3, "ullVal", int(t * g["pcie_rx"] * 1024)
    return None


class FakeLib:
    """Methods are the C symbols of libnvidia-ml; each answers an NVML return code."""

    def __getattr__(self, name: Any) -> Any:
        _trace(name, "MISSING")
        raise AttributeError(name)

    # -- library and system
    def nvmlInitWithFlags(self, flags: Any) -> Any:
        return OK

    def nvmlInit_v2(self) -> Any:
        return OK

    def nvmlShutdown(self) -> Any:
        return OK

    def nvmlSystemGetDriverVersion(self, buf: Any, n: Any) -> Any:
        buf.value = b"550.54.15"
        return OK

    def nvmlSystemGetNVMLVersion(self, buf: Any, n: Any) -> Any:
        buf.value = b"12.550.54.15"
        return OK

    def nvmlSystemGetCudaDriverVersion(self, ref: Any) -> Any:
        _obj(ref).value = 12040
        return OK

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlSystemGetProcessName(self, pid: Any, buf: Any, n: Any) -> Any:
        try:
            with open(f"/proc/{_v(pid)}/comm", "rb") as f:
                buf.value = f.read().strip()
            return OK
        except OSError:
            return NOT_SUPPORTED

    def nvmlDeviceGetCount_v2(self, ref: Any) -> Any:
        _obj(ref).value = _N
        return OK

    # -- handles and identity
    def nvmlDeviceGetHandleByIndex_v2(self, idx: Any, ref: Any) -> Any:
        i = _v(idx)
        if not 0 <= i < _N:
            return INVALID
        _obj(ref).contents = _DEVS[i]
        return OK

    def _by(self, key: Any, val: Any, ref: Any) -> Any:
        val = _v(val)
        val = val if isinstance(val, bytes) else str(val).encode()
        for i, g in enumerate(_GPUS):
            if g[key].lower() == val.lower():
                _obj(ref).contents = _DEVS[i]
                return OK
        return INVALID

    def nvmlDeviceGetHandleByUUID(self, uuid: Any, ref: Any) -> Any:
        return self._by("uuid", uuid, ref)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus: Any, ref: Any) -> Any:
        return self._by("bus", bus, ref)

    def nvmlDeviceGetIndex(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(ref).value = g["index"]
        return OK

    def _set(self, h: Any, ref: Any, key: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(ref).value = g[key]
        return OK

    def _const(self, h: Any, ref: Any, value: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        _obj(ref).value = value
        return OK

    def _text(self, h: Any, buf: Any, key: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        buf.value = g[key]
        return OK

    def nvmlDeviceGetName(self, h: Any, buf: Any, n: Any) -> Any:
        return self._text(h, buf, "name")

    def nvmlDeviceGetUUID(self, h: Any, buf: Any, n: Any) -> Any:
        return self._text(h, buf, "uuid")

    def nvmlDeviceGetSerial(self, h: Any, buf: Any, n: Any) -> Any:
        return self._text(h, buf, "serial")

    def nvmlDeviceGetPciInfo_v3(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        o = _obj(ref)
        o.busId = g["bus"]
        o.busIdLegacy = g["bus"][4:]
        o.domain = int(g["bus"][:8], 16)
        o.bus = int(g["bus"][9:11], 16)
        o.device = 0
        o.pciDeviceId = 0x233110DE
        o.pciSubSystemId = 0x16C110DE
        return OK

    def nvmlDeviceGetCudaComputeCapability(self, h: Any, major: Any, minor: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        _obj(major).value = 9
        _obj(minor).value = 0
        return OK

    def nvmlDeviceIsMigDeviceHandle(self, h: Any, ref: Any) -> Any:
        _obj(ref).value = 0
        return OK

    def nvmlDeviceGetMigMode(self, h: Any, cur: Any, pending: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        _obj(cur).value = 0
        _obj(pending).value = 0
        return OK

    def nvmlDeviceGetPersistenceMode(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 1)

    def nvmlDeviceGetDisplayMode(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetDisplayActive(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetComputeMode(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetPerformanceState(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    # -- utilisation and memory
    def nvmlDeviceGetUtilizationRates(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        o = _obj(ref)
        o.gpu = g["util"]
        o.memory = g["memutil"]
        return OK

    def nvmlDeviceGetEncoderUtilization(self, h: Any, util: Any, period: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(util).value = g["enc"]
        _obj(period).value = 167000
        return OK

    def nvmlDeviceGetDecoderUtilization(self, h: Any, util: Any, period: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(util).value = g["dec"]
        _obj(period).value = 167000
        return OK

    def nvmlDeviceGetMemoryInfo(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        o = _obj(ref)
        o.total = _MEM_TOTAL
        o.used = g["mem_used"]
        o.free = _MEM_TOTAL - g["mem_used"]
        return OK

    def nvmlDeviceGetMemoryInfo_v2(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        o = _obj(ref)
        o.total = _MEM_TOTAL
        o.reserved = _MEM_RESERVED
        o.used = g["mem_used"]
        o.free = _MEM_TOTAL - _MEM_RESERVED - g["mem_used"]
        return OK

    def nvmlDeviceGetBAR1MemoryInfo(self, h: Any, ref: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        o = _obj(ref)
        o.bar1Total = 128 * 2**30
        o.bar1Used = 64 * 2**20
        o.bar1Free = o.bar1Total - o.bar1Used
        return OK

    # -- thermal, fans, power
    def nvmlDeviceGetTemperature(self, h: Any, sensor: Any, ref: Any) -> Any:
        return self._set(h, ref, "temp")

    def nvmlDeviceGetTemperatureV(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(ref).temperature = g["temp"]
        return OK

    def nvmlDeviceGetTemperatureThreshold(self, h: Any, kind: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        k = _v(kind)
        if k not in _THRESHOLDS:
            return NOT_SUPPORTED
        _obj(ref).value = _THRESHOLDS[k]
        return OK

    def nvmlDeviceGetNumFans(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 1)

    def nvmlDeviceGetFanSpeed(self, h: Any, ref: Any) -> Any:
        return self._set(h, ref, "fan")

    def nvmlDeviceGetFanSpeed_v2(self, h: Any, fan: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        if _v(fan) != 0:
            return INVALID
        _obj(ref).value = g["fan"]
        return OK

    def nvmlDeviceGetPowerUsage(self, h: Any, ref: Any) -> Any:
        return self._set(h, ref, "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any, ref: Any) -> Any:
        return self._set(h, ref, "limit")

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        _obj(ref).value = int(5e9 + _elapsed() * g["power"])
        return OK

    # -- clocks and throttling
    def nvmlDeviceGetClockInfo(self, h: Any, kind: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        k = _v(kind)
        _obj(ref).value = _CLOCKS.get(k, 1000) - (300 if g["reasons"] and k in (0, 1) else 0)
        return OK

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: Any, ref: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        _obj(ref).value = _MAX_CLOCKS.get(_v(kind), 1000)
        return OK

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, ref: Any) -> Any:
        return self._set(h, ref, "reasons")

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0x1FF)

    nvmlDeviceGetSupportedClocksThrottleReasons = nvmlDeviceGetSupportedClocksEventReasons

    def nvmlDeviceGetViolationStatus(self, h: Any, policy: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        o = _obj(ref)
        o.referenceTime = int(time.time() * 1e6)
        p = _v(policy)
        rate = g["thermal_ns_per_s"] if p == 1 else g["power_ns_per_s"] if p == 0 else 0
        o.violationTime = int(_elapsed() * rate)
        return OK

    # -- PCIe
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 5)

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration
    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 16)

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetPcieReplayCounter(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetPcieThroughput(self, h: Any, kind: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        if _PCIE_S:
            time.sleep(_PCIE_S)
        _obj(ref).value = g["pcie_tx"] if _v(kind) == 0 else g["pcie_rx"]
        return OK

    # -- NVLink (only with MW_FAKE_NVLINKS > 0)
    def _link(self, h: Any, link: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return None, INVALID
        if not _NVLINKS:
            return None, NOT_SUPPORTED
        if not 0 <= _v(link) < _NVLINKS:
            return None, INVALID
        return g, OK

    def nvmlDeviceGetNvLinkState(self, h: Any, link: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        _obj(ref).value = 1
        return OK

    def nvmlDeviceGetNvLinkVersion(self, h: Any, link: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        _obj(ref).value = 4
        return OK

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Any, link: Any, counter: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        _obj(ref).value = 0
        return OK

    def nvmlDeviceGetNvLinkCapability(self, h: Any, link: Any, cap: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        _obj(ref).value = 1
        return OK

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, h: Any, link: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        o = _obj(ref)  # every link goes to an NVSwitch (HGX board)
        o.busId = b"00000000:%02X:00.0" % (0xE0 + _v(link) % 16)
        o.busIdLegacy = o.busId[4:]
        return OK

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: Any, link: Any, ref: Any) -> Any:
        _, rc = self._link(h, link)
        if rc:
            return rc
        _obj(ref).value = 2
        return OK  # NVML_NVLINK_DEVICE_TYPE_SWITCH

    # -- ECC (enabled, no errors)
    def nvmlDeviceGetEccMode(self, h: Any, cur: Any, pending: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        _obj(cur).value = 1
        _obj(pending).value = 1
        return OK

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: Any, counter: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetMemoryErrorCounter(
        self, h: Any, kind: Any, counter: Any, loc: Any, ref: Any
    ) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0)

    def nvmlDeviceGetRemappedRows(
        self, h: Any, corr: Any, unc: Any, pending: Any, failure: Any
    ) -> Any:
        if _gpu(h) is None:
            return INVALID
        for r in (corr, unc, pending, failure):
            _obj(r).value = 0
        return OK

    def nvmlDeviceGetGpmSupport(self, *a: Any) -> Any:
        return NOT_SUPPORTED

    # -- field values (one batched call, as a 550 driver answers)
    def nvmlDeviceGetFieldValues(self, h: Any, count: Any, ref: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        arr = _obj(ref)
        ts = time.time_ns() // 1000
        for i in range(_v(count)):
            fv = arr[i]
            ans = _field(g, fv.fieldId, fv.scopeId)
            fv.timestamp = ts
            fv.latencyUsec = 0
            if ans is None:
                fv.nvmlReturn = NOT_SUPPORTED
                continue
            fv.valueType, member, value = ans
            setattr(fv.value, member, value)
            fv.nvmlReturn = OK
        return OK

    # -- processes: one compute process per GPU, the exporter itself
    def _procs(self, h: Any, count_ref: Any, arr: Any, n: Any) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        c = _obj(count_ref)
        if n == 0:
            c.value = 0
            return OK
        if arr is None or c.value < n:
            c.value = n
            return INSUFFICIENT_SIZE
        a = _obj(arr)
        a[0].pid = os.getpid()
        a[0].usedGpuMemory = g["mem_used"] - _GIB
        for name in ("gpuInstanceId", "computeInstanceId"):
            if hasattr(a[0], name):
                setattr(a[0], name, 0xFFFFFFFF)
        c.value = n
        return OK

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, count: Any, arr: Any) -> Any:
        return self._procs(h, count, arr, 1)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetComputeRunningProcesses = nvmlDeviceGetComputeRunningProcesses_v3

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any, count: Any, arr: Any) -> Any:
        return self._procs(h, count, arr, 0)

    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetGraphicsRunningProcesses = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses = nvmlDeviceGetGraphicsRunningProcesses_v3

    def nvmlDeviceGetProcessUtilization(
        self, h: Any, samples: Any, count_ref: Any, last_seen: Any
    ) -> Any:
        g = _gpu(h)
        if g is None:
            return INVALID
        c = _obj(count_ref)
        if samples is None or c.value < 1:
            c.value = 1
            return INSUFFICIENT_SIZE
        s = _obj(samples)[0]
        s.pid = os.getpid()
        s.timeStamp = time.time_ns() // 1000
        s.smUtil = g["util"]
        s.memUtil = g["memutil"]
        s.encUtil = g["enc"]
        s.decUtil = g["dec"]
        c.value = 1
        return OK

    # -- events: XID critical errors can be registered; none ever arrives
    def nvmlDeviceGetSupportedEventTypes(self, h: Any, ref: Any) -> Any:
        return self._const(h, ref, 0x8 | 0x10 | 0x20)

    def nvmlDeviceRegisterEvents(self, h: Any, types: Any, es: Any) -> Any:
        if _gpu(h) is None:
            return INVALID
        return NOT_SUPPORTED if _NO_EVENTS else OK

    def nvmlEventSetCreate(self, ref: Any) -> Any:
        return OK

    def nvmlEventSetFree(self, es: Any) -> Any:
        return OK

    def nvmlEventSetWait_v2(self, es: Any, ref: Any, ms: Any) -> Any:
        time.sleep(min(_v(ms), 1000) / 1000)
        return TIMEOUT

    # -- topology: same NUMA node -> host bridge, else cross-socket
    def nvmlDeviceGetTopologyCommonAncestor(self, h1: Any, h2: Any, ref: Any) -> Any:
        g1, g2 = _gpu(h1), _gpu(h2)
        if g1 is None or g2 is None:
            return INVALID
        _obj(ref).value = 30 if g1["numa"] == g2["numa"] else 50  # HOSTBRIDGE / SYSTEM
        return OK

    def nvmlDeviceGetP2PStatus(self, h1: Any, h2: Any, idx: Any, ref: Any) -> Any:
        _obj(ref).value = 0
        return OK


_seen: set[tuple[str, object]] = set()


def _trace(name: Any, rc: Any) -> Any:
    if not _TRACE or (name, rc) in _seen:
        return
    _seen.add((name, rc))
    with open(_TRACE, "a") as f:
        f.write(f"{os.getpid()} {name} {rc}\n")


class _TracingFakeLib(FakeLib):
    """FakeLib that records each (function, return code) pair the first time it is seen."""

    def __getattribute__(self, name: Any) -> Any:
        attr = object.__getattribute__(self, name)
        if not name.startswith("nvml") or not callable(attr):
            return attr

        def traced(*args: Any) -> Any:
            rc = attr(*args)
            _trace(name, rc)
            return rc

        return traced


class _CountingFakeLib(FakeLib):
    """FakeLib that counts calls per function and dumps the counts to MW_FAKE_COUNT."""

    def __getattribute__(self, name: Any) -> Any:
        attr = object.__getattribute__(self, name)
        if not name.startswith("nvml") or not callable(attr):
            return attr

        def counted(*args: Any) -> Any:
            _counts[name] = _counts.get(name, 0) + 1
            return attr(*args)

        return counted


_counts: dict[str, int] = {}


def _dump_counts(path: str) -> None:
    import json
    import threading

    def loop() -> None:
        while True:
            time.sleep(0.5)
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"t": time.time(), "counts": dict(_counts)}, f)
            os.replace(tmp, path)

    threading.Thread(target=loop, name="fakenvml-count", daemon=True).start()


if _p is not None:
    if _COUNT:
        _p.nvmlLib = _CountingFakeLib()
        _dump_counts(_COUNT)
    else:
        _p.nvmlLib = _TracingFakeLib() if _TRACE else FakeLib()
