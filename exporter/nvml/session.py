"""One NVML session: the only importer of pynvml, where every NVML failure becomes an outcome.

Each reading goes through ``NvmlSession.call``: unsupported -> ``None`` (absent, never 0); a
missing function or permission -> ``None`` and one log line; a lost GPU -> that GPU marked lost
(no reading asks it again; ``probe`` is how the background thread finds it answering again);
NVML itself gone (driver unloaded) -> ``on_gone``, so the backend goes down and re-initialises.
A session lives from one ``nvmlInit`` to its ``nvmlShutdown``; which GPUs are lost, and where
the field-values batch is unusable, is its own state and ends with it.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from mirrorwatch.contract.vocabulary import canonical_bus_id
from mirrorwatch.exporter.nvml.versions import LADDERS, STABLE_FIELD_IDS, Version

log = logging.getLogger(__name__)

DRIVER_HINT = (
    "driver older than the nvidia-ml-py binding; upgrade the driver or pin an older nvidia-ml-py"
)

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
# Errors that mean NVML itself is gone, not one call or one GPU.
GONE_ERRORS = ("NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED")
# Errors that mean this one GPU no longer answers: it is marked lost.
LOST_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
# Errors a GPU answers when it cannot give one reading: it still answers.
_UNAVAILABLE_READING = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
)

FieldKey = tuple[int, int]


def as_text(value: Any) -> str:
    """NVML strings arrive as bytes from older bindings and as str from newer ones."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def pci_bus_id(value: Any) -> str:
    """NVML's bus id in the shared canonical form; text that is no bus id is kept, lower-cased."""
    text = as_text(value)
    try:
        return canonical_bus_id(text)
    except ValueError:
        return text.strip().lower()


