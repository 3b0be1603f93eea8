"""Step counting and timing on the training thread: O(1) per step, read by the pusher thread.

The training thread calls :meth:`StepMeter.begin_step` / :meth:`StepMeter.end_step` with
``time.perf_counter()`` values; the pusher thread takes a consistent copy with
:meth:`StepMeter.read`. A short lock keeps the two consistent; nothing here blocks otherwise.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

from mirrorwatch.exporter.ingest.schema import STEP_DURATION_BUCKETS


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


class StepMeter:
    """Cumulative steps, a step-duration histogram and throughput time, since the session began.

    Steps come from Keras's batch indices (``end_step`` of an execution), so an execution of
    ``steps_per_execution`` steps counts that many. A step's duration runs from the end of the
    step before it in the same epoch (so data waits and per-step callbacks count), or from its
    own begin after an epoch boundary or an evaluation (so neither does).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps_total = 0
        self._epoch = 0
        self._loss: float | None = None
        self._bucket_counts = [0] * (len(STEP_DURATION_BUCKETS) + 1)  # last: over 30 s
        self._duration_sum = 0.0
        self._measured_steps = 0
        self._measured_seconds = 0.0
        self._steps_in_epoch = 0
        self._step_started: float | None = None
        self._previous_end: float | None = None
        self._seen_first_step = False

    def begin_training(self) -> None:
        """A fit starts: its first step traces the train function, so it is not throughput."""
        with self._lock:
            self._seen_first_step = False
            self._previous_end = None

    def begin_epoch(self, epoch: int) -> None:
        """A new epoch: ``epoch`` counted from 1, as Keras's progress output shows it."""
        with self._lock:
            self._epoch = epoch
            self._steps_in_epoch = 0
            self._previous_end = None

    def pause(self) -> None:
        """Evaluation or anything else that is not training starts: the next step starts fresh."""
        self._previous_end = None

    def begin_step(self, now: float) -> None:
        self._step_started = now

    def end_step(self, batch: int, now: float, loss: float | None) -> None:
        """The execution that ended at 0-based batch index ``batch`` of this epoch is done."""
        steps = batch + 1 - self._steps_in_epoch
        if steps <= 0:  # the batch index went back without an epoch boundary: a new epoch
            steps = batch + 1
        started = self._previous_end if self._previous_end is not None else self._step_started
        self._previous_end = now
        self._steps_in_epoch = batch + 1
        elapsed = now - started if started is not None else None
        with self._lock:
            self._steps_total += steps
            if loss is not None:
                self._loss = loss
            if elapsed is None or elapsed < 0:
                return
            per_step = elapsed / steps
            self._bucket_counts[bisect_left(STEP_DURATION_BUCKETS, per_step)] += steps
            self._duration_sum += elapsed
            if self._seen_first_step:
                self._measured_steps += steps
                self._measured_seconds += elapsed
            else:
                self._seen_first_step = True

    def read(self) -> MeterReading:
        with self._lock:
            counts = list(self._bucket_counts)
            steps_total, epoch, loss = self._steps_total, self._epoch, self._loss
            duration_sum = self._duration_sum
            measured_steps, measured_seconds = self._measured_steps, self._measured_seconds
        cumulative = []
        running = 0
        for count in counts[:-1]:
            running += count
            cumulative.append(running)
        return MeterReading(
            steps_total=steps_total,
            epoch=epoch,
            loss=loss,
            bucket_counts=tuple(cumulative),
            duration_count=running + counts[-1],
            duration_sum_seconds=duration_sum,
            measured_steps=measured_steps,
            measured_seconds=measured_seconds,
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
