"""The run/worker store: the latest snapshot of every worker, its limits and its expiry.

A worker is known by ``(run, worker)``. Its session id tells a restart (a new session: its
counters start again) from a late retry (the same session with an older sequence: refused).
A worker not heard from for one TTL reads as inactive; after a second TTL it is forgotten.
A worker that said it finished (``active: false``) is forgotten after one TTL: its final
values stay visible that long, and a finished run is never mistaken for a silent one.
Expiry is evaluated lazily, against an injectable clock, whenever the store is used.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from mirrorwatch.exporter.ingest.errors import IngestError
from mirrorwatch.exporter.ingest.schema import StepDurations, TrainingSnapshot

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
    """How much the store holds; over a limit, a push is refused with 429."""

    max_runs: int = 64
    max_workers: int = 1024
    max_replicas: int = 64
    ttl_seconds: float = 300.0


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
        """Accept ``snapshot`` as the worker's state, or raise IngestError (409, 422 or 429)."""
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
        if run not in self._workers_per_run and len(self._workers_per_run) >= limits.max_runs:
            raise IngestError(
                429,
                "over_limit",
                f"path.run: this exporter already tracks {limits.max_runs} runs "
                "(--max-runs); delete a finished run or wait for it to expire",
                "path.run",
            )
        if len(self._entries) >= limits.max_workers:
            raise IngestError(
                429,
                "over_limit",
                f"path.worker: this exporter already tracks {limits.max_workers} workers "
                "in all (--max-workers); delete finished workers or wait for them to expire",
                "path.worker",
            )

    def _check_replicas(self, snapshot: TrainingSnapshot) -> None:
        most = self.limits.max_replicas
        for field, count in (
            ("body.replicas", snapshot.replicas),
            ("body.replica_devices", len(snapshot.replica_devices)),
        ):
            if count > most:
                raise IngestError(
                    429,
                    "over_limit",
                    f"{field}: {count} replicas is over this exporter's limit of {most} "
                    "per worker (--max-replicas)",
                    field,
                )
        seen: set[int] = set()
        for position, device in enumerate(snapshot.replica_devices):
            if device.replica in seen:
                field = f"body.replica_devices[{position}].replica"
                raise IngestError(
                    422, "invalid", f"{field}: replica {device.replica} is listed twice", field
                )
            seen.add(device.replica)


def _compare(
    previous: WorkerEntry, snapshot: TrainingSnapshot
) -> tuple[PutOutcome, tuple[str, ...]]:
    """How ``snapshot`` relates to the worker's stored one; raises when it must be refused."""
    old = previous.snapshot
    if snapshot.session in previous.retired_sessions:
        raise IngestError(
            409,
            "stale",
            f"body.session: session {snapshot.session!r} of this worker was replaced by "
            f"{old.session!r}; this push is a late retry",
            "body.session",
        )
    if snapshot.session != old.session:
        retired = (*previous.retired_sessions, old.session)[-RETIRED_SESSIONS_KEPT:]
        return PutOutcome.RESTARTED, retired
    if snapshot.sequence < old.sequence:
        raise IngestError(
            409,
            "stale",
            f"body.sequence: {snapshot.sequence} is older than the accepted "
            f"{old.sequence} of session {old.session!r}; this push is a late retry",
            "body.sequence",
        )
    if snapshot.sequence == old.sequence:
        if snapshot == old:
            return PutOutcome.UNCHANGED, previous.retired_sessions
        raise IngestError(
            409,
            "stale",
            f"body.sequence: {snapshot.sequence} of session {old.session!r} was already "
            "accepted with different content; each push needs a new sequence",
            "body.sequence",
        )
    for field, before, after in _counters(old, snapshot):
        if after is not None and before is not None and after < before:
            raise IngestError(
                422,
                "invalid",
                f"{field}: went down from {before:g} to {after:g} within session "
                f"{old.session!r}; a restarted worker must send a new session id",
                field,
            )
    return PutOutcome.UPDATED, previous.retired_sessions


def _counters(
    old: TrainingSnapshot, new: TrainingSnapshot
) -> Iterator[tuple[str, float | None, float | None]]:
    yield "body.steps_total", old.steps_total, new.steps_total
    yield "body.examples_total", old.examples_total, new.examples_total
    yield "body.telemetry_dropped_total", old.telemetry_dropped_total, new.telemetry_dropped_total
    yield from _histogram(
        "step_duration_seconds", old.step_duration_seconds, new.step_duration_seconds
    )
    if old.allreduce_seconds is not None and new.allreduce_seconds is not None:
        yield from _histogram("allreduce_seconds", old.allreduce_seconds, new.allreduce_seconds)


def _histogram(
    name: str, before: StepDurations, after: StepDurations
) -> Iterator[tuple[str, float | None, float | None]]:
    yield f"body.{name}.count", before.count, after.count
    yield f"body.{name}.sum_seconds", before.sum_seconds, after.sum_seconds
    for index, (low, high) in enumerate(
        zip(before.bucket_counts, after.bucket_counts, strict=True)
    ):
        yield f"body.{name}.bucket_counts[{index}]", low, high
