"""Communication time per step: the union of a step's all-reduces, resolved off the hook."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.telemetry.comm import CommMeter, WallSpan, union_seconds


@dataclass
class LateSpan:
    """A span whose times the device has not reached until ``ready`` is set."""

    start: float
    end: float
    ready: bool = False

    def times(self) -> tuple[float, float] | None:
        return (self.start, self.end) if self.ready else None


def started() -> CommMeter:
    """A meter past the session's first step (its all-reduces are never in the histogram)."""
    meter = CommMeter()
    meter.add(WallSpan(0.0, 0.25))
    meter.end_step()
    return meter


def test_the_first_steps_all_reduces_are_not_in_the_histogram() -> None:
    # As the step-duration histogram leaves the first step out (nothing to time it from): the
    # two sums cover the same steps, so their ratio is the share of time in communication.
    meter = CommMeter()
    meter.add(WallSpan(0.0, 0.25))  # the group's first collective: slow
    meter.end_step()
    assert meter.read().count == 0
    meter.add(WallSpan(1.0, 1.002))
    meter.end_step()
    reading = meter.read()
    assert reading.count == 1
    assert reading.sum_seconds == pytest.approx(0.002)


def test_overlapping_buckets_count_once_and_gaps_not_at_all() -> None:
    assert union_seconds([(0.0, 0.4), (0.2, 0.5), (0.7, 1.0)]) == pytest.approx(0.8)
    assert union_seconds([(0.0, 1.0), (0.1, 0.2)]) == pytest.approx(1.0)
    assert union_seconds([]) == 0.0


def test_each_step_adds_its_union_to_the_histogram() -> None:
    meter = started()
    meter.add(WallSpan(10.0, 10.004))
    meter.add(WallSpan(10.002, 10.008))  # two buckets in flight together: 8 ms, not 10
    meter.end_step()
    meter.add(WallSpan(11.0, 11.02))
    meter.end_step()
    reading = meter.read()
    assert reading.count == 2
    assert reading.sum_seconds == pytest.approx(0.028)
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.005)] == 0
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.01)] == 1
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.025)] == 2


def test_a_step_without_an_all_reduce_is_not_in_the_histogram() -> None:
    meter = CommMeter()
    meter.end_step()  # under no_sync, or before DDP reduced anything
    meter.add(WallSpan(0.0, 0.001))
    meter.end_step()
    meter.end_step()
    assert meter.read().count == 1


def test_a_step_still_on_the_device_holds_back_the_steps_after_it() -> None:
    meter = started()
    late = LateSpan(0.0, 0.002)
    meter.add(late)
    meter.end_step()
    meter.add(WallSpan(1.0, 1.001))
    meter.end_step()
    assert meter.read().count == 0  # in order: the first step is not known yet
    late.ready = True
    reading = meter.read()
    assert reading.count == 2
    assert reading.sum_seconds == pytest.approx(0.003)
    assert meter.read() == reading  # each step counted once


def test_spans_of_the_open_step_wait_for_its_end() -> None:
    meter = started()
    meter.add(WallSpan(0.0, 0.5))
    assert meter.read().count == 0
    meter.end_step()
    assert meter.read().count == 1


def test_unresolved_steps_are_bounded() -> None:
    meter = CommMeter(max_pending_steps=3)
    stuck = LateSpan(0.0, 1.0)
    for _ in range(10):
        meter.add(stuck)
        meter.end_step()
    stuck.ready = True
    assert meter.read().count == 3  # the oldest were dropped, the process did not grow


def test_spans_added_on_another_thread_belong_to_the_step_they_finished_in() -> None:
    meter = started()
    for start in (0.0, 1.0):
        hook = threading.Thread(target=meter.add, args=(WallSpan(start, start + 0.002),))
        hook.start()
        hook.join()  # DDP waits for every all-reduce before backward returns
        meter.end_step()
    reading = meter.read()
    assert reading.count == 2
    assert reading.sum_seconds == pytest.approx(0.004)


def test_unread_spans_are_sorted_by_the_training_thread_beyond_the_bound() -> None:
    meter = CommMeter(max_queued=8)
    meter.end_step()  # the session's first step
    for step in range(50):
        meter.add(WallSpan(float(step), step + 0.001))
        meter.end_step()
        meter.end_step()  # a step under no_sync: nothing to keep
    assert len(meter._queue) < 8  # nobody read: the process did not grow
    assert meter.read().count == 50
