"""The run/worker store: the latest snapshot of every worker, its limits and its expiry.

A worker is known by ``(run, worker)``. Its session id tells a restart (a new session: its
counters start again) from a late retry (the same session with an older sequence: refused).
A worker not heard from for one TTL reads as inactive; after a second TTL it is forgotten.
A worker that said it finished (``active: false``) is forgotten after one TTL: its final
values stay visible that long, and a finished run is never mistaken for a silent one.
Expiry is evaluated lazily, against an injectable clock, whenever the store is used.

A push the store cannot take raises ``PushRefusedError``, naming the snapshot field or the
path part it is about and, over a limit, the limit; the route makes an HTTP answer of it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from mirrorwatch.exporter.ingest.schema import TrainingSnapshot
from mirrorwatch.exporter.settings import Settings, flag

# Earlier session ids remembered per worker, so a late retry from before a restart is refused
# as stale instead of being taken for one more restart (which would flap the counters).
RETIRED_SESSIONS_KEPT = 8


class Clock(Protocol):
    """Monotonic seconds for expiry; wall-clock seconds for the published push time."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


@dataclass(frozen=True)
class Limits:
    """How much the store holds; the values (and their reasons) are settings.py's."""

    max_runs: int
    max_workers_per_run: int
    max_workers: int
    max_replicas: int
    ttl_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            max_runs=settings.max_runs,
            max_workers_per_run=settings.max_workers_per_run,
            max_workers=settings.max_workers,
            max_replicas=settings.max_replicas,
            ttl_seconds=settings.run_ttl,
        )


# The setting each limit is, named as its flag is (cli.py makes flags of setting names).
Limit = Literal["max_runs", "max_workers_per_run", "max_workers", "max_replicas"]
RefusalKind = Literal["stale", "invalid", "over_limit"]


class PushRefusedError(Exception):
    """A push the store does not take.

    Args:
        kind: ``stale`` (a late retry), ``invalid`` (contradicts what was accepted) or
            ``over_limit`` (no room for it).
        subject: what it is about: ``run`` or ``worker`` (the push's path), or a snapshot
            field (``sequence``, ``step_duration_seconds.count``, ``replica_devices[1].replica``).
        message: one sentence saying why, without the subject.
        limit: the limit it is over, for ``over_limit``.
    """

    def __init__(
        self, kind: RefusalKind, subject: str, message: str, limit: Limit | None = None
    ) -> None:
        super().__init__(f"{subject}: {message}")
        self.kind = kind
        self.subject = subject
        self.message = message
        self.limit = limit


