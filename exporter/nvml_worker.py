"""The NVML backend's off-scrape-path work: the background thread, XID events, PCIe sampling.

Nothing here imports pynvml: NVML arrives as the module object inside the backend's session.
The thread writes the counters below; scrapes read them, each under its own lock.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirrorwatch.exporter.nvml import NvmlDevice, NvmlSession

log = logging.getLogger(__name__)

BYTES_PER_KIB = 1024.0
XID_FALLEN_OFF_THE_BUS = 79
# Each wait for XID events blocks the background thread at most this long.
EVENT_WAIT_MS = 100
# At most this many XID events are taken per round, so a storm cannot starve the rest.
EVENTS_PER_ROUND = 64

# The loop never sleeps longer than this, so a schedule changed by a scrape (a driver that
# vanished) is acted on promptly even while the backend waits out a long retry delay.
MAX_SLEEP_S = 1.0
# A failing poll is retried after this long rather than spinning.
ERROR_PAUSE_S = 1.0


class BackgroundLoop:
    """One daemon thread calling ``poll()`` until stopped; ``poll`` returns the next delay."""

    def __init__(self, poll: Callable[[], float], *, name: str) -> None:
        self._poll = poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, timeout_s: float) -> bool:
        """Ask the thread to finish and wait for it; False when it did not finish in time."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self._poll()
            except Exception:
                # The thread is the backend's only way back from a failure: it must survive
                # anything one round throws, and say so.
                log.exception("NVML background work failed; retrying")
                delay = ERROR_PAUSE_S
            self._stop.wait(min(max(delay, 0.0), MAX_SLEEP_S))


class XidCounts:
    """XID events seen since the exporter started, per GPU UUID and XID number.

    Each XID number also keeps the Unix time of its latest event, so that alerts can tell a
    new event from an old count even when a restart brings the count back to the same value.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, float]] = {}
        self._last_at: dict[str, dict[int, float]] = {}

    def add(self, uuid: str, xid: int, at_s: float) -> None:
        """Count one event of `xid` on GPU `uuid`, seen at Unix time `at_s`."""
        with self._lock:
            per_gpu = self._counts.setdefault(uuid, {})
            per_gpu[xid] = per_gpu.get(xid, 0.0) + 1.0
            last = self._last_at.setdefault(uuid, {})
            last[xid] = max(last.get(xid, at_s), at_s)

    def for_gpu(self, uuid: str) -> Mapping[int, float]:
        with self._lock:
            return dict(self._counts.get(uuid, {}))

    def last_event_for_gpu(self, uuid: str) -> Mapping[int, float]:
        """Unix time of the latest event of each XID number GPU `uuid` reported."""
        with self._lock:
            return dict(self._last_at.get(uuid, {}))


@dataclass
class _PcieSum:
    at_s: float
    transmit_bytes: float = 0.0
    receive_bytes: float = 0.0


class PcieTotals:
    """Cumulative PCIe bytes integrated from periodic throughput samples, per GPU UUID.

    Each sample is a rate (bytes per second) measured just now; it is taken to hold since the
    previous sample. The first sample only starts the clock, so totals begin at 0.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, _PcieSum] = {}

    def add_sample(
        self, uuid: str, transmit_bytes_per_s: float, receive_bytes_per_s: float, at_s: float
    ) -> None:
        with self._lock:
            total = self._sums.get(uuid)
            if total is None:
                self._sums[uuid] = _PcieSum(at_s=at_s)
                return
            elapsed_s = max(at_s - total.at_s, 0.0)
            total.transmit_bytes += transmit_bytes_per_s * elapsed_s
            total.receive_bytes += receive_bytes_per_s * elapsed_s
            total.at_s = at_s

    def for_gpu(self, uuid: str) -> tuple[float, float] | None:
        with self._lock:
            total = self._sums.get(uuid)
            return None if total is None else (total.transmit_bytes, total.receive_bytes)


