"""The step meter as the torch monitor feeds it: in-order steps, counted when read."""

from __future__ import annotations

import threading
import time

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.telemetry.meter import StepMeter

# Step end times: 4 ms steps, a 300 ms one, one over 30 s, then 4 ms again.
ENDS = [0.0, 0.004, 0.008, 0.308, 31.0, 31.004, 31.008]
EXAMPLES = [8, 8, 7, 8, 8, 5, 8]


def test_in_order_steps_count_as_the_indexed_ends_of_the_same_steps() -> None:
    indexed, in_order = StepMeter(), StepMeter()
    indexed.begin_training()
    in_order.begin_training()
    for batch, (now, examples) in enumerate(zip(ENDS, EXAMPLES, strict=True)):
        indexed.end_step(batch, now, None, examples)
        if batch == 0:
            indexed.begin_step(now)  # the steps after the first are timed from its end
        in_order.step_done(now, examples)
    assert in_order.read() == indexed.read()


def test_in_order_steps_are_exact_and_timed_from_the_step_before() -> None:
    meter = StepMeter()
    meter.begin_training()
    for now, examples in zip(ENDS, EXAMPLES, strict=True):
        meter.step_done(now, examples)
    reading = meter.read()
    assert (reading.steps_total, reading.examples_total) == (len(ENDS), sum(EXAMPLES))
    assert reading.duration_count == len(ENDS) - 1  # the first has no step before it
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.0025)] == 0
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.005)] == 4
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.5)] == 5
    assert reading.bucket_counts[-1] == 5  # the 30.69 s step is only in the count
    assert abs(reading.duration_sum_seconds - 31.008) < 1e-9


def test_steps_wait_for_a_read_and_are_counted_once() -> None:
    meter = StepMeter()
    meter.step_done(1.0, 4)
    meter.step_done(1.5, 4)
    first = meter.read()
    assert (first.steps_total, first.examples_total, first.duration_count) == (2, 8, 1)
    assert meter.read() == first
    meter.step_done(2.0, 4)
    assert meter.read().steps_total == 3


def test_unread_steps_are_counted_by_the_caller_beyond_the_bound() -> None:
    meter = StepMeter(max_pending_steps=8)
    for step in range(100):
        meter.step_done(float(step), 1)
    assert len(meter._pending) < 8  # nobody read: the process did not grow
    reading = meter.read()
    assert (reading.steps_total, reading.examples_total, reading.duration_count) == (100, 100, 99)


def test_a_read_on_another_thread_is_consistent_while_steps_go_on() -> None:
    meter = StepMeter()
    meter.begin_training()
    steps, examples = 5_000, 3

    def train() -> None:
        for step in range(steps):
            meter.step_done(time.perf_counter(), examples)
            if step % 100 == 0:
                time.sleep(0.0001)  # as a training step would, let the reader in mid-loop

    training = threading.Thread(target=train)
    training.start()
    readings = []
    while training.is_alive():
        readings.append(meter.read())
        time.sleep(0.0005)  # as the pusher would, read now and then
    training.join()
    readings.append(meter.read())
    assert any(0 < r.steps_total < steps for r in readings)  # some were read mid-loop
    for reading in (r for r in readings if r.steps_total):
        assert reading.examples_total == examples * reading.steps_total
        assert reading.measured_examples == examples * reading.measured_steps
        assert reading.duration_count == reading.steps_total - 1
    assert [r.steps_total for r in readings] == sorted(r.steps_total for r in readings)
    assert readings[-1].steps_total == steps


def test_an_in_order_steps_epoch_is_the_last_one_given() -> None:
    meter = StepMeter()
    meter.step_done(1.0, 4, epoch=0)
    meter.step_done(1.1, 4)  # no epoch given: unchanged
    assert meter.read().epoch == 0
    meter.step_done(1.2, 4, epoch=1)
    meter.step_done(1.3, 4)
    assert (meter.read().epoch, meter.read().steps_total) == (1, 4)


def test_time_between_a_pause_and_resume_is_in_no_step() -> None:
    meter = StepMeter()
    meter.begin_training()
    meter.step_done(0.0, 4)
    meter.step_done(0.01, 4)
    meter.pause()  # validation from 0.01 to 5.0
    meter.resume(5.0)
    meter.step_done(5.01, 4)
    reading = meter.read()
    assert (reading.steps_total, reading.duration_count) == (3, 2)
    assert abs(reading.duration_sum_seconds - 0.02) < 1e-9  # 10 ms each, not 5 s
    meter.resume(6.0)  # not paused: the step still runs from the one before
    meter.step_done(6.01, 4)
    assert abs(meter.read().duration_sum_seconds - 1.02) < 1e-9