class PutOutcome(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    RESTARTED = "restarted"


@dataclass(frozen=True)
class WorkerEntry:
    """One worker's latest accepted snapshot and when it arrived."""

    run: str
    worker: int
    snapshot: TrainingSnapshot
    received_monotonic: float
    received_wall: float
    retired_sessions: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerView:
    """A worker as a scrape sees it: active only while it says so and pushed within the TTL."""

    entry: WorkerEntry
    active: bool


Key = tuple[str, int]


class RunStore:
    """Thread-safe; every method holds the lock only for dictionary work."""

    def __init__(self, limits: Limits, clock: Clock | None = None) -> None:
        self.limits = limits
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        # Least recently pushed first, so expiry pops from the front and stops at the first
        # fresh entry: O(expired) per call, not O(workers).
        self._entries: OrderedDict[Key, WorkerEntry] = OrderedDict()
        self._workers_per_run: Counter[str] = Counter()

    def put(self, run: str, worker: int, snapshot: TrainingSnapshot) -> PutOutcome:
        """Accept ``snapshot`` as the worker's state, or raise PushRefusedError saying why not."""
        self._check_replicas(snapshot)
        now = self._clock.monotonic()
        key = (run, worker)
        with self._lock:
            self._expire(now)
            previous = self._entries.get(key)
            retired: tuple[str, ...] = ()
            if previous is None:
                self._check_room(run)
                outcome = PutOutcome.CREATED
            else:
                outcome, retired = _compare(previous, snapshot)
            self._entries[key] = WorkerEntry(
                run, worker, snapshot, now, self._clock.wall(), retired
            )
            self._entries.move_to_end(key)
            if previous is None:
                self._workers_per_run[run] += 1
        return outcome

    def delete(self, run: str, worker: int) -> bool:
        """Forget the worker now; False when it was not known."""
        with self._lock:
            self._expire(self._clock.monotonic())
            if self._entries.pop((run, worker), None) is None:
                return False
            self._forget_worker_of(run)
            return True

    def views(self) -> list[WorkerView]:
        """Every known worker, in push order (least recent first), with its activity now."""
        now = self._clock.monotonic()
        ttl = self.limits.ttl_seconds
        with self._lock:
            self._expire(now)
            # Once per scrape, not per push: finished workers leave after one TTL.
            for key, entry in list(self._entries.items()):
                if not entry.snapshot.active and now - entry.received_monotonic >= ttl:
                    del self._entries[key]
                    self._forget_worker_of(entry.run)
            entries = list(self._entries.values())
        return [
            WorkerView(entry, entry.snapshot.active and now - entry.received_monotonic < ttl)
            for entry in entries
        ]

    def _expire(self, now: float) -> None:
        horizon = now - 2 * self.limits.ttl_seconds
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.received_monotonic > horizon:
                break
            del self._entries[key]
            self._forget_worker_of(entry.run)

    def _forget_worker_of(self, run: str) -> None:
        self._workers_per_run[run] -= 1
        if self._workers_per_run[run] <= 0:
            del self._workers_per_run[run]

    def _check_room(self, run: str) -> None:
        limits = self.limits
        workers_of_run = self._workers_per_run.get(run, 0)
        if workers_of_run == 0 and len(self._workers_per_run) >= limits.max_runs:
            raise _over(
                "run",
                "max_runs",
                f"this exporter already tracks {limits.max_runs} runs",
                "delete a finished run or wait for it to expire",
            )
        if workers_of_run >= limits.max_workers_per_run:
            raise _over(
                "worker",
                "max_workers_per_run",
                f"run {run!r} already has {limits.max_workers_per_run} workers tracked",
                "delete its finished workers or wait for them to expire",
            )
        if len(self._entries) >= limits.max_workers:
            raise _over(
                "worker",
                "max_workers",
                f"this exporter already tracks {limits.max_workers} workers in all",
                "delete finished workers or wait for them to expire",
            )

    def _check_replicas(self, snapshot: TrainingSnapshot) -> None:
        most = self.limits.max_replicas
        for field, count in (
            ("replicas", snapshot.replicas),
            ("replica_devices", len(snapshot.replica_devices)),
        ):
            if count > most:
                raise PushRefusedError(
                    "over_limit",
                    field,
                    f"{count} replicas is over this exporter's limit of {most} per worker "
                    f"({flag('max_replicas')})",
                    "max_replicas",
                )
        seen: set[int] = set()
        for position, device in enumerate(snapshot.replica_devices):
            if device.replica in seen:
                raise PushRefusedError(
                    "invalid",
                    f"replica_devices[{position}].replica",
                    f"replica {device.replica} is listed twice",
                )
            seen.add(device.replica)


def _over(subject: str, limit: Limit, state: str, remedy: str) -> PushRefusedError:
    return PushRefusedError("over_limit", subject, f"{state} ({flag(limit)}); {remedy}", limit)


def _compare(
    previous: WorkerEntry, snapshot: TrainingSnapshot
) -> tuple[PutOutcome, tuple[str, ...]]:
    """How ``snapshot`` relates to the worker's stored one; raises when it must be refused."""
    old = previous.snapshot
    if snapshot.session in previous.retired_sessions:
        raise PushRefusedError(
            "stale",
            "session",
            f"session {snapshot.session!r} of this worker was replaced by {old.session!r}; "
            "this push is a late retry",
        )
    if snapshot.session != old.session:
        retired = (*previous.retired_sessions, old.session)[-RETIRED_SESSIONS_KEPT:]
        return PutOutcome.RESTARTED, retired
    if snapshot.sequence < old.sequence:
        raise PushRefusedError(
            "stale",
            "sequence",
            f"{snapshot.sequence} is older than the accepted {old.sequence} of session "
            f"{old.session!r}; this push is a late retry",
        )
    if snapshot.sequence == old.sequence:
        if snapshot == old:
            return PutOutcome.UNCHANGED, previous.retired_sessions
        raise PushRefusedError(
            "stale",
            "sequence",
            f"{snapshot.sequence} of session {old.session!r} was already accepted with "
            "different content; each push needs a new sequence",
        )
    for field, before, after in _counters(old, snapshot):
        if after is not None and before is not None and after < before:
            raise PushRefusedError(
                "invalid",
                field,
                f"went down from {before:g} to {after:g} within session {old.session!r}; "
                "a restarted worker must send a new session id",
            )
    return PutOutcome.UPDATED, previous.retired_sessions


def _counters(
    old: TrainingSnapshot, new: TrainingSnapshot
) -> Iterator[tuple[str, float | None, float | None]]:
    yield "steps_total", old.steps_total, new.steps_total
    yield "examples_total", old.examples_total, new.examples_total
    yield "telemetry_dropped_total", old.telemetry_dropped_total, new.telemetry_dropped_total
    before, after = old.step_duration_seconds, new.step_duration_seconds
    yield "step_duration_seconds.count", before.count, after.count
    yield "step_duration_seconds.sum_seconds", before.sum_seconds, after.sum_seconds
    for index, (low, high) in enumerate(
        zip(before.bucket_counts, after.bucket_counts, strict=True)
    ):
        yield f"step_duration_seconds.bucket_counts[{index}]", low, high
