"""The step meter: steps from batch indices, a cumulative histogram, throughput time."""

from __future__ import annotations

from mirrorwatch.exporter.ingest.schema import STEP_DURATION_BUCKETS
from mirrorwatch.trainer.meter import StepMeter, finite_loss


def run_epoch(meter: StepMeter, epoch: int, ends: list[int], start: float, step: float) -> float:
    """Executions ending at batch indices ``ends``, ``step`` seconds each; returns the clock."""
    meter.begin_epoch(epoch)
    now = start
    for end in ends:
        meter.begin_step(now)
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
    meter.begin_step(0.0)
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
    meter.begin_step(0.0)
    meter.end_step(0, 45.0, None)
    reading = meter.read()
    assert reading.bucket_counts[-1] == 0
    assert reading.duration_count == 1


def test_first_step_is_left_out_of_throughput_time() -> None:
    meter = StepMeter()
    meter.begin_epoch(1)
    meter.begin_step(0.0)
    meter.end_step(0, 5.0, None)  # tracing
    meter.begin_step(5.0)
    meter.end_step(1, 5.1, None)
    reading = meter.read()
    assert reading.measured_steps == 1
    assert abs(reading.measured_seconds - 0.1) < 1e-9


def test_evaluation_time_is_left_out_after_a_pause() -> None:
    meter = StepMeter()
    now = run_epoch(meter, 1, [0, 1, 2], start=0.0, step=0.1)
    meter.pause()  # evaluation from `now` for 10 s
    meter.begin_step(now + 10.0)
    meter.end_step(3, now + 10.1, None)
    reading = meter.read()
    assert reading.measured_steps == 3
    assert abs(reading.measured_seconds - 0.3) < 1e-9


def test_epoch_boundary_time_is_left_out() -> None:
    meter = StepMeter()
    now = run_epoch(meter, 1, [0, 1], start=0.0, step=0.1)
    run_epoch(meter, 2, [0, 1], start=now + 20.0, step=0.1)
    assert abs(meter.read().measured_seconds - 0.3) < 1e-9


def test_batch_index_going_back_without_epoch_begin_is_a_new_epoch() -> None:
    meter = StepMeter()
    run_epoch(meter, 1, [0, 1, 2], start=0.0, step=0.1)
    meter.end_step(0, 1.0, None)
    assert meter.read().steps_total == 4


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
