"""The NVML backend's lifecycle: init with backoff, background rounds, recovery and shutdown.

Each successful init opens one ``NvmlSession``, its GPUs (identity, features, topology), its
XID event set, its PCIe sampler and the re-probing of its lost GPUs; a teardown drops them all.
What must outlive a re-init (XID counts, integrated PCIe bytes) belongs to the backend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import ModuleType
from typing import Literal

from mirrorwatch.exporter.backend import BackendStatus, P2pCapability, P2pStatus
from mirrorwatch.exporter.nvml import preflight
from mirrorwatch.exporter.nvml.device import NvmlDevice
from mirrorwatch.exporter.nvml.events import XidCounts, XidEvents
from mirrorwatch.exporter.nvml.features import DeviceFeatures, probe_features
from mirrorwatch.exporter.nvml.gpm import GpmSampler
from mirrorwatch.exporter.nvml.loop import BackgroundLoop
from mirrorwatch.exporter.nvml.pcie import PcieSampler, PcieTotals
from mirrorwatch.exporter.nvml.processes import ProcessReader
from mirrorwatch.exporter.nvml.recovery import LOST_PROBE_INITIAL_S, LostGpuRecovery
from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession
from mirrorwatch.exporter.nvml.topology import peer_links

log = logging.getLogger(__name__)

# How often the background thread checks that NVML still sees the same GPUs.
HEALTH_CHECK_INTERVAL_S = 5.0
# GPM metrics are means over this long (two samples), the compose stack's scrape interval.
GPM_SAMPLE_INTERVAL_S = 15.0
# Longer than the longest XID event wait (events.EVENT_WAIT_MAX_MS), so shutdown finds the
# thread finished; the thread is a daemon, so even a driver stuck in a call cannot hold the
# process.
THREAD_JOIN_TIMEOUT_S = 2.0


class NvmlBackend:
    """``GpuBackend`` over NVML: lazy init, background retry and recovery, XID events.

    Args:
        retry_initial_s: first delay before retrying a failed NVML init; doubles per failure.
        retry_max_s: the most the retry delay grows to; also the longest wait between two
            probes of a lost GPU (the first comes ``LOST_PROBE_INITIAL_S`` after the loss).
        pcie_sample_interval_s: how often PCIe throughput is sampled into byte counters on
            GPUs whose NVML has no PCIe byte-counter fields.
        nvml: a pynvml-compatible module (tests inject a fake); default imports pynvml in
            ``start()``, so a missing package is a status reason, not an import error.
        background: run the background work in a daemon thread; False leaves it to ``poll()``.
        clock: monotonic seconds, for the retry, probe and sampling schedules.
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
        self._pcie_sampler: PcieSampler | None = None
        self._gpm_sampler: GpmSampler | None = None
        self._next_gpm_at = 0.0
        self._recovery: LostGpuRecovery | None = None
        self._xids = XidCounts()
        self._pcie_totals = PcieTotals()

    @property
    def session(self) -> NvmlSession | None:
        """The NVML session now open (None while NVML is down): which versions it chose."""
        return self._session

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

    # Pre-flight readings (mirrorwatch-doctor; nvml/preflight.py).

    def cuda_driver_version(self) -> tuple[int, int] | None:
        with self._state:
            session = self._session if self._status.up else None
        return None if session is None else preflight.cuda_driver_version(session)

    def p2p_status(self, first: int, second: int) -> Mapping[P2pCapability, P2pStatus]:
        with self._state:
            session = self._session if self._status.up else None
            by_index = {device.index: device for device in self._devices}
        if session is None or first not in by_index or second not in by_index:
            return {}
        return preflight.p2p_status(session, by_index[first].gpu, by_index[second].gpu)

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
            if self._recovery is not None:
                self._recovery.run()  # before sampling, so a GPU found back is sampled at once
            now = self._clock()
            pcie = self._pcie_sampler
            if pcie is not None and pcie.sampling and now >= self._next_pcie_at:
                self._next_pcie_at = now + self._pcie_interval_s
                pcie.sample()
            if now >= self._next_gpm_at and self._gpm_sampler is not None:
                self._next_gpm_at = now + GPM_SAMPLE_INTERVAL_S
                self._gpm_sampler.sample()
            if now >= self._next_health_at:
                self._next_health_at = now + HEALTH_CHECK_INTERVAL_S
                self._check_health()
            if self._pending_gone_reason() is not None:
                return 0.0  # tear down and re-initialise in the next round
            due_s = self._next_work_in_s()
            if self._xid_events is not None:
                # Block in the driver for XID events until other work is due: idle, the thread
                # wakes only for that work or once per events.EVENT_WAIT_MAX_MS, never to spin.
                self._xid_events.drain(round(due_s * 1000))
                return 0.0
            return due_s

    def _next_work_in_s(self) -> float:
        """Seconds until the next health check, PCIe or GPM sample or lost-GPU probe is due.

        A sampler with no GPU left to sample is no reason to wake.
        """
        due = [self._next_health_at]
        if self._pcie_sampler is not None and self._pcie_sampler.sampling:
            due.append(self._next_pcie_at)
        if self._gpm_sampler is not None and self._gpm_sampler.sampled:
            due.append(self._next_gpm_at)
        wait = min(due) - self._clock()
        probe_in = self._recovery.next_probe_in_s() if self._recovery is not None else None
        if probe_in is not None:
            wait = min(wait, probe_in)
        return max(wait, 0.0)

    # Init, teardown and recovery.

    def _attempt_init(self) -> None:
        with self._state:
            self._generation += 1
            generation = self._generation
            self._gone_reason = None
        started = NvmlSession.start(
            self._module, generation=generation, on_gone=self._on_gone, clock=self._clock
        )
        if isinstance(started, str):
            self._init_failed(started)
            return
        session = self._session = started
        self._module = session.nvml  # pynvml is imported once
        try:
            devices = self._open_devices(session)
        except session.error_type as error:
            self._teardown()
            self._init_failed(f"NVML started but cannot list GPUs: {session.describe(error)}.")
            return
        gone = self._pending_gone_reason()
        if gone is not None:
            self._teardown()
            self._init_failed(f"{gone}.")
            return
        version = session.driver_version()
        gpus = [device.gpu for device in devices]
        self._xid_events = XidEvents.open(session, gpus, self._xids)
        self._recovery = LostGpuRecovery(
            session,
            gpus,
            clock=self._clock,
            initial_s=min(LOST_PROBE_INITIAL_S, self._retry_max_s),
            max_s=self._retry_max_s,
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

    def _open_devices(self, session: NvmlSession) -> list[NvmlDevice]:
        """Every GPU whose identity reads, with its features and peer links, and the sampler."""
        count = session.device_count()
        self._device_count = count
        probed: list[tuple[GpuHandle, DeviceFeatures]] = []
        for index in range(count):
            gpu = session.open_gpu(index)
            if gpu is not None:
                probed.append((gpu, probe_features(session, gpu)))
        peers = peer_links(session, [(gpu, features.nvlink_numbers) for gpu, features in probed])
        sampler = PcieSampler(
            session,
            [gpu for gpu, features in probed if features.samples_pcie_throughput],
            self._pcie_totals,
            self._clock,
        )
        self._pcie_sampler = sampler
        gpm = self._gpm_sampler = GpmSampler(session, [gpu for gpu, _ in probed])
        processes = ProcessReader(session)
        return [
            NvmlDevice(
                session,
                gpu,
                replace(features, peer_links=links),
                xids=self._xids,
                pcie=sampler,
                processes=processes,
                gpm=gpm,
            )
            for (gpu, features), links in zip(probed, peers, strict=True)
        ]

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
        if self._loop is not None:
            self._loop.wake()  # a scrape may have found it: re-initialise now, not next round

    def _teardown(self) -> None:
        """Forget the GPUs, free the event set and shut NVML down (once per successful init)."""
        with self._state:
            self._devices = ()
            self._gone_reason = None
            self._generation += 1  # readings still in flight on the old GPUs are ignored
        session, self._session = self._session, None
        xid_events, self._xid_events = self._xid_events, None
        self._pcie_sampler = None
        gpm, self._gpm_sampler = self._gpm_sampler, None
        if gpm is not None:
            gpm.close()
        self._recovery = None
        if xid_events is not None:
            xid_events.close()
        if session is not None:
            session.shutdown()

    def _check_health(self) -> None:
        """A reloaded driver or vanished GPUs show up here even when no scrape is running."""
        session = self._session
        if session is None:
            return
        try:
            count = session.device_count()
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
