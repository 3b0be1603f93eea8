"""The step meter: steps from batch indices, a cumulative histogram, throughput time.

Also as Keras's async dispatch calls it: batch ends on several threads, out of order.
"""

from __future__ import annotations

import random
import threading
import time

from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.telemetry.meter import StepMeter, finite_loss


def run_epoch(meter: StepMeter, epoch: int, ends: list[int], start: float, step: float) -> float:
    """Executions ending at batch indices ``ends``, ``step`` seconds each; returns the clock."""
    meter.begin_epoch(epoch)
    now = start
    for begin, end in zip([0, *(end + 1 for end in ends)], ends, strict=False):
        meter.begin_step(now, begin)
        now += step
        meter.end_step(end, now, loss=0.5)
    return now


def test_steps_come_from_batch_indices_so_multi_step_executions_count_fully() -> None:
    meter = StepMeter()
    run_epoch(meter, 1, [3, 7, 11], start=0.0, step=0.04)  # steps_per_execution = 4
    reading = meter.read()
    assert reading.steps_total == 12
    assert reading.duration_count == 12
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.01)] == 12  # 10 ms per step


def test_steps_accumulate_across_epochs() -> None:
    meter = StepMeter()
    now = run_epoch(meter, 1, list(range(5)), start=0.0, step=0.1)
    run_epoch(meter, 2, list(range(5)), start=now + 3.0, step=0.1)
    reading = meter.read()
    assert (reading.steps_total, reading.epoch) == (10, 2)


def test_histogram_is_cumulative_and_sums_durations() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    meter.begin_step(0.0, 0)
    meter.end_step(0, 0.002, None)  # 2 ms
    meter.end_step(1, 0.302, None)  # 300 ms since the previous step ended
    reading = meter.read()
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.001)] == 0
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.0025)] == 1
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.25)] == 1
    assert reading.bucket_counts[-1] == 2
    assert reading.duration_sum_seconds == 0.302


def test_step_over_thirty_seconds_counts_only_in_the_total() -> None:
    meter = StepMeter()
    meter.begin_step(0.0, 0)
    meter.end_step(0, 45.0, None)
    reading = meter.read()
    assert reading.bucket_counts[-1] == 0
    assert reading.duration_count == 1


def test_first_step_is_left_out_of_throughput_time() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    meter.begin_step(0.0, 0)
    meter.end_step(0, 5.0, None)  # tracing
    meter.begin_step(5.0, 1)
    meter.end_step(1, 5.1, None)
    reading = meter.read()
    assert reading.measured_steps == 1
    assert abs(reading.measured_seconds - 0.1) < 1e-9


def test_evaluation_time_is_left_out_after_a_pause() -> None:
    meter = StepMeter()
    now = run_epoch(meter, 1, [0, 1, 2], start=0.0, step=0.1)
    meter.pause()  # evaluation from `now` for 10 s
    meter.begin_step(now + 10.0, 3)
    meter.end_step(3, now + 10.1, None)
    reading = meter.read()
    assert reading.measured_steps == 3
    assert abs(reading.measured_seconds - 0.3) < 1e-9


def test_epoch_boundary_time_is_left_out() -> None:
    meter = StepMeter()
    now = run_epoch(meter, 1, [0, 1], start=0.0, step=0.1)
    run_epoch(meter, 2, [0, 1], start=now + 20.0, step=0.1)
    assert abs(meter.read().measured_seconds - 0.3) < 1e-9


def test_batch_index_going_back_at_a_begin_without_epoch_begin_is_a_new_epoch() -> None:
    meter = StepMeter()
    run_epoch(meter, 1, [0, 1, 2], start=0.0, step=0.1)
    meter.begin_step(1.0, 0)
    meter.end_step(0, 1.1, None)
    assert meter.read().steps_total == 4


def test_without_begin_indices_an_end_index_going_back_is_a_new_epoch() -> None:
    # As the trainer's own baseline callback calls it: begins without indices, no epochs.
    meter = StepMeter()
    for epoch in range(2):
        for batch in range(3):
            meter.begin_step(epoch + batch * 0.1)
            meter.end_step(batch, epoch + batch * 0.1 + 0.05, None)
    reading = meter.read()
    assert reading.steps_total == 6
    assert reading.duration_count == 6


def test_last_loss_is_kept() -> None:
    meter = StepMeter()
    meter.end_step(0, 1.0, 2.5)
    meter.end_step(1, 2.0, None)
    assert meter.read().loss == 2.5