def handle_key(handle: Any) -> object:
    """A hashable identity for an NVML device handle; ctypes pointers compare by address."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


class XidEvents:
    """One NVML event set for XID critical errors, on every GPU that can report them."""

    def __init__(
        self,
        session: NvmlSession,
        event_set: Any,
        devices: Iterable[NvmlDevice],
        counts: XidCounts,
        on_gone: Callable[[str], None],
    ) -> None:
        self._session = session
        self._event_set = event_set
        self._by_handle = {handle_key(device.handle): device for device in devices}
        self._counts = counts
        self._on_gone = on_gone

    @classmethod
    def open(
        cls,
        session: NvmlSession,
        devices: Sequence[NvmlDevice],
        counts: XidCounts,
        on_gone: Callable[[str], None],
    ) -> XidEvents | None:
        """Register every GPU that supports XID events; None when none does."""
        nvml = session.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except session.error_type as error:
            log.warning("XID events are unavailable: %s", session.describe(error))
            return None
        registered = []
        for device in devices:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    device.handle, nvml.nvmlEventTypeXidCriticalError, event_set
                )
                registered.append(device)
            except session.error_type as error:
                if session.is_error(error, "NVML_ERROR_NOT_SUPPORTED"):
                    log.info(
                        "GPU %d does not report XID events",
                        device.index,
                        extra={"gpu": device.index, "uuid": device.uuid},
                    )
                else:
                    session.handle_error(device, "nvmlDeviceRegisterEvents", error)
        events = cls(session, event_set, registered, counts, on_gone)
        if not registered:
            events.close()
            return None
        return events

    def drain(self) -> None:
        """Wait up to EVENT_WAIT_MS for XID events and count what arrives."""
        session, nvml = self._session, self._session.nvml
        timeout_ms = EVENT_WAIT_MS
        for _ in range(EVENTS_PER_ROUND):
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
            except session.error_type as error:
                if session.is_error(
                    error, "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED"
                ):
                    self._on_gone(f"NVML stopped answering: {session.describe(error)}")
                elif not session.is_error(error, "NVML_ERROR_TIMEOUT"):
                    session.log_once(
                        ("events", session.error_name(error)),
                        "Waiting for XID events failed: %s",
                        session.describe(error),
                        nvml_function="nvmlEventSetWait_v2",
                    )
                return
            timeout_ms = 0  # take what is already queued without blocking again
            if int(event.eventType) & int(nvml.nvmlEventTypeXidCriticalError):
                self._record(event)

    def _record(self, event: Any) -> None:
        xid = int(event.eventData)
        device = self._by_handle.get(handle_key(event.device))
        if device is None:
            log.warning("XID %d from a GPU that is not registered", xid, extra={"xid": xid})
            return
        self._counts.add(device.uuid, xid, time.time())
        log.warning(
            "GPU %d (%s) reported XID %d",
            device.index,
            device.uuid,
            xid,
            extra={"gpu": device.index, "uuid": device.uuid, "xid": xid},
        )
        if xid == XID_FALLEN_OFF_THE_BUS:
            device.mark_lost("XID 79: the GPU has fallen off the bus")

    def close(self) -> None:
        session = self._session
        try:
            session.nvml.nvmlEventSetFree(self._event_set)
        except session.error_type as error:
            log.debug("nvmlEventSetFree failed: %s", error)


def sample_pcie_throughput(
    session: NvmlSession,
    devices: Iterable[NvmlDevice],
    totals: PcieTotals,
    clock: Callable[[], float],
) -> None:
    """Add one PCIe throughput sample per GPU that has no PCIe byte-counter fields.

    nvmlDeviceGetPcieThroughput blocks ~20 ms per direction and answers KB/s (KiB/s) over
    that window, so only the background thread calls it.
    """
    tx_counter = session.constant("NVML_PCIE_UTIL_TX_BYTES")
    rx_counter = session.constant("NVML_PCIE_UTIL_RX_BYTES")
    for device in devices:
        if not device.samples_pcie_throughput or device.lost:
            continue
        tx_kib_s = session.call(device, "nvmlDeviceGetPcieThroughput", tx_counter)
        rx_kib_s = session.call(device, "nvmlDeviceGetPcieThroughput", rx_counter)
        if tx_kib_s is None or rx_kib_s is None:
            # Unsupported or forbidden does not change while the GPU lives: stop asking it.
            device.samples_pcie_throughput = False
            continue
        totals.add_sample(
            device.uuid, float(tx_kib_s) * BYTES_PER_KIB, float(rx_kib_s) * BYTES_PER_KIB, clock()
        )
