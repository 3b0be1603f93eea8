"""Step counting and timing for both front ends: O(1) per step, read by the pusher thread.

The torch monitor calls :meth:`StepMeter.step_done` from ``step()``, in order, on the training
thread: one deque append and no lock; the steps are counted when the meter is next read (on
the pusher thread), by the same code as the callback's. The Keras callback calls the other
methods from its hooks: Keras calls the begin hooks on the training thread, in order. The
batch-end hooks run there too unless Keras dispatches them to its callback executor (Keras 3's
async dispatch, on backends it marks thread-safe), where several workers may run them
concurrently and out of order.
:class:`StepMeter` is correct either way: every other method takes one short lock, and nothing
here blocks otherwise. The pusher thread takes a consistent copy with :meth:`StepMeter.read`.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS

# In-order steps kept uncounted until a read; beyond it the training thread counts them itself
# (a pusher backing off for a minute must not grow the process: about 6 MiB at this length).
MAX_PENDING_STEPS = 65536


@dataclass(frozen=True)
class MeterReading:
    """Everything the meter counted, copied at one instant."""

    steps_total: int
    epoch: int
    loss: float | None
    bucket_counts: tuple[int, ...]  # cumulative, one per STEP_DURATION_BUCKETS
    duration_count: int
    duration_sum_seconds: float
    # Steps and wall time that count towards throughput: not the session's first (tracing)
    # step, and no evaluation or epoch-boundary time.
    measured_steps: int
    measured_seconds: float
    # Examples, where the caller counts them per step (the torch monitor); None where it does
    # not (the callback: the snapshot derives them from the steps and the global batch).
    examples_total: int | None = None
    measured_examples: int | None = None


def cumulative(counts: list[int]) -> tuple[tuple[int, ...], int]:
    """Per-bucket counts (the last one: over the highest bound) as Prometheus's cumulative
    bucket counts, and the count of everything."""
    running = 0
    buckets = []
    for count in counts[:-1]:
        running += count
        buckets.append(running)
    return tuple(buckets), running + counts[-1]


class StepMeter:
    """Cumulative steps, a step-duration histogram and throughput time, since the session began.

    Steps come from Keras's batch indices: the highest end index seen in the epoch, and a step
    count that grows by how much an end raises it. An execution of ``steps_per_execution``
    steps counts that many; an end that arrives after a higher one (async dispatch runs the
    end hooks on several worker threads) adds nothing, because the higher one already counted
    its steps. The loss is that of the highest end index, not of the last to arrive. An epoch
    starts at :meth:`begin_epoch`: Keras waits for every pending batch-end hook before
    ``on_epoch_end`` and ``on_train_end``, so no end of an earlier epoch comes after it.

    A step's duration runs from the end of the step before it (so data waits and per-step
    callbacks count), or from its own begin after an epoch boundary or an evaluation (so
    neither does). An end's time is when its logs reached the hook: with async dispatch that is
    after Keras turned them into Python numbers on a worker, i.e. after the step finished on
    the device, a good completion time. An end that raises the index by more than one
    execution, because a lower end is still on its way, spans the steps in between: they share
    its duration equally, as the steps of one multi-step execution do. Steps whose timing is
    ambiguous are counted in ``steps_total`` but left out of the histogram and throughput, so
    the histogram's count can be a little lower than the steps: an end that arrives with an
    earlier clock than a step already timed (two workers raced), and an end that arrives after
    :meth:`pause` (evaluation began: Keras does not wait for pending train hooks in
    ``on_test_begin``, so the last steps' ends may come during evaluation) or belongs to the
    steps before it. Timed intervals never overlap and never go backwards, so durations are
    never negative and no wall time is counted twice.

    Callers that give :meth:`begin_step` no batch index (synchronous callers that may not call
    :meth:`begin_epoch`) have their ends taken in order: an index going back starts an epoch.

    A caller whose steps always come in order on one thread (the torch monitor) calls
    :meth:`step_done` instead of :meth:`begin_step` and :meth:`end_step`, and never both kinds:
    each step is counted as the end of the next batch index, and one that finds no segment open
    (the first after :meth:`begin_training`) is counted, not timed, and opens one at its time.
    """

    def __init__(self, max_pending_steps: int = MAX_PENDING_STEPS) -> None:
        self._lock = threading.Lock()
        self._max_pending = max_pending_steps
        self._steps_total = 0
        self._epoch = 0
        self._loss: float | None = None
        self._bucket_counts = [0] * (len(STEP_DURATION_BUCKETS) + 1)  # last: over 30 s
        self._duration_sum = 0.0
        self._measured_steps = 0
        self._measured_seconds = 0.0
        self._examples_total: int | None = None
        self._measured_examples = 0
        self._seen_first_step = False
        # This epoch: the highest end index counted, the last begin index (-1: none given).
        self._max_batch = -1
        self._last_begin = -1
        # The timed segment (since an epoch boundary or a pause): the batch index it starts at
        # (None: no segment open) and the clock the next timed interval starts from.
        self._segment_first: int | None = None
        self._segment_reference = 0.0
        # step_done's (clock, examples, epoch), oldest first, not counted yet. Appended without
        # the lock and taken only under it: deque's append and popleft are atomic (documented as
        # thread-safe), so a record is either still here or already counted, never lost.
        self._pending: deque[tuple[float, int, int | None]] = deque()

    def step_done(self, now: float, examples: int, epoch: int | None = None) -> None:
        """An in-order caller's step ended at ``now`` (``time.perf_counter()``), having trained
        on ``examples``, in epoch ``epoch`` (from 0; None: unchanged): kept for the next read to
        count, without a lock."""
        pending = self._pending
        pending.append((now, examples, epoch))
        if len(pending) >= self._max_pending:  # nobody read for that long: count them here
            with self._lock:
                self._count_pending()

    def begin_training(self) -> None:
        """A fit starts: its first step traces the train function, so it is not throughput."""
        with self._lock:
            self._count_pending()
            self._seen_first_step = False
            self._max_batch = -1
            self._last_begin = -1
            self._segment_first = None

    def begin_epoch(self, epoch: int) -> None:
        """A new epoch: ``epoch`` counted from 0, as Keras's ``on_epoch_begin`` numbers it."""
        with self._lock:
            self._count_pending()
            self._epoch = epoch
            self._max_batch = -1
            self._last_begin = -1
            self._segment_first = None

    def pause(self) -> None:
        """Evaluation or anything else that is not training starts: the next step starts fresh."""
        with self._lock:
            self._count_pending()
            self._segment_first = None

    def resume(self, now: float) -> None:
        """Training goes on after a :meth:`pause` (an in-order caller's): the next step is timed
        from ``now``, not from the step before the pause. Nothing changes while not paused."""
        with self._lock:
            self._count_pending()
            if self._segment_first is None:
                self._begin(now, None)

    def begin_step(self, now: float, batch: int | None = None) -> None:
        """The execution starting at 0-based batch index ``batch`` begins (training thread)."""
        with self._lock:
            self._begin(now, batch)

    def _begin(self, now: float, batch: int | None) -> None:
        if batch is not None:
            if batch <= self._last_begin:  # the index went back with no epoch begin
                self._max_batch = -1
                self._segment_first = None
            self._last_begin = batch
        if self._segment_first is None:
            self._segment_first = self._max_batch + 1 if batch is None else batch
            self._segment_reference = now

    def end_step(
        self, batch: int, now: float, loss: float | None, examples: int | None = None
    ) -> None:
        """The execution that ended at 0-based batch index ``batch`` of this epoch is done;
        ``examples``: how many it trained on, where the caller counts them."""
        with self._lock:
            self._end(batch, now, loss, examples)

    def _end(self, batch: int, now: float, loss: float | None, examples: int | None) -> None:
        previous = self._max_batch
        if batch <= previous:
            if self._last_begin >= 0:
                return  # async dispatch: a lower end arrived late; its steps are counted
            # No begin indices: an in-order caller, and the index went back: a new epoch.
            previous = -1
            if self._segment_first is not None:
                self._segment_first = 0
        self._max_batch = batch
        self._steps_total += batch - previous
        if examples is not None:
            self._examples_total = (self._examples_total or 0) + examples
        if loss is not None:
            self._loss = loss
        first = self._segment_first
        if first is None or batch < first or now < self._segment_reference:
            return  # ends before the segment, or after a pause, or raced: not timed
        steps = batch - max(previous, first - 1)
        elapsed = now - self._segment_reference
        self._segment_reference = now
        self._bucket_counts[bisect_left(STEP_DURATION_BUCKETS, elapsed / steps)] += steps
        self._duration_sum += elapsed
        if self._seen_first_step:
            self._measured_steps += steps
            self._measured_seconds += elapsed
            if examples is not None:
                self._measured_examples += examples
        else:
            self._seen_first_step = True

    def _count_pending(self) -> None:
        """Count step_done's steps, in order (under the lock: the only place they are taken)."""
        pending = self._pending
        while pending:
            now, examples, epoch = pending.popleft()
            if epoch is not None:
                self._epoch = epoch
            self._end(self._max_batch + 1, now, None, examples)
            if self._segment_first is None:
                self._begin(now, None)  # the steps after it are timed from its end

    def read(self) -> MeterReading:
        with self._lock:
            self._count_pending()
            counts = list(self._bucket_counts)
            steps_total, epoch, loss = self._steps_total, self._epoch, self._loss
            duration_sum = self._duration_sum
            measured_steps, measured_seconds = self._measured_steps, self._measured_seconds
            examples_total, measured_examples = self._examples_total, self._measured_examples
        buckets, count = cumulative(counts)
        return MeterReading(
            steps_total=steps_total,
            epoch=epoch,
            loss=loss,
            bucket_counts=buckets,
            duration_count=count,
            duration_sum_seconds=duration_sum,
            measured_steps=measured_steps,
            measured_seconds=measured_seconds,
            examples_total=examples_total,
            measured_examples=None if examples_total is None else measured_examples,
        )


def finite_loss(value: object) -> float | None:
    """The loss as a float when it is a finite number within the schema's range, else None."""
    if type(value) is not float:  # Keras passes Python floats; numpy scalars, 0-d arrays else
        if isinstance(value, bool | str | bytes):
            return None
        try:
            value = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
    # NaN fails both comparisons; infinities fail one.
    return value if -1e30 <= value <= 1e30 else None