def test_loss_that_is_not_a_finite_number_is_absent() -> None:
    assert finite_loss(float("nan")) is None
    assert finite_loss(float("inf")) is None
    assert finite_loss(1e31) is None
    assert finite_loss("bad") is None
    assert finite_loss(0.25) == 0.25


# -- batch ends as Keras's async dispatch delivers them --------------------------------------


def test_ends_out_of_order_count_exactly_and_keep_the_highest_index_loss() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    for batch in range(6):
        meter.begin_step(batch * 0.1, batch)
    # Ends 0..5 finished at 0.1, 0.2, ... but their hooks ran in this order.
    for batch in (0, 2, 1, 3, 5, 4):
        meter.end_step(batch, (batch + 1) * 0.1, loss=float(batch))
    reading = meter.read()
    assert reading.steps_total == 6
    assert reading.loss == 5.0  # batch 5's, not batch 4's that arrived last
    # 2 covered 1 and 2 (0.2 s, 0.1 s each); 1 and 4 arrived late and add nothing.
    assert reading.duration_count == 6
    assert abs(reading.duration_sum_seconds - 0.6) < 1e-9
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.05)] == 0  # none merged to 0
    assert reading.bucket_counts[STEP_DURATION_BUCKETS.index(0.25)] == 6


def test_an_end_with_an_earlier_clock_than_a_timed_one_is_counted_not_timed() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    meter.begin_step(0.0, 0)
    meter.end_step(0, 1.0, None)
    meter.end_step(1, 0.9, None)  # two workers raced: its clock was read before batch 0's
    meter.end_step(2, 1.2, None)
    reading = meter.read()
    assert reading.steps_total == 3
    assert reading.duration_count == 2  # 0 (1.0 s) and 2 (0.2 s); 1 is left out
    assert abs(reading.duration_sum_seconds - 1.2) < 1e-9  # never negative, never twice


def test_ends_that_arrive_after_a_pause_are_counted_not_timed() -> None:
    # Keras does not wait for pending train batch ends in on_test_begin.
    meter = StepMeter()
    meter.begin_epoch(1)
    for batch in range(4):
        meter.begin_step(batch * 0.1, batch)
    meter.end_step(0, 0.1, None)
    meter.end_step(1, 0.2, None)
    meter.pause()  # evaluation, 10 s
    meter.end_step(3, 10.3, 3.0)
    meter.end_step(2, 10.4, 2.0)
    reading = meter.read()
    assert (reading.steps_total, reading.loss) == (4, 3.0)
    assert reading.duration_count == 2
    assert reading.measured_seconds < 1


def test_a_late_end_from_before_a_pause_is_not_timed_in_the_next_segment() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    meter.begin_step(0.0, 0)
    meter.begin_step(0.1, 1)
    meter.end_step(0, 0.1, None)
    meter.pause()  # evaluation, then training goes on in the same epoch
    meter.begin_step(5.0, 2)
    meter.end_step(2, 5.1, None)  # from its own begin: 0.1 s for one step
    meter.end_step(1, 5.2, None)  # before the pause: counted in step 2's raise already
    reading = meter.read()
    assert reading.steps_total == 3
    assert reading.duration_count == 2
    assert abs(reading.duration_sum_seconds - 0.2) < 1e-9


def test_concurrent_out_of_order_ends_give_exact_totals_and_no_negative_time() -> None:
    meter = StepMeter()
    epochs, steps, workers = 3, 400, 6
    rng = random.Random(7)
    started = time.perf_counter()
    for epoch in range(1, epochs + 1):
        meter.begin_epoch(epoch)
        batches = list(range(steps))
        for batch in batches:
            meter.begin_step(time.perf_counter(), batch)
        rng.shuffle(batches)
        shares = [batches[worker::workers] for worker in range(workers)]

        def work(share: list[int]) -> None:
            for batch in share:
                meter.end_step(batch, time.perf_counter(), float(batch))

        threads = [threading.Thread(target=work, args=(share,)) for share in shares]
        for thread in threads:
            thread.start()
        for thread in threads:  # Keras waits for every pending end before on_epoch_end
            thread.join()
        reading = meter.read()
        assert reading.steps_total == epoch * steps
        assert reading.loss == float(steps - 1)
    wall = time.perf_counter() - started
    reading = meter.read()
    assert reading.epoch == epochs
    assert 0 < reading.duration_count <= reading.steps_total
    assert reading.bucket_counts[-1] <= reading.duration_count
    assert 0 <= reading.duration_sum_seconds <= wall  # intervals never overlap
    assert 0 <= reading.measured_seconds <= reading.duration_sum_seconds
    assert reading.measured_steps <= reading.duration_count
