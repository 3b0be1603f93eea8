"""What both front ends share: their settings and one worker's meter, snapshots and pusher.

The Keras callback and the torch monitor differ only in where their steps come from; each
builds one :class:`Telemetry` from :func:`settings` and feeds its meter.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from mirrorwatch.contract.vocabulary import MAX_WORKER, RUN_RULE, is_run_id
from mirrorwatch.telemetry.comm import CommMeter
from mirrorwatch.telemetry.meter import StepMeter
from mirrorwatch.telemetry.pusher import (
    DEFAULT_URL,
    FINAL_PUSH_DEADLINE_SECONDS,
    Endpoint,
    Pusher,
)
from mirrorwatch.telemetry.snapshot import DeviceProbe, SnapshotBuilder

__all__ = ["FINAL_PUSH_DEADLINE_SECONDS", "Settings", "Telemetry", "fresh_run_id", "settings"]


def fresh_run_id() -> str:
    """A run id for a run nobody named: ``run-`` and 12 random hex digits."""
    return f"run-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Settings:
    """Where one worker reports, checked: the same rules and fallbacks for both front ends."""

    url: str
    run: str
    token: str | None
    worker: int
    global_batch_size: int | None
    interval: float


def settings(
    url: str | None,
    run: str | None,
    token: str | None,
    global_batch_size: int | None,
    interval: float,
    worker: int,
) -> Settings:
    """The arguments with their environment fallbacks (``MIRRORWATCH_URL``, ``MIRRORWATCH_RUN``,
    ``MIRRORWATCH_INGEST_TOKEN``), or ValueError naming the one that is wrong."""
    url = url or os.environ.get("MIRRORWATCH_URL") or DEFAULT_URL
    run = run or os.environ.get("MIRRORWATCH_RUN") or fresh_run_id()
    if not is_run_id(run):
        raise ValueError(f"run must be {RUN_RULE}, got {run!r}")
    if not 0 <= worker <= MAX_WORKER:
        raise ValueError(f"worker must be 0..{MAX_WORKER}, got {worker}")
    if global_batch_size is not None and global_batch_size < 1:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    if not interval > 0:
        raise ValueError(f"interval must be positive seconds, got {interval}")
    token = token or os.environ.get("MIRRORWATCH_INGEST_TOKEN") or None
    return Settings(url, run, token, int(worker), global_batch_size, float(interval))


class Telemetry:
    """One worker's session: the meter its front end feeds, the snapshots built from it off the
    training thread, and the pusher that sends them. ``log`` is the front end's logger."""

    def __init__(
        self,
        config: Settings,
        probe: DeviceProbe,
        log: logging.Logger,
        loss: Callable[[], float | None] | None = None,
        comm: CommMeter | None = None,
    ) -> None:
        self.settings = config
        self.session = uuid.uuid4().hex
        self.log = log
        self.meter = StepMeter()
        endpoint = Endpoint.parse(config.url, config.run, config.worker, config.token)
        self.snapshots = SnapshotBuilder(
            self.meter, self.session, config.global_batch_size, probe, loss=loss, comm=comm
        )
        self.pusher = Pusher(
            endpoint, self.snapshots.body, config.interval, self.snapshots.find_gpus, log=log
        )
        self._pusher_lock = threading.Lock()
        self._warned: set[str] = set()
        self._warned_lock = threading.Lock()  # hooks may run on framework threads

    def start(self) -> None:
        with self._pusher_lock:
            self.pusher.start()

    def stop(self) -> None:
        """Send the final snapshot, waiting at most FINAL_PUSH_DEADLINE_SECONDS; say if it did
        not make it."""
        with self._pusher_lock:
            finished = self.pusher.stop(FINAL_PUSH_DEADLINE_SECONDS)
        if not finished:
            self.log.warning(
                "mirrorwatch: the final snapshot did not reach %s within %g s",
                self.settings.url,
                FINAL_PUSH_DEADLINE_SECONDS,
            )

    def warn_once(self, where: str, error: BaseException) -> None:
        """Log ``error`` the first time ``where`` fails; training goes on either way."""
        with self._warned_lock:
            if where in self._warned:
                return
            self._warned.add(where)
        self.log.warning("mirrorwatch: telemetry error in %s, training goes on: %r", where, error)