def handle_key(handle: Any) -> object:
    """A hashable identity for an NVML device handle; ctypes pointers compare by address."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


@dataclass(frozen=True)
class GpuHandle:
    """One GPU as this session opened it: its NVML handle and its identity, read once."""

    index: int
    handle: Any
    uuid: str
    name: str
    pci_bus_id: str


class FieldsUnavailableError(Exception):
    """nvmlDeviceGetFieldValues cannot be used on this device: fall back."""


@dataclass(frozen=True)
class ProbeAnswer:
    """What NVML said when a lost GPU was asked again (``NvmlSession.probe``).

    ``outcome``: ``answers`` (the same GPU, under the same handle, answers a reading),
    ``lost`` (it still does not answer; ``detail`` is the NVML error), ``other_gpu`` (its index
    answers with another UUID, given in ``detail``) or ``new_handle`` (the same GPU answers,
    but under another NVML handle than the one this session holds).
    """

    outcome: Literal["answers", "lost", "other_gpu", "new_handle"]
    detail: str = ""


class NvmlSession:
    """The NVML module plus everything a reading needs to act on a failure.

    ``call`` is the one place an NVML error becomes an outcome; the field-values batch feeds
    each field's own return code through the same ``handle_error``.
    """

    def __init__(
        self,
        nvml: ModuleType,
        *,
        generation: int,
        on_gone: Callable[[str, int], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.generation = generation
        self._on_gone = on_gone
        self._clock = clock
        self.error_type: type[Exception] = nvml.NVMLError
        self._lock = threading.Lock()
        self._logged: set[tuple[str, ...]] = set()
        self._lost: dict[int, float] = {}  # GPU index -> when (clock) it was lost
        self._no_field_values: set[int] = set()
        self._symbols: dict[str, bool] = {}
        self._resolved: dict[str, Version | None] = {}
        self._names = {
            int(getattr(nvml, name)): name for name in dir(nvml) if name.startswith("NVML_ERROR_")
        }

    @classmethod
    def start(
        cls,
        nvml: ModuleType | None,
        *,
        generation: int,
        on_gone: Callable[[str, int], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> NvmlSession | str:
        """Import pynvml (unless given a module) and ``nvmlInit``: a session, or why not."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as error:
                return (
                    "NVML could not start: the nvidia-ml-py package (pynvml) cannot be imported:"
                    f" {error}."
                )
            except Exception as error:  # a binding broken at import must not stop the exporter
                log.exception("Importing pynvml failed")
                failure = f"{type(error).__name__}: {error}"
                return f"NVML could not start: importing pynvml failed: {failure}."
        session = cls(nvml, generation=generation, on_gone=on_gone, clock=clock)
        try:
            nvml.nvmlInit()
        except session.error_type as error:
            return f"NVML could not start: {session.describe(error)}."
        except Exception as error:  # a broken binding must not take the exporter down
            log.exception("nvmlInit raised an unexpected error")
            return f"NVML could not start: {type(error).__name__}: {error}."
        return session

    def shutdown(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.error_type as error:
            log.debug("nvmlShutdown failed: %s", error)

    # Errors and their words.

    def constant(self, name: str) -> int | None:
        value = getattr(self.nvml, name, None)
        return None if value is None else int(value)

    def field_id(self, name: str) -> int | None:
        """An NVML_FI_* id: the binding's constant, else its stable number (ids below 199)."""
        value = self.constant(name)
        return STABLE_FIELD_IDS.get(name) if value is None else value

    def error_name(self, error: BaseException) -> str:
        code = getattr(error, "value", None)
        return self._names.get(code, f"NVML error {code}") if isinstance(code, int) else "?"

    def describe(self, error: BaseException) -> str:
        name = self.error_name(error)
        return f"{_INIT_CAUSES.get(name, str(error))} ({name})"

    def is_error(self, error: BaseException, *names: str) -> bool:
        return self.error_name(error) in names

    def log_once(self, key: tuple[str, ...], message: str, *args: object, **extra: object) -> None:
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning(message, *args, extra=extra)

    def gone(self, reason: str) -> None:
        """NVML stopped answering: tell the backend, tagged with this session's generation."""
        self._on_gone(reason, self.generation)

    # GPUs.

    def device_count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def open_gpu(self, index: int) -> GpuHandle | None:
        """GPU ``index`` with its identity; None (logged) when that cannot be read.

        Raises the NVML error when NVML itself is gone, so that init fails as a whole.
        """
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = as_text(nvml.nvmlDeviceGetUUID(handle))
            name = as_text(nvml.nvmlDeviceGetName(handle))
            bus_id = pci_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except self.error_type as error:
            if self.is_error(error, *GONE_ERRORS):
                raise
            log.warning(
                "GPU %d skipped: its identity cannot be read (%s)",
                index,
                self.describe(error),
                extra={"gpu": index, "nvml_error": self.error_name(error)},
            )
            return None
        return GpuHandle(index=index, handle=handle, uuid=uuid, name=name, pci_bus_id=bus_id)

    def driver_version(self) -> str | None:
        try:
            return as_text(self.nvml.nvmlSystemGetDriverVersion())
        except self.error_type as error:
            log.warning("The driver version cannot be read: %s", self.describe(error))
            return None

    def is_lost(self, gpu: GpuHandle) -> bool:
        return gpu.index in self._lost

    @property
    def any_lost(self) -> bool:
        """Some GPU of this session is lost (lets the idle background round skip its GPUs)."""
        return bool(self._lost)

    def lost_since(self, gpu: GpuHandle) -> float | None:
        """When (on the session's clock) ``gpu`` was marked lost; None while it answers."""
        with self._lock:
            return self._lost.get(gpu.index)

    def mark_lost(self, gpu: GpuHandle, why: str) -> None:
        """From now on every reading of ``gpu`` is None, until ``mark_found`` (or a re-init)."""
        with self._lock:
            if gpu.index in self._lost:
                return
            self._lost[gpu.index] = self._clock()
        log.warning(
            "GPU %d (%s) is lost: %s; its readings are absent until it answers NVML again"
            " (probed in the background) or NVML re-initialises",
            gpu.index,
            gpu.uuid,
            why,
            extra={"gpu": gpu.index, "uuid": gpu.uuid, "reason": why},
        )

    def mark_found(self, gpu: GpuHandle) -> float | None:
        """``gpu`` answers again: its readings return. Returns how long it was lost, seconds."""
        with self._lock:
            since = self._lost.pop(gpu.index, None)
        return None if since is None else max(self._clock() - since, 0.0)

    def probe(self, gpu: GpuHandle) -> ProbeAnswer:
        """Ask NVML whether lost ``gpu`` answers again, as itself; marks nothing.

        Its index must give back its UUID (a different card there is not this GPU), answer the
        reading ``alive()`` makes, and do so under the handle this session holds (which every
        reading, the XID event set and the PCIe sampler use). Only the background thread calls
        this: a GPU that fell off the bus can make each call slow.
        """
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
            uuid = as_text(nvml.nvmlDeviceGetUUID(handle))
        except self.error_type as error:
            return self._still_lost(error)
        if uuid != gpu.uuid:
            return ProbeAnswer("other_gpu", uuid)
        try:
            nvml.nvmlDeviceGetMemoryInfo(handle)
        except self.error_type as error:
            # A reading this GPU cannot give is still an answer; any other error (lost,
            # unknown, reset required, timeout) leaves it lost.
            if not self.is_error(error, *_UNAVAILABLE_READING):
                return self._still_lost(error)
        if handle_key(handle) != handle_key(gpu.handle):
            return ProbeAnswer("new_handle")
        return ProbeAnswer("answers")

    def _still_lost(self, error: BaseException) -> ProbeAnswer:
        if self.is_error(error, *GONE_ERRORS):
            self.gone(f"NVML stopped answering: {self.describe(error)}")
        return ProbeAnswer("lost", self.error_name(error))

    # Calls.

    def has_symbol(self, symbol: str) -> bool | None:
        """Whether the loaded libnvidia-ml exports ``symbol`` (a ctypes lookup, kept).

        None where the binding offers no lookup (``_nvmlGetFunctionPointer``): then only the
        wrappers it has can tell.
        """
        known = self._symbols.get(symbol)
        if known is not None:
            return known
        lookup = getattr(self.nvml, "_nvmlGetFunctionPointer", None)
        if lookup is None:
            return None
        try:
            lookup(symbol)
        except self.error_type as error:
            if not self.is_error(error, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                return False  # uninitialised: ask again once NVML is up
            found = False
        else:
            found = True
        with self._lock:
            self._symbols[symbol] = found
        return found

    def resolve(self, api: str) -> Version | None:
        """The newest version of ``api`` (``versions.LADDERS``) this library and binding have.

        Chosen once per session. Taking an older version is what this driver needs, not a
        fault: it is logged once at info level, naming the version skipped.
        """
        if api in self._resolved:
            return self._resolved[api]
        ladder = LADDERS[api]
        chosen: Version | None = None
        for version in ladder:
            if self.usable(version):
                chosen = version
                break
        with self._lock:
            self._resolved[api] = chosen
        if chosen is None:
            self.log_once(
                ("api", api),
                "NVML offers none of %s here; the readings that need them are absent",
                ", ".join(v.symbol for v in ladder),
                nvml_api=api,
            )
        elif chosen is not ladder[0]:
            log.info(
                "NVML %s: this driver's library has no %s, using %s",
                api,
                ladder[0].symbol,
                chosen.symbol,
                extra={"nvml_api": api, "nvml_function": chosen.symbol},
            )
        return chosen

    def resolved(self) -> dict[str, str]:
        """Each API resolved so far -> the symbol it uses ("" where none is available)."""
        with self._lock:
            chosen = dict(self._resolved)
        return {api: "" if v is None else v.symbol for api, v in chosen.items()}

    def usable(self, version: Version) -> bool:
        """The library exports ``version`` and the binding can call it."""
        if self._symbols.get(version.symbol) is False:
            return False
        if version.wrapper and getattr(self.nvml, version.wrapper, None) is None:
            return False
        if any(getattr(self.nvml, name, None) is None for name in version.constants.values()):
            return False
        present = self.has_symbol(version.symbol)
        if present is None:
            # No lookup: the binding's own wrapper is all there is; a keyword-selected or a
            # raw-ctypes version cannot be told apart from the plain one, so only that serves.
            return bool(version.wrapper) and not version.constants
        return present

    def call_api(self, gpu: GpuHandle, api: str, *args: Any, handle: Any = None) -> Any:
        """``api`` through the version ``resolve`` chose; None where there is none.

        A version that answers FunctionNotFound all the same (a binding without a symbol
        lookup, or a wrapper that calls another symbol than its name says) is struck off and
        the next one tried, so the ladder holds either way.
        """
        while (version := self.resolve(api)) is not None and version.wrapper:
            fn = getattr(self.nvml, version.wrapper)
            kwargs = {name: getattr(self.nvml, value) for name, value in version.constants.items()}
            if self.is_lost(gpu):
                return None
            try:
                return fn(gpu.handle if handle is None else handle, *args, **kwargs)
            except self.error_type as error:
                if not self.is_error(error, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    self.handle_error(gpu, version.wrapper, error)
                    return None
            with self._lock:
                self._symbols[version.symbol] = False
                self._resolved.pop(api, None)
        return None

    def call(
        self, gpu: GpuHandle, function: str, *args: Any, handle: Any = None, **kwargs: Any
    ) -> Any:
        """Run ``function(handle, *args)``; ``None`` for any failure, acted on here.

        ``handle`` defaults to the GPU's own; a MIG device's handle is passed here so that its
        failures count against its parent GPU.
        """
        if self.is_lost(gpu):
            return None
        fn = getattr(self.nvml, function, None)
        if fn is None:
            self.log_once(
                ("missing", function),
                "This nvidia-ml-py has no %s; the readings that need it are absent",
                function,
                nvml_function=function,
            )
            return None
        return self.run(gpu, function, fn, *args, handle=handle, **kwargs)

    def run(
        self,
        gpu: GpuHandle,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        handle: Any = None,
        **kwargs: Any,
    ) -> Any:
        """``fn(handle, *args)`` with its NVML errors acted on as ``name``'s; None on failure."""
        if self.is_lost(gpu):
            return None
        try:
            return fn(gpu.handle if handle is None else handle, *args, **kwargs)
        except self.error_type as error:
            self.handle_error(gpu, name, error)
            return None

    def handle_error(self, gpu: GpuHandle, function: str, error: BaseException) -> None:
        name = self.error_name(error)
        context = {"gpu": gpu.index, "uuid": gpu.uuid, "nvml_function": function}
        # NOT_FOUND: nvmlDeviceGetProcessUtilization has no sample newer than asked for.
        if name in (
            "NVML_ERROR_NOT_SUPPORTED",
            "NVML_ERROR_INVALID_ARGUMENT",
            "NVML_ERROR_NOT_FOUND",
        ):
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
        elif name in LOST_ERRORS:
            self.mark_lost(gpu, f"{function} answered {name}")
        elif name in GONE_ERRORS:
            self.gone(f"NVML stopped answering: {self.describe(error)}")
        else:
            self.log_once(
                ("error", function, name),
                "NVML function %s failed: %s; its readings are absent",
                function,
                self.describe(error),
                nvml_error=name,
                **context,
            )

    def field_values(self, gpu: GpuHandle, keys: Sequence[FieldKey]) -> dict[FieldKey, float]:
        """One ``nvmlDeviceGetFieldValues`` call for many fields; each field checked on its own.

        Returns the fields that answered. Raises ``FieldsUnavailableError`` when the call fails
        as a whole (old drivers), so the caller can fall back to the per-function API; it does
        so too, field by field, for each field left out (see ``NvmlDevice._batched``).
        """
        if self.is_lost(gpu):
            return {}
        fn = getattr(self.nvml, "nvmlDeviceGetFieldValues", None)
        if fn is None or gpu.index in self._no_field_values:
            raise FieldsUnavailableError
        request = [field if scope == 0 else (field, scope) for field, scope in keys]
        try:
            answers = fn(gpu.handle, request)
        except TypeError as error:
            # An older nvidia-ml-py takes only bare field ids, not (field, scope) pairs.
            self.log_once(("scoped fields",), "This nvidia-ml-py cannot read per-link fields")
            raise FieldsUnavailableError from error
        except self.error_type as error:
            if self.is_error(
                error,
                "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_NOT_SUPPORTED",
                "NVML_ERROR_INVALID_ARGUMENT",
            ):
                self._no_field_values.add(gpu.index)
                raise FieldsUnavailableError from error
            self.handle_error(gpu, "nvmlDeviceGetFieldValues", error)
            return {}
        values: dict[FieldKey, float] = {}
        success = self.constant("NVML_SUCCESS") or 0
        for key, answer in zip(keys, answers, strict=False):
            code = int(answer.nvmlReturn)
            if code != success:
                failed: Exception = self.nvml.NVMLError(code)
                self.handle_error(gpu, f"nvmlDeviceGetFieldValues(field {key[0]})", failed)
                continue
            member = _VALUE_MEMBERS.get(int(answer.valueType))
            if member is not None:
                values[key] = float(getattr(answer.value, member))
        return values
