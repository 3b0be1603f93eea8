"""One GPU's readings through NVML, in base units: implements ``GpuDevice``.

What cannot change while a GPU lives in one NVML session (temperature thresholds, maximum
clocks, the maximum PCIe link, the fan count, the clocks-event reasons it supports) is read
once and kept. Within one scrape (opened by ``alive()``, the probe every scrape starts with)
the batched fields are read in one ``nvmlDeviceGetFieldValues`` call and each reading that two
methods share (memory info, utilisation rates) is asked once; see ``_Round``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from mirrorwatch.exporter.backend import (
    CLOCKS_EVENT_REASONS,
    THROTTLE_REASONS,
    Clock,
    DeviceConfig,
    EccErrorType,
    GpmReading,
    GpuProcesses,
    MemoryBytes,
    MigDevice,
    NvlinkCounters,
    NvlinkErrorType,
    PcieLink,
    PeerLink,
    TemperatureThreshold,
)
from mirrorwatch.exporter.nvml.events import XidCounts
from mirrorwatch.exporter.nvml.features import DeviceFeatures
from mirrorwatch.exporter.nvml.gpm import GpmSampler
from mirrorwatch.exporter.nvml.mig import mig_devices, mig_enabled
from mirrorwatch.exporter.nvml.pcie import BYTES_PER_KIB, PcieSampler
from mirrorwatch.exporter.nvml.preflight import read_config
from mirrorwatch.exporter.nvml.processes import ProcessReader
from mirrorwatch.exporter.nvml.session import (
    FieldKey,
    FieldsUnavailableError,
    GpuHandle,
    NvmlSession,
)

_NS_PER_S = 1e9
_MJ_PER_J = 1000.0
_MW_PER_W = 1000.0
_HZ_PER_MHZ = 1e6

_TEMPERATURE_THRESHOLDS: Mapping[TemperatureThreshold, str] = {
    "slowdown": "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
    "shutdown": "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
    "gpu_max": "NVML_TEMPERATURE_THRESHOLD_GPU_MAX",
    "memory_max": "NVML_TEMPERATURE_THRESHOLD_MEM_MAX",
}
_CLOCKS: Mapping[Clock, str] = {
    "graphics": "NVML_CLOCK_GRAPHICS",
    "sm": "NVML_CLOCK_SM",
    "memory": "NVML_CLOCK_MEM",
}
# THROTTLE_REASONS order is nvmlPerfPolicyType_t order: the field ids and policies line up.
_THROTTLE_SOURCES: tuple[tuple[str, str, str], ...] = tuple(
    zip(
        THROTTLE_REASONS,
        (
            "NVML_FI_DEV_PERF_POLICY_POWER",
            "NVML_FI_DEV_PERF_POLICY_THERMAL",
            "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST",
            "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT",
            "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION",
            "NVML_FI_DEV_PERF_POLICY_RELIABILITY",
        ),
        (
            "NVML_PERF_POLICY_POWER",
            "NVML_PERF_POLICY_THERMAL",
            "NVML_PERF_POLICY_SYNC_BOOST",
            "NVML_PERF_POLICY_BOARD_LIMIT",
            "NVML_PERF_POLICY_LOW_UTILIZATION",
            "NVML_PERF_POLICY_RELIABILITY",
        ),
        strict=True,
    )
)
_NVLINK_ERRORS: Mapping[NvlinkErrorType, str] = {
    "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
}
_ECC_ERRORS: Mapping[EccErrorType, tuple[str, str]] = {
    "corrected": ("NVML_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
    "uncorrected": ("NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
}
_ENERGY_FIELDS = ("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION",)
_THROTTLE_FIELDS = tuple(field for _, field, _ in _THROTTLE_SOURCES)
_PCIE_BYTE_FIELDS = ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES")
_REPLAY_FIELDS = ("NVML_FI_DEV_PCIE_REPLAY_COUNTER",)
_ECC_FIELDS = ("NVML_FI_DEV_ECC_CURRENT", *(f for f, _ in _ECC_ERRORS.values()))
# Every unscoped field a scrape reads, asked in one call per scrape (per-link NVLink fields stay
# apart: a binding without scoped fields must not cost the others their batch).
_SCRAPE_FIELDS = (*_ENERGY_FIELDS, *_THROTTLE_FIELDS, *_REPLAY_FIELDS, *_ECC_FIELDS)
_UNREAD: Final = object()
_T = TypeVar("_T")


class _Round:
    """The readings of one scrape that several methods share, each handed out once.

    ``alive()`` opens a round: the memory info it read serves ``memory_bytes()``, one
    utilisation call serves both ratios, and the first batched-field reading fetches every
    field of the scrape in one ``nvmlDeviceGetFieldValues`` call. A reading asked again in the
    same round (or with no round open, as a direct caller does) is read afresh, so no value is
    ever served twice and none is older than the scrape that asked for it.
    """

    def __init__(self, memory: Any) -> None:
        self.lock = threading.Lock()
        self.shared: dict[str, Any] = {"memory": memory}
        self.fields: dict[FieldKey, float] | None = None  # None: not fetched yet this round
        self.fields_unavailable = False
        self.used_groups: set[str] = set()
        # The processes on the GPU, read once per scrape: the processes collector and the
        # runs' foreign-process families (collectors/training.py) describe the same moment.
        self.processes: Any = _UNREAD

    def take(self, key: str) -> Any:
        with self.lock:
            return self.shared.pop(key, _UNREAD)


class NvmlDevice:
    """One GPU read through NVML; implements ``GpuDevice``.

    Args:
        session: the NVML session that opened the GPU; its errors become outcomes there.
        gpu: the GPU's handle and identity.
        features: what it offers for its life (NVLink links, PCIe byte fields, peer links).
        xids: the backend's XID counts, which outlive the session.
        pcie: the session's PCIe throughput sampler, for GPUs without PCIe byte fields.
        processes: the session's process reader (None: no process readings).
        gpm: the session's background GPM sampler (None: no GPM readings).
    """

    def __init__(
        self,
        session: NvmlSession,
        gpu: GpuHandle,
        features: DeviceFeatures,
        *,
        xids: XidCounts,
        pcie: PcieSampler,
        processes: ProcessReader | None = None,
        gpm: GpmSampler | None = None,
    ) -> None:
        self._session = session
        self._nvml = session.nvml
        self._xids = xids
        self._pcie = pcie
        self._processes = processes
        self._gpm = gpm
        self.gpu: Final = gpu
        self.features: Final = features
        # Identity, read once at init.
        self.index: Final = gpu.index
        self.uuid: Final = gpu.uuid
        self.name: Final = gpu.name
        self.pci_bus_id: Final = gpu.pci_bus_id
        self._static: dict[object, Any] = {}
        self._round: _Round | None = None
        self._scrape_fields = self._field_ids(*_SCRAPE_FIELDS, *self._pcie_field_names())

    @property
    def lost(self) -> bool:
        return self._session.is_lost(self.gpu)

    def _call(self, function: str, *args: Any) -> Any:
        return self._session.call(self.gpu, function, *args)

    def _api(self, api: str, *args: Any) -> Any:
        """``api`` in the version this driver has (``versions.LADDERS``)."""
        return self._session.call_api(self.gpu, api, *args)

    def _const(self, name: str) -> Any:
        return getattr(self._nvml, name)

    def _fields(self, keys: Sequence[FieldKey]) -> dict[FieldKey, float]:
        return self._session.field_values(self.gpu, keys)

    def _field_ids(self, *names: str) -> list[FieldKey] | None:
        """The field ids of these names, or None when this binding lacks one of them."""
        ids = [self._session.field_id(name) for name in names]
        return None if any(i is None for i in ids) else [(i, 0) for i in ids if i is not None]

    def _pcie_field_names(self) -> tuple[str, ...]:
        return _PCIE_BYTE_FIELDS if self.features.pcie_byte_fields else ()

    def _kept(self, key: object, read: Callable[[], _T]) -> _T:
        """A reading that cannot change while this GPU lives in this session: read once.

        An unsupported answer is kept too (it stays unsupported); one lost to a lost GPU is
        not, so the GPU is asked again once it is back.
        """
        value = self._static.get(key, _UNREAD)
        if value is _UNREAD:
            value = read()
            if not self.lost:
                self._static[key] = value
        return value  # type: ignore[no-any-return]

    def _round_fields(self, group: str) -> dict[FieldKey, float] | None:
        """This round's batched fields, once per round for ``group``; None: read afresh."""
        current = self._round
        if current is None or self._scrape_fields is None:
            return None
        with current.lock:
            if group in current.used_groups:
                return None
            current.used_groups.add(group)
            if current.fields is None and not current.fields_unavailable:
                try:
                    current.fields = self._fields(self._scrape_fields)
                except FieldsUnavailableError:
                    current.fields_unavailable = True
            if current.fields_unavailable:
                raise FieldsUnavailableError
            assert current.fields is not None
            return current.fields

    def _batched(self, *names: str) -> list[float | None]:
        """One batched read of these fields: each one's value, in order, or None for it.

        None where that field did not answer (NVML reports support per field, in each value's
        own ``nvmlReturn``: a successful call can answer NotSupported for some fields), or where
        the batched call is unusable on this device or binding. The caller then reads that one
        quantity from its single-call API, where one exists. Within a scrape the fields come
        from the round's one call (``_Round``).
        """
        keys = self._field_ids(*names)
        if keys is None:
            return [None] * len(names)
        try:
            answered = self._round_fields(names[0])
            if answered is None:
                answered = self._fields(keys)
        except FieldsUnavailableError:
            return [None] * len(names)
        return [answered.get(key) for key in keys]

    def alive(self) -> bool:
        """Probe the GPU, and open this scrape's round of shared readings (``_Round``)."""
        memory = self._api("memory")
        self._round = _Round(memory)
        return not self.lost

    def _shared(self, key: str, read: Callable[[], Any], sibling: str = "") -> Any:
        """This round's reading ``key`` if not handed out yet, else a fresh ``function`` call.

        A fresh call inside a round leaves its answer for ``sibling``, the other reading made
        from the same call.
        """
        current = self._round
        if current is not None:
            value = current.take(key)
            if value is not _UNREAD:
                return value
        value = read()
        if current is not None and sibling:
            with current.lock:
                current.shared[sibling] = value
        return value

    def _utilization_rates(self) -> Any:
        return self._call("nvmlDeviceGetUtilizationRates")

    def utilization_ratio(self) -> float | None:
        rates = self._shared("utilization", self._utilization_rates, "memory_utilization")
        return None if rates is None else float(rates.gpu) / 100.0

    def memory_utilization_ratio(self) -> float | None:
        rates = self._shared("memory_utilization", self._utilization_rates, "utilization")
        return None if rates is None else float(rates.memory) / 100.0

    def memory_bytes(self) -> MemoryBytes | None:
        memory = self._shared("memory", lambda: self._api("memory"))
        return None if memory is None else MemoryBytes(float(memory.used), float(memory.total))

    def temperature_celsius(self) -> float | None:
        return _number(self._call("nvmlDeviceGetTemperature", self._const("NVML_TEMPERATURE_GPU")))

    def temperature_threshold_celsius(self, threshold: TemperatureThreshold) -> float | None:
        which = self._const(_TEMPERATURE_THRESHOLDS[threshold])
        return self._kept(
            ("threshold", threshold),
            lambda: _number(self._call("nvmlDeviceGetTemperatureThreshold", which)),
        )

    def fan_speed_ratios(self) -> Sequence[float | None]:
        if self._session.has_symbol("nvmlDeviceGetNumFans") is False:
            # Before 510.39.01 there is no fan count: the v1 call reads the first fan, and
            # answers NotSupported on a board without one.
            speed = self._call("nvmlDeviceGetFanSpeed")
            return [] if speed is None else [float(speed) / 100.0]
        count = self._kept("fans", lambda: self._call("nvmlDeviceGetNumFans"))
        if not count:
            return []
        speeds = (self._call("nvmlDeviceGetFanSpeed_v2", fan) for fan in range(int(count)))
        return [None if speed is None else float(speed) / 100.0 for speed in speeds]

    def power_watts(self) -> float | None:
        return _divided(self._call("nvmlDeviceGetPowerUsage"), _MW_PER_W)

    def power_limit_watts(self) -> float | None:
        return _divided(self._call("nvmlDeviceGetEnforcedPowerLimit"), _MW_PER_W)

    def energy_joules_total(self) -> float | None:
        (millijoules,) = self._batched(*_ENERGY_FIELDS)
        if millijoules is None:
            millijoules = _number(self._call("nvmlDeviceGetTotalEnergyConsumption"))
        return _divided(millijoules, _MJ_PER_J)

    def clock_hertz(self, clock: Clock) -> float | None:
        return _scaled(
            self._call("nvmlDeviceGetClockInfo", self._const(_CLOCKS[clock])), _HZ_PER_MHZ
        )

    def clock_max_hertz(self, clock: Clock) -> float | None:
        which = self._const(_CLOCKS[clock])
        return self._kept(
            ("clock_max", clock),
            lambda: _scaled(self._call("nvmlDeviceGetMaxClockInfo", which), _HZ_PER_MHZ),
        )

    def clocks_event_reasons(self) -> Mapping[str, bool] | None:
        active = self._api("clocks_event_reasons")
        supported = self._kept(
            "clocks_event_reasons", lambda: self._api("supported_clocks_event_reasons")
        )
        if active is None or supported is None:
            return None
        return {
            reason: bool(int(active) & bit)
            for reason, bit in CLOCKS_EVENT_REASONS
            if int(supported) & bit
        }

    def throttle_seconds_total(self) -> Mapping[str, float]:
        fields = self._batched(*_THROTTLE_FIELDS)
        seconds: dict[str, float] = {}
        for (reason, _, policy), nanoseconds in zip(_THROTTLE_SOURCES, fields, strict=True):
            if nanoseconds is None:
                status = self._call("nvmlDeviceGetViolationStatus", self._const(policy))
                nanoseconds = None if status is None else float(status.violationTime)
            if nanoseconds is not None:
                seconds[reason] = nanoseconds / _NS_PER_S
        return seconds

    def pcie_link(self) -> PcieLink | None:
        link = PcieLink(
            generation=_integer(self._call("nvmlDeviceGetCurrPcieLinkGeneration")),
            generation_max=self._kept(
                "pcie_generation_max",
                lambda: _integer(self._call("nvmlDeviceGetMaxPcieLinkGeneration")),
            ),
            width=_integer(self._call("nvmlDeviceGetCurrPcieLinkWidth")),
            width_max=self._kept(
                "pcie_width_max", lambda: _integer(self._call("nvmlDeviceGetMaxPcieLinkWidth"))
            ),
        )
        return None if link == PcieLink(None, None, None, None) else link

    def pcie_bytes_total(self) -> tuple[float, float] | None:
        if self.lost:
            return None
        if not self.features.pcie_byte_fields:
            return self._pcie.bytes_total(self.gpu)
        keys = self._field_ids(*_PCIE_BYTE_FIELDS)
        try:
            answered = None if keys is None else self._round_fields("pcie_bytes")
            if answered is None:
                answered = self._fields(keys) if keys is not None else {}
        except FieldsUnavailableError:
            answered = {}
        if keys is None or any(key not in answered for key in keys):
            return None
        return answered[keys[0]], answered[keys[1]]

    def pcie_replays_total(self) -> float | None:
        (replays,) = self._batched(*_REPLAY_FIELDS)
        if replays is None:
            replays = _number(self._call("nvmlDeviceGetPcieReplayCounter"))
        return replays

    def nvlinks(self) -> Mapping[int, NvlinkCounters]:
        numbers = self.features.nvlink_numbers
        states = {link: self._call("nvmlDeviceGetNvLinkState", link) for link in numbers}
        throughput = self._nvlink_throughput_kib()
        links: dict[int, NvlinkCounters] = {}
        for link, state in states.items():
            if state is None or self.lost:
                continue
            errors: dict[NvlinkErrorType, float] = {}
            for kind, counter in _NVLINK_ERRORS.items():
                count = self._call("nvmlDeviceGetNvLinkErrorCounter", link, self._const(counter))
                if count is not None:
                    errors[kind] = float(count)
            transmit, receive = throughput.get(link, (None, None))
            links[link] = NvlinkCounters(
                up=bool(state),
                transmit_bytes=_scaled(transmit, BYTES_PER_KIB),
                receive_bytes=_scaled(receive, BYTES_PER_KIB),
                errors=errors,
            )
        return {} if self.lost else links

    def _nvlink_throughput_kib(self) -> dict[int, tuple[float | None, float | None]]:
        """Per-link data KiB moved, one batched call with scopeId = link number."""
        numbers = self.features.nvlink_numbers
        transmit = self._session.field_id("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX")
        receive = self._session.field_id("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
        if transmit is None or receive is None or not numbers:
            return {}
        keys = [(field, link) for link in numbers for field in (transmit, receive)]
        try:
            answered = self._fields(keys)
        except FieldsUnavailableError:
            return {}
        return {
            link: (answered.get((transmit, link)), answered.get((receive, link)))
            for link in numbers
        }

    def ecc_errors_total(self) -> Mapping[EccErrorType, float] | None:
        enabled, *fields = self._batched(*_ECC_FIELDS)
        if enabled is None:
            mode = self._call("nvmlDeviceGetEccMode")
            on = int(self._const("NVML_FEATURE_ENABLED"))
            enabled = None if mode is None else float(int(mode[0]) == on)
        if not enabled:
            return None
        counts: dict[EccErrorType, float] = {}
        for (kind, (_, error_type)), count in zip(_ECC_ERRORS.items(), fields, strict=True):
            if count is None:
                count = _number(
                    self._call(
                        "nvmlDeviceGetTotalEccErrors",
                        self._const(error_type),
                        self._const("NVML_VOLATILE_ECC"),
                    )
                )
            if count is not None:
                counts[kind] = count
        return counts or None

    def xid_errors_total(self) -> Mapping[int, float]:
        # Kept for a lost GPU too: the XID that lost it is the evidence worth alerting on.
        return self._xids.for_gpu(self.uuid)

    def xid_last_event_timestamp_seconds(self) -> Mapping[int, float]:
        # Stamped by the background thread when each event arrives (Unix time).
        return self._xids.last_event_for_gpu(self.uuid)

    def peers(self) -> Sequence[PeerLink]:
        return self.features.peer_links

    def processes(self) -> GpuProcesses | None:
        """The GPU's processes; within a scrape's round, one NVML reading serves every caller.

        Unlike the round's other readings this one is handed out more than once: its families
        must agree with each other, and a second read would find no newer per-process sample
        (``nvmlDeviceGetProcessUtilization`` answers since the last one).
        """
        if self._processes is None or self.lost:
            return None
        current = self._round
        if current is not None:
            with current.lock:
                if current.processes is not _UNREAD:
                    return cast("GpuProcesses | None", current.processes)
        reading = self._processes.read(self.gpu)
        if current is not None:
            with current.lock:
                current.processes = reading
        return reading

    def gpm(self) -> GpmReading | None:
        # Sampled by the background thread (nvml/gpm.py); a scrape only reads the result.
        if self._gpm is None or self.lost:
            return None
        return self._gpm.reading(self.gpu)

    def config(self) -> DeviceConfig | None:
        # Pre-flight only (nvml/preflight.py): read afresh on each call, never by a scrape.
        return None if self.lost else read_config(self._session, self.gpu)

    def mig_enabled(self) -> bool | None:
        # The mode changes only through a GPU reset, which ends this session's handle.
        return self._kept("mig_enabled", lambda: mig_enabled(self._session, self.gpu))

    def mig_devices(self) -> Sequence[MigDevice]:
        # Read every scrape: instances are created and destroyed while MIG stays on.
        if self.lost or not self.mig_enabled():
            return ()
        gpm = None if self._gpm is None else self._gpm.instance_readings(self.gpu)
        return mig_devices(self._session, self.gpu, gpm)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _integer(value: Any) -> int | None:
    return None if value is None else int(value)


def _divided(value: Any, divisor: float) -> float | None:
    return None if value is None else float(value) / divisor


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else float(value) * factor
