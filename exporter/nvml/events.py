"""XID critical-error events: one NVML event set drained by the background thread, and counts.

The thread writes the counts; scrapes read them, under the counts' own lock. The counts belong
to the backend, not to one session, so they survive an NVML re-init.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mirrorwatch.exporter.nvml.session import GONE_ERRORS, GpuHandle, NvmlSession, handle_key

log = logging.getLogger(__name__)

XID_FALLEN_OFF_THE_BUS = 79
# The longest one wait for XID events blocks the background thread (the backend asks for less
# when other work is due sooner). The driver sleeps in nvmlEventSetWait, and ctypes drops the
# GIL around the call (pynvml loads libnvidia-ml with ctypes.CDLL; the ctypes docs, "Loading
# shared libraries": the GIL "is released before calling any function exported by these
# libraries"), so a long wait costs nothing while idle; its bound is how long shutdown
# (which waits for the thread, lifecycle.THREAD_JOIN_TIMEOUT_S) and a re-init that a scrape
# asked for can take (about a second). Each wake-up costs ~0.2 ms of CPU on the 2-core CI VM
# (a cold thread, a timeout exception, one background round; bench/peers_bench.py's idle
# phase): 100 ms waits made 2 ms of CPU per idle second, 1 s waits make ~0.2 ms.
EVENT_WAIT_MAX_MS = 1000
# At most this many XID events are taken per round, so a storm cannot starve the rest.
EVENTS_PER_ROUND = 64


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


class XidEvents:
    """One NVML event set for XID critical errors, on every GPU that can report them."""

    def __init__(
        self,
        session: NvmlSession,
        event_set: Any,
        gpus: Iterable[GpuHandle],
        counts: XidCounts,
    ) -> None:
        self._session = session
        self._event_set = event_set
        self._by_handle = {handle_key(gpu.handle): gpu for gpu in gpus}
        self._counts = counts

    @classmethod
    def open(
        cls, session: NvmlSession, gpus: Sequence[GpuHandle], counts: XidCounts
    ) -> XidEvents | None:
        """Register every GPU that supports XID events; None when none does."""
        nvml = session.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except session.error_type as error:
            log.warning("XID events are unavailable: %s", session.describe(error))
            return None
        registered = []
        for gpu in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, nvml.nvmlEventTypeXidCriticalError, event_set
                )
                registered.append(gpu)
            except session.error_type as error:
                if session.is_error(error, "NVML_ERROR_NOT_SUPPORTED"):
                    log.info(
                        "GPU %d does not report XID events",
                        gpu.index,
                        extra={"gpu": gpu.index, "uuid": gpu.uuid},
                    )
                else:
                    session.handle_error(gpu, "nvmlDeviceRegisterEvents", error)
        events = cls(session, event_set, registered, counts)
        if not registered:
            events.close()
            return None
        return events

    def drain(self, wait_ms: int = EVENT_WAIT_MAX_MS) -> None:
        """Wait up to ``wait_ms`` (at most EVENT_WAIT_MAX_MS) for XID events; count them."""
        session, nvml = self._session, self._session.nvml
        timeout_ms = max(0, min(wait_ms, EVENT_WAIT_MAX_MS))
        for _ in range(EVENTS_PER_ROUND):
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
            except session.error_type as error:
                if session.is_error(error, *GONE_ERRORS):
                    session.gone(f"NVML stopped answering: {session.describe(error)}")
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
        gpu = self._by_handle.get(handle_key(event.device))
        if gpu is None:
            log.warning("XID %d from a GPU that is not registered", xid, extra={"xid": xid})
            return
        self._counts.add(gpu.uuid, xid, time.time())
        log.warning(
            "GPU %d (%s) reported XID %d",
            gpu.index,
            gpu.uuid,
            xid,
            extra={"gpu": gpu.index, "uuid": gpu.uuid, "xid": xid},
        )
        if xid == XID_FALLEN_OFF_THE_BUS:
            self._session.mark_lost(gpu, "XID 79: the GPU has fallen off the bus")

    def close(self) -> None:
        session = self._session
        try:
            session.nvml.nvmlEventSetFree(self._event_set)
        except session.error_type as error:
            log.debug("nvmlEventSetFree failed: %s", error)
