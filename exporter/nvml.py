"""The real GPU backend: NVML through nvidia-ml-py, and the only module that imports pynvml.

Every NVML call of a reading goes through one helper, ``NvmlSession.call``, which turns each
failure into one outcome: unsupported -> ``None`` (absent, never 0); a missing function or
permission -> ``None`` and one log line; a lost GPU -> that GPU marked lost; NVML itself gone
(driver unloaded) -> the backend goes down and re-initialises from its background thread.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Literal

from mirrorwatch.exporter.backend import (
    CLOCKS_EVENT_REASONS,
    THROTTLE_REASONS,
    BackendStatus,
    Clock,
    EccErrorType,
    MemoryBytes,
    NvlinkCounters,
    NvlinkErrorType,
    P2pLink,
    PcieLink,
    PeerLink,
    TemperatureThreshold,
)
from mirrorwatch.exporter.nvml_worker import (
    BYTES_PER_KIB,
    BackgroundLoop,
    PcieTotals,
    XidCounts,
    XidEvents,
    sample_pcie_throughput,
)

log = logging.getLogger(__name__)

DRIVER_HINT = (
    "driver older than the nvidia-ml-py binding; upgrade the driver or pin an older nvidia-ml-py"
)
# How often the background thread checks that NVML still sees the same GPUs.
HEALTH_CHECK_INTERVAL_S = 5.0
THREAD_JOIN_TIMEOUT_S = 2.0

# nvmlValueType_t -> the member of nvmlValue_t that holds the value (ABI-stable numbering).
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
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
_TOPOLOGY_LINKS: tuple[tuple[str, P2pLink], ...] = (
    ("NVML_TOPOLOGY_INTERNAL", "pcie_switch"),
    ("NVML_TOPOLOGY_SINGLE", "pcie_switch"),
    ("NVML_TOPOLOGY_MULTIPLE", "pcie_switch"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", "pcie_host_bridge"),
    ("NVML_TOPOLOGY_NODE", "numa_node"),
    ("NVML_TOPOLOGY_SYSTEM", "cross_numa"),
)
# Readable causes for the init failures an operator meets; others use NVML's own words.
_INIT_CAUSES = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "the NVIDIA driver library libnvidia-ml.so.1 was not found",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        "Driver/library version mismatch: the loaded kernel module and libnvidia-ml differ,"
        " usually after a driver upgrade without a reboot"
    ),
    "NVML_ERROR_NO_PERMISSION": "no permission to open the NVIDIA device files",
}

FieldKey = tuple[int, int]


def normalize_pci_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:17:00.0`` as sysfs and TensorFlow print it: ``0000:17:00.0``."""
    text = bus_id.strip().lower()
    try:
        head, function = text.rsplit(".", 1)
        parts = head.split(":")
        domain = parts[-3] if len(parts) == 3 else "0"
        bus, device = parts[-2], parts[-1]
        return (
            f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
        )
    except (ValueError, IndexError):
        return text


