"""Communication time per step: the all-reduces a step waited on, as one histogram.

A front end that sees each all-reduce (the torch monitor's DDP communication hook) hands every
finished one to :meth:`CommMeter.add` as a :class:`Span`, from whatever thread learnt of it,
and closes the step with :meth:`CommMeter.end_step` on the training thread. Both are one
append to a queue, with no lock; nothing is computed there. The pusher thread's
:meth:`CommMeter.read` sorts the queue into steps and turns each closed step into its
communication time: the length of the union of its spans, so buckets reduced at the same time
are not counted twice. A span may not know its times yet (CUDA events still queued on the
device): that step, and those after it, wait for a later read.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.telemetry.meter import cumulative

# Closed steps whose spans are still unresolved that are kept; beyond it the oldest are
# dropped (a device that never completes its events must not grow the process).
MAX_PENDING_STEPS = 4096
# Spans and step ends queued unread; beyond it the training thread sorts them into steps itself
# (a pusher backing off for a minute must not grow the process either).
MAX_QUEUED_EVENTS = 65536


class Span(Protocol):
    """One all-reduce: ``(start, end)`` in seconds on one clock, or None while not known."""

    def times(self) -> tuple[float, float] | None: ...


class WallSpan(NamedTuple):
    """An all-reduce timed by the host's clock (``time.perf_counter()``): known at once (a
    tuple: made inside every backward pass, it should cost no more than one)."""

    start: float
    end: float

    def times(self) -> tuple[float, float] | None:
        return self.start, self.end


def union_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length of the union of ``intervals`` (each ``(start, end)``; reversed ones: 0)."""
    total = 0.0
    reach = float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


@dataclass(frozen=True)
class CommReading:
    """The communication histogram, cumulative, as the snapshot carries it."""

    bucket_counts: tuple[int, ...]
    count: int
    sum_seconds: float


class CommMeter:
    """Per-step all-reduce time since the session began; steps without an all-reduce (those
    under ``no_sync``, a loop that never attached) are not in it."""

    def __init__(
        self, max_pending_steps: int = MAX_PENDING_STEPS, max_queued: int = MAX_QUEUED_EVENTS
    ) -> None:
        self._lock = threading.Lock()
        self._max_queued = max_queued
        # Spans, and None for each step's end, in the order they happened: appended without the
        # lock by any thread, taken only under it. deque's append and popleft are atomic
        # (documented as thread-safe), so an event is either queued or sorted, never lost.
        self._queue: deque[Span | None] = deque()
        self._open: list[Span] = []  # sorted out of the queue, of the step not ended yet
        self._closed: deque[list[Span]] = deque(maxlen=max_pending_steps)
        self._bucket_counts = [0] * (len(STEP_DURATION_BUCKETS) + 1)
        self._sum = 0.0
        # The session's first step is not in the step-duration histogram (nothing before it
        # to time it from), so it is not in this one either: the two sums cover the same steps
        # and their ratio is the share of step time in communication. Its all-reduces are also
        # the slowest (the process group's first collective, DDP rebuilding its buckets).
        self._first_ended = False

    def add(self, span: Span) -> None:
        """One finished all-reduce of the current step (any thread)."""
        self._queue.append(span)

    def end_step(self) -> None:
        """The step is over: its all-reduces have all finished and been added (DDP waits for
        them before backward returns), so they are the spans queued since the last end.
        Training thread, O(1)."""
        queue = self._queue
        queue.append(None)
        if len(queue) >= self._max_queued:  # nobody read for that long: sort them here
            with self._lock:
                self._sort()

    def _sort(self) -> None:
        """Move the queued spans into steps, the ended ones to the closed (under the lock)."""
        queue = self._queue
        while queue:
            span = queue.popleft()
            if span is not None:
                self._open.append(span)
            elif not self._first_ended:
                self._first_ended = True
                self._open = []
            elif self._open:  # a step without an all-reduce (no_sync) is not in the histogram
                self._closed.append(self._open)
                self._open = []

    def read(self) -> CommReading:
        """Resolve the closed steps whose times are known, in order; the reader's thread."""
        while True:
            with self._lock:
                self._sort()
                if not self._closed:
                    break
                spans = self._closed[0]
            times = [span.times() for span in spans]
            known = [pair for pair in times if pair is not None]
            if len(known) < len(times):
                break  # still on the device: later steps wait behind it, in order
            seconds = union_seconds(known)
            with self._lock:
                if self._closed and self._closed[0] is spans:
                    self._closed.popleft()
                    self._bucket_counts[bisect_left(STEP_DURATION_BUCKETS, seconds)] += 1
                    self._sum += seconds
        with self._lock:
            counts = list(self._bucket_counts)
            total = self._sum
        buckets, count = cumulative(counts)
        return CommReading(buckets, count, total)
