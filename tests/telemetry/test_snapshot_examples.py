"""examples_total from the device's count of every batch: capped at the counted steps."""

from __future__ import annotations

from mirrorwatch.telemetry.snapshot import _examples_of_counted_steps as examples


def test_a_step_in_flight_is_not_in_the_counted_steps_examples() -> None:
    # 10 full steps of 8 counted by the meter; the device already added the 11th's batch.
    assert examples(counted=88, full_batches=80) == 80


def test_with_no_step_in_flight_a_short_batch_counts_its_own() -> None:
    assert examples(counted=76, full_batches=80) == 76  # nine of 8 and one of 4


def test_without_a_device_count_or_a_global_batch_each_stands_alone() -> None:
    assert examples(counted=None, full_batches=80) == 80
    assert examples(counted=76, full_batches=None) == 76
    assert examples(counted=None, full_batches=None) is None


def test_the_total_never_goes_down_as_both_grow() -> None:
    pushes = [(9, 8), (17, 16), (20, 24), (28, 24), (36, 32)]  # (counted, full), both growing
    totals = [examples(counted, full) or 0 for counted, full in pushes]
    assert totals == sorted(totals)
    assert totals[-1] == 32