def _text(value: Any) -> str:
    """NVML strings arrive as bytes from older bindings and as str from newer ones."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


class NvmlSession:
    """The NVML module plus everything a reading needs to act on a failure.

    ``call`` is the one place an NVML error becomes an outcome; the field-values batch feeds
    each field's own return code through the same ``handle_error``.
    """

    def __init__(self, nvml: ModuleType, on_gone: Callable[[str, int], None]) -> None:
        self.nvml = nvml
        self._on_gone = on_gone
        self.error_type: type[Exception] = nvml.NVMLError
        self._lock = threading.Lock()
        self._logged: set[tuple[str, ...]] = set()
        self._names = {
            int(getattr(nvml, name)): name for name in dir(nvml) if name.startswith("NVML_ERROR_")
        }

    def constant(self, name: str) -> int | None:
        value = getattr(self.nvml, name, None)
        return None if value is None else int(value)

    def error_name(self, error: BaseException) -> str:
        code = getattr(error, "value", None)
        return self._names.get(code, f"NVML error {code}") if isinstance(code, int) else "?"

    def describe(self, error: BaseException) -> str:
        name = self.error_name(error)
        return f"{_INIT_CAUSES.get(name, str(error))} ({name})"

    def make_error(self, code: int) -> Exception:
        error: Exception = self.nvml.NVMLError(code)
        return error

    def is_error(self, error: BaseException, *names: str) -> bool:
        return self.error_name(error) in names

    def log_once(self, key: tuple[str, ...], message: str, *args: object, **extra: object) -> None:
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning(message, *args, extra=extra)

    def call(self, device: NvmlDevice, function: str, *args: Any, fallback: str = "") -> Any:
        """Run ``function(handle, *args)``; ``None`` for any failure, acted on here."""
        if device.lost:
            return None
        fn = getattr(self.nvml, function, None)
        if fn is None:
            if fallback:
                return self.call(device, fallback, *args)
            self.log_once(
                ("missing", function),
                "This nvidia-ml-py has no %s; the readings that need it are absent",
                function,
                nvml_function=function,
            )
            return None
        try:
            return fn(device.handle, *args)
        except self.error_type as error:
            if fallback and self.is_error(error, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                return self.call(device, fallback, *args)
            self.handle_error(device, function, error)
            return None

    def handle_error(self, device: NvmlDevice, function: str, error: BaseException) -> None:
        name = self.error_name(error)
        context = {"gpu": device.index, "uuid": device.uuid, "nvml_function": function}
        if name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
            return
        if name == "NVML_ERROR_FUNCTION_NOT_FOUND":
            self.log_once(
                ("function", function),
                "NVML function %s not found (%s); its readings are absent",
                function,
                DRIVER_HINT,
                nvml_error=name,
                **context,
            )
        elif name == "NVML_ERROR_NO_PERMISSION":
            self.log_once(
                ("permission", function),
                "No permission for NVML function %s; its readings are absent",
                function,
                nvml_error=name,
                **context,
            )
        elif name in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN"):
            device.mark_lost(f"{function} answered {name}")
        elif name in ("NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED"):
            self._on_gone(f"NVML stopped answering: {self.describe(error)}", device.generation)
        else:
            self.log_once(
                ("error", function, name),
                "NVML function %s failed: %s; its readings are absent",
                function,
                self.describe(error),
                nvml_error=name,
                **context,
            )

    def field_values(self, device: NvmlDevice, keys: Sequence[FieldKey]) -> dict[FieldKey, float]:
        """One ``nvmlDeviceGetFieldValues`` call for many fields; each field checked on its own.

        Returns the fields that answered. Raises ``_FieldsUnavailableError`` when the call fails as
        a whole (old drivers), so the caller can fall back to the per-function API; it does so
        too, field by field, for each field left out (see ``NvmlDevice._batched``).
        """
        if device.lost:
            return {}
        fn = getattr(self.nvml, "nvmlDeviceGetFieldValues", None)
        if fn is None or device.fields_unavailable:
            raise _FieldsUnavailableError
        request = [field if scope == 0 else (field, scope) for field, scope in keys]
        try:
            answers = fn(device.handle, request)
        except TypeError as error:
            # An older nvidia-ml-py takes only bare field ids, not (field, scope) pairs.
            self.log_once(("scoped fields",), "This nvidia-ml-py cannot read per-link fields")
            raise _FieldsUnavailableError from error
        except self.error_type as error:
            if self.is_error(
                error,
                "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_NOT_SUPPORTED",
                "NVML_ERROR_INVALID_ARGUMENT",
            ):
                device.fields_unavailable = True
                raise _FieldsUnavailableError from error
            self.handle_error(device, "nvmlDeviceGetFieldValues", error)
            return {}
        values: dict[FieldKey, float] = {}
        success = self.constant("NVML_SUCCESS") or 0
        for key, answer in zip(keys, answers, strict=False):
            code = int(answer.nvmlReturn)
            if code != success:
                self.handle_error(
                    device, f"nvmlDeviceGetFieldValues(field {key[0]})", self.make_error(code)
                )
                continue
            member = _VALUE_MEMBERS.get(int(answer.valueType))
            if member is not None:
                values[key] = float(getattr(answer.value, member))
        return values


class _FieldsUnavailableError(Exception):
    """nvmlDeviceGetFieldValues cannot be used on this device: fall back."""


class NvmlDevice:
    """One GPU read through NVML; implements ``GpuDevice``."""

    def __init__(
        self,
        session: NvmlSession,
        *,
        index: int,
        handle: Any,
        uuid: str,
        name: str,
        pci_bus_id: str,
        generation: int,
        xids: XidCounts,
        pcie_totals: PcieTotals,
    ) -> None:
        self._session = session
        self._nvml = session.nvml
        self._index = index
        self.handle = handle
        self._uuid = uuid
        self._name = name
        self._pci_bus_id = pci_bus_id
        self.generation = generation
        self._xids = xids
        self._pcie_totals = pcie_totals
        self.lost = False
        self.fields_unavailable = False
        self.pcie_byte_fields = False
        self.samples_pcie_throughput = False
        self.nvlink_numbers: tuple[int, ...] = ()
        self.peer_links: tuple[PeerLink, ...] = ()
        self._lost_lock = threading.Lock()

    # Identity, read once at init.
    @property
    def index(self) -> int:
        return self._index

    @property
    def uuid(self) -> str:
        return self._uuid

    @property
    def name(self) -> str:
        return self._name

    @property
    def pci_bus_id(self) -> str:
        return self._pci_bus_id

    def mark_lost(self, why: str) -> None:
        """From now on every reading is None; only a re-init brings the GPU back."""
        with self._lost_lock:
            if self.lost:
                return
            self.lost = True
        log.warning(
            "GPU %d (%s) is lost: %s; its readings are absent until NVML re-initialises",
            self._index,
            self._uuid,
            why,
            extra={"gpu": self._index, "uuid": self._uuid, "reason": why},
        )

    def _call(self, function: str, *args: Any, fallback: str = "") -> Any:
        return self._session.call(self, function, *args, fallback=fallback)

    def _const(self, name: str) -> Any:
        return getattr(self._nvml, name)

    def _fields(self, keys: Sequence[FieldKey]) -> dict[FieldKey, float]:
        return self._session.field_values(self, keys)

    def _field_ids(self, *names: str) -> list[FieldKey] | None:
        """The field ids of these names, or None when this binding lacks one of them."""
        ids = [self._session.constant(name) for name in names]
        return None if any(i is None for i in ids) else [(i, 0) for i in ids if i is not None]

    def _batched(self, *names: str) -> list[float | None]:
        """One batched read of these fields: each one's value, in order, or None for it.

        None where that field did not answer (NVML reports support per field, in each value's
        own ``nvmlReturn``: a successful call can answer NotSupported for some fields), or where
        the batched call is unusable on this device or binding. The caller then reads that one
        quantity from its single-call API, where one exists.
        """
        keys = self._field_ids(*names)
        if keys is None:
            return [None] * len(names)
        try:
            answered = self._fields(keys)
        except _FieldsUnavailableError:
            return [None] * len(names)
        return [answered.get(key) for key in keys]

    def alive(self) -> bool:
        self._call("nvmlDeviceGetMemoryInfo")
        return not self.lost

    def utilization_ratio(self) -> float | None:
        rates = self._call("nvmlDeviceGetUtilizationRates")
        return None if rates is None else float(rates.gpu) / 100.0

    def memory_utilization_ratio(self) -> float | None:
        rates = self._call("nvmlDeviceGetUtilizationRates")
        return None if rates is None else float(rates.memory) / 100.0

    def memory_bytes(self) -> MemoryBytes | None:
        memory = self._call("nvmlDeviceGetMemoryInfo")
        return None if memory is None else MemoryBytes(float(memory.used), float(memory.total))

    def temperature_celsius(self) -> float | None:
        return _number(self._call("nvmlDeviceGetTemperature", self._const("NVML_TEMPERATURE_GPU")))

    def temperature_threshold_celsius(self, threshold: TemperatureThreshold) -> float | None:
        which = self._const(_TEMPERATURE_THRESHOLDS[threshold])
        return _number(self._call("nvmlDeviceGetTemperatureThreshold", which))

    def fan_speed_ratios(self) -> Sequence[float | None]:
        count = self._call("nvmlDeviceGetNumFans")
        if not count:
            return []
        speeds = (self._call("nvmlDeviceGetFanSpeed_v2", fan) for fan in range(int(count)))
        return [None if speed is None else float(speed) / 100.0 for speed in speeds]

    def power_watts(self) -> float | None:
        return _divided(self._call("nvmlDeviceGetPowerUsage"), _MW_PER_W)

    def power_limit_watts(self) -> float | None:
        return _divided(self._call("nvmlDeviceGetEnforcedPowerLimit"), _MW_PER_W)

    def energy_joules_total(self) -> float | None:
        (millijoules,) = self._batched("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        if millijoules is None:
            millijoules = _number(self._call("nvmlDeviceGetTotalEnergyConsumption"))
        return _divided(millijoules, _MJ_PER_J)

    def clock_hertz(self, clock: Clock) -> float | None:
        return _scaled(
            self._call("nvmlDeviceGetClockInfo", self._const(_CLOCKS[clock])), _HZ_PER_MHZ
        )

    def clock_max_hertz(self, clock: Clock) -> float | None:
        which = self._const(_CLOCKS[clock])
        return _scaled(self._call("nvmlDeviceGetMaxClockInfo", which), _HZ_PER_MHZ)

    def clocks_event_reasons(self) -> Mapping[str, bool] | None:
        active = self._call(
            "nvmlDeviceGetCurrentClocksEventReasons",
            fallback="nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        supported = self._call(
            "nvmlDeviceGetSupportedClocksEventReasons",
            fallback="nvmlDeviceGetSupportedClocksThrottleReasons",
        )
        if active is None or supported is None:
            return None
        return {
            reason: bool(int(active) & bit)
            for reason, bit in CLOCKS_EVENT_REASONS
            if int(supported) & bit
        }

    def throttle_seconds_total(self) -> Mapping[str, float]:
        fields = self._batched(*(field for _, field, _ in _THROTTLE_SOURCES))
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
            generation_max=_integer(self._call("nvmlDeviceGetMaxPcieLinkGeneration")),
            width=_integer(self._call("nvmlDeviceGetCurrPcieLinkWidth")),
            width_max=_integer(self._call("nvmlDeviceGetMaxPcieLinkWidth")),
        )
        return None if link == PcieLink(None, None, None, None) else link

    def pcie_bytes_total(self) -> tuple[float, float] | None:
        if self.lost:
            return None
        if self.pcie_byte_fields:
            keys = self._field_ids(
                "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"
            )
            try:
                answered = self._fields(keys) if keys is not None else {}
            except _FieldsUnavailableError:
                answered = {}
            if keys is None or any(key not in answered for key in keys):
                return None
            return answered[keys[0]], answered[keys[1]]
        if self.samples_pcie_throughput:
            return self._pcie_totals.for_gpu(self._uuid)
        return None

    def pcie_replays_total(self) -> float | None:
        (replays,) = self._batched("NVML_FI_DEV_PCIE_REPLAY_COUNTER")
        if replays is None:
            replays = _number(self._call("nvmlDeviceGetPcieReplayCounter"))
        return replays

    def nvlinks(self) -> Mapping[int, NvlinkCounters]:
        states = {
            link: self._call("nvmlDeviceGetNvLinkState", link) for link in self.nvlink_numbers
        }
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
        transmit = self._session.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX")
        receive = self._session.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
        if transmit is None or receive is None or not self.nvlink_numbers:
            return {}
        keys = [(field, link) for link in self.nvlink_numbers for field in (transmit, receive)]
        try:
            answered = self._fields(keys)
        except _FieldsUnavailableError:
            return {}
        return {
            link: (answered.get((transmit, link)), answered.get((receive, link)))
            for link in self.nvlink_numbers
        }

    def ecc_errors_total(self) -> Mapping[EccErrorType, float] | None:
        enabled, *fields = self._batched(
            "NVML_FI_DEV_ECC_CURRENT", *(f for f, _ in _ECC_ERRORS.values())
        )
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
        return self._xids.for_gpu(self._uuid)

    def xid_last_event_timestamp_seconds(self) -> Mapping[int, float]:
        # Stamped by the background thread when each event arrives (Unix time).
        return self._xids.last_event_for_gpu(self._uuid)

    def peers(self) -> Sequence[PeerLink]:
        return self.peer_links


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _integer(value: Any) -> int | None:
    return None if value is None else int(value)


def _divided(value: Any, divisor: float) -> float | None:
    return None if value is None else float(value) / divisor


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else float(value) * factor


class NvmlBackend:
    """``GpuBackend`` over NVML: lazy init, background retry and recovery, XID events.

    Args:
        retry_initial_s: first delay before retrying a failed NVML init; doubles per failure.
        retry_max_s: the most the retry delay grows to.
        pcie_sample_interval_s: how often PCIe throughput is sampled into byte counters on
            GPUs whose NVML has no PCIe byte-counter fields.
        nvml: a pynvml-compatible module (tests inject a fake); default imports pynvml in
            ``start()``, so a missing package is a status reason, not an import error.
        background: run the background work in a daemon thread; False leaves it to ``poll()``.
        clock: monotonic seconds, for the retry and sampling schedules.
    """

    def __init__(
        self,
        *,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
        pcie_sample_interval_s: float = 1.0,
        nvml: ModuleType | None = None,
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_initial_s <= retry_max_s:
            raise ValueError("retry delays must satisfy 0 < retry_initial_s <= retry_max_s")
        if pcie_sample_interval_s <= 0:
            raise ValueError("pcie_sample_interval_s must be positive")
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._pcie_interval_s = pcie_sample_interval_s
        self._module = nvml
        self._clock = clock
        self._loop = BackgroundLoop(self.poll, name="mirrorwatch-nvml") if background else None
        # _lifecycle serialises init, teardown and background rounds; _state guards what
        # scrapes read, and is never held across an NVML call.
        self._lifecycle = threading.RLock()
        self._state = threading.Lock()
        self._status = BackendStatus(up=False, reason="NVML has not been started.")
        self._devices: tuple[NvmlDevice, ...] = ()
        self._driver_version: str | None = None
        self._session: NvmlSession | None = None
        self._initialized = False
        self._started = False
        self._closed = False
        self._generation = 0
        self._gone_reason: str | None = None
        self._retry_delay_s = retry_initial_s
        self._next_retry_at = 0.0
        self._next_pcie_at = 0.0
        self._next_health_at = 0.0
        self._device_count = 0
        self._lost_reinit_delay_s = retry_initial_s
        self._next_lost_reinit_at = 0.0
        self._xid_events: XidEvents | None = None
        self._xids = XidCounts()
        self._pcie_totals = PcieTotals()

    @property
    def kind(self) -> Literal["nvml"]:
        return "nvml"

    def start(self) -> None:
        """Try NVML once now, then keep trying (and watching) in the background."""
        with self._lifecycle:
            if self._started or self._closed:
                return
            self._started = True
            self._attempt_init()
        if self._loop is not None:
            self._loop.start()

    def shutdown(self) -> None:
        if self._loop is not None and not self._loop.stop(THREAD_JOIN_TIMEOUT_S):
            log.warning("The NVML background thread did not stop in time")
        with self._lifecycle:
            if self._closed:
                return
            self._closed = True
            self._teardown()
            with self._state:
                self._status = BackendStatus(up=False, reason="The NVML backend was shut down.")

    def status(self) -> BackendStatus:
        with self._state:
            return self._status

    def driver_version(self) -> str | None:
        with self._state:
            return self._driver_version

    def gpus(self) -> Sequence[NvmlDevice]:
        with self._state:
            return self._devices if self._status.up else ()

    def poll(self) -> float:
        """One round of background work; returns the seconds until the next one is due."""
        with self._lifecycle:
            if self._closed or not self._started:
                return HEALTH_CHECK_INTERVAL_S
            if self._gone_reason is not None:
                self._teardown()
            if not self.status().up:
                if self._clock() >= self._next_retry_at:
                    self._attempt_init()
                if not self.status().up:
                    return max(self._next_retry_at - self._clock(), 0.0)
            if self._xid_events is not None:
                self._xid_events.drain()
            now = self._clock()
            if now >= self._next_pcie_at and self._session is not None:
                self._next_pcie_at = now + self._pcie_interval_s
                sample_pcie_throughput(self._session, self.gpus(), self._pcie_totals, self._clock)
            if now >= self._next_health_at:
                self._next_health_at = now + HEALTH_CHECK_INTERVAL_S
                self._check_health()
            if self._xid_events is not None:
                return 0.0  # the event wait itself paced this round
            return max(min(self._next_pcie_at, self._next_health_at) - self._clock(), 0.0)

    # Init, teardown and recovery.

    def _load_module(self) -> ModuleType | str:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as error:
                return f"the nvidia-ml-py package (pynvml) cannot be imported: {error}"
            except Exception as error:  # a binding broken at import must not stop the exporter
                log.exception("Importing pynvml failed")
                return f"importing pynvml failed: {type(error).__name__}: {error}"
        return self._module

    def _attempt_init(self) -> None:
        nvml = self._load_module()
        if isinstance(nvml, str):
            self._init_failed(f"NVML could not start: {nvml}.")
            return
        with self._state:
            self._generation += 1
            generation = self._generation
            self._gone_reason = None
        session = NvmlSession(nvml, self._on_gone)
        try:
            nvml.nvmlInit()
        except session.error_type as error:
            self._init_failed(f"NVML could not start: {session.describe(error)}.")
            return
        except Exception as error:  # a broken binding must not take the exporter down
            log.exception("nvmlInit raised an unexpected error")
            self._init_failed(f"NVML could not start: {type(error).__name__}: {error}.")
            return
        self._session = session
        self._initialized = True
        try:
            devices = self._open_devices(session, generation)
        except session.error_type as error:
            self._teardown()
            self._init_failed(f"NVML started but cannot list GPUs: {session.describe(error)}.")
            return
        gone = self._pending_gone_reason()
        if gone is not None:
            self._teardown()
            self._init_failed(f"{gone}.")
            return
        version = self._read_driver_version(session)
        self._xid_events = XidEvents.open(
            session,
            devices,
            self._xids,
            on_gone=lambda reason: self._on_gone(reason, generation),
        )
        now = self._clock()
        self._next_pcie_at = now
        self._next_health_at = now + HEALTH_CHECK_INTERVAL_S
        self._retry_delay_s = self._retry_initial_s
        with self._state:
            self._devices = tuple(devices)
            self._driver_version = version
            self._status = BackendStatus(up=True)
        log.info(
            "NVML started: %d GPU(s), driver %s",
            len(devices),
            version,
            extra={"gpus": len(devices), "driver_version": version},
        )

    def _pending_gone_reason(self) -> str | None:
        with self._state:
            return self._gone_reason

    def _init_failed(self, reason: str) -> None:
        with self._state:
            changed = self._status.reason != reason
            self._status = BackendStatus(up=False, reason=reason)
        delay = self._retry_delay_s
        self._next_retry_at = self._clock() + delay
        self._retry_delay_s = min(delay * 2, self._retry_max_s)
        level = logging.WARNING if changed else logging.DEBUG
        log.log(level, "%s Retrying in %.3g s", reason, delay, extra={"retry_in_s": delay})

    def _on_gone(self, reason: str, generation: int) -> None:
        """A reading found NVML gone (driver unloaded): go down, re-init in the background."""
        with self._state:
            if generation != self._generation or self._gone_reason is not None:
                return
            self._gone_reason = reason
            was_up = self._status.up
            self._status = BackendStatus(up=False, reason=f"{reason}; re-initialising.")
            self._next_retry_at = self._clock()
            self._retry_delay_s = self._retry_initial_s
        if was_up:
            log.warning("%s; re-initialising NVML", reason, extra={"reason": reason})

    def _teardown(self) -> None:
        """Forget the GPUs, free the event set and shut NVML down (once per successful init)."""
        with self._state:
            self._devices = ()
            self._gone_reason = None
            self._generation += 1  # readings still in flight on the old GPUs are ignored
        session, self._session = self._session, None
        xid_events, self._xid_events = self._xid_events, None
        if xid_events is not None:
            xid_events.close()
        if session is None or not self._initialized:
            return
        self._initialized = False
        try:
            session.nvml.nvmlShutdown()
        except session.error_type as error:
            log.debug("nvmlShutdown failed: %s", error)

    def _open_devices(self, session: NvmlSession, generation: int) -> list[NvmlDevice]:
        nvml = session.nvml
        count = int(nvml.nvmlDeviceGetCount())
        self._device_count = count
        devices: list[NvmlDevice] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                name = _text(nvml.nvmlDeviceGetName(handle))
                bus_id = normalize_pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
            except session.error_type as error:
                if session.is_error(
                    error, "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED"
                ):
                    raise
                log.warning(
                    "GPU %d skipped: its identity cannot be read (%s)",
                    index,
                    session.describe(error),
                    extra={"gpu": index, "nvml_error": session.error_name(error)},
                )
                continue
            device = NvmlDevice(
                session,
                index=index,
                handle=handle,
                uuid=uuid,
                name=name,
                pci_bus_id=bus_id,
                generation=generation,
                xids=self._xids,
                pcie_totals=self._pcie_totals,
            )
            self._probe_features(session, device)
            devices.append(device)
        self._compute_topology(session, devices)
        return devices

    def _probe_features(self, session: NvmlSession, device: NvmlDevice) -> None:
        """What this GPU offers that is fixed for its life: NVLink links, PCIe byte fields."""
        max_links = session.constant("NVML_NVLINK_MAX_LINKS") or 0
        device.nvlink_numbers = tuple(
            link
            for link in range(max_links)
            if session.call(device, "nvmlDeviceGetNvLinkState", link) is not None
        )
        tx = session.constant("NVML_FI_DEV_PCIE_COUNT_TX_BYTES")
        rx = session.constant("NVML_FI_DEV_PCIE_COUNT_RX_BYTES")
        if tx is not None and rx is not None:
            try:
                device.pcie_byte_fields = len(session.field_values(device, [(tx, 0), (rx, 0)])) == 2
            except _FieldsUnavailableError:
                device.pcie_byte_fields = False
        device.samples_pcie_throughput = not device.pcie_byte_fields

    def _compute_topology(self, session: NvmlSession, devices: Sequence[NvmlDevice]) -> None:
        by_bus_id = {device.pci_bus_id: device for device in devices}
        switch = session.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH")
        nvlinked: set[frozenset[int]] = set()
        on_nvswitch: set[int] = set()
        for device in devices:
            for number in device.nvlink_numbers:
                if not session.call(device, "nvmlDeviceGetNvLinkState", number):
                    continue
                remote = session.call(device, "nvmlDeviceGetNvLinkRemotePciInfo", number)
                peer = (
                    None
                    if remote is None
                    else by_bus_id.get(normalize_pci_bus_id(_text(remote.busId)))
                )
                if peer is not None and peer is not device:
                    nvlinked.add(frozenset((device.index, peer.index)))
                elif switch is not None:
                    kind = session.call(device, "nvmlDeviceGetNvLinkRemoteDeviceType", number)
                    if kind is not None and int(kind) == switch:
                        on_nvswitch.add(device.index)
        levels = {
            level: link
            for name, link in _TOPOLOGY_LINKS
            if (level := session.constant(name)) is not None
        }
        peers: dict[int, list[PeerLink]] = {device.index: [] for device in devices}
        for position, first in enumerate(devices):
            for second in devices[position + 1 :]:
                pair = frozenset((first.index, second.index))
                link: P2pLink | None = None
                if pair in nvlinked or pair <= on_nvswitch:
                    link = "nvlink"
                else:
                    level = session.call(
                        first, "nvmlDeviceGetTopologyCommonAncestor", second.handle
                    )
                    link = None if level is None else levels.get(int(level))
                if link is not None:
                    peers[first.index].append(PeerLink(second.index, link))
                    peers[second.index].append(PeerLink(first.index, link))
        for device in devices:
            device.peer_links = tuple(sorted(peers[device.index], key=lambda p: p.peer_index))

    def _read_driver_version(self, session: NvmlSession) -> str | None:
        try:
            return _text(session.nvml.nvmlSystemGetDriverVersion())
        except session.error_type as error:
            log.warning("The driver version cannot be read: %s", session.describe(error))
            return None

    def _check_health(self) -> None:
        """A reloaded driver or vanished GPUs show up here even when no scrape is running."""
        session = self._session
        if session is None:
            return
        try:
            count = int(session.nvml.nvmlDeviceGetCount())
        except session.error_type as error:
            self._on_gone(f"NVML stopped answering: {session.describe(error)}", self._generation)
            return
        if count != self._device_count:
            self._on_gone(
                f"NVML now sees {count} GPU(s) instead of {self._device_count}", self._generation
            )
            return
        devices = self.gpus()
        if not devices or not all(device.lost for device in devices):
            self._lost_reinit_delay_s = self._retry_initial_s
            return
        # An unloaded driver often answers GpuIsLost rather than Uninitialized; only a re-init
        # can tell that from GPUs that really fell off the bus, so retry it with backoff.
        now = self._clock()
        if now >= self._next_lost_reinit_at:
            self._next_lost_reinit_at = now + self._lost_reinit_delay_s
            self._lost_reinit_delay_s = min(self._lost_reinit_delay_s * 2, self._retry_max_s)
            self._on_gone("every GPU is lost", self._generation)
