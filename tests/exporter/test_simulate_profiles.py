"""Profiles: the shapes a quantity follows over time, and noise that depends only on the second."""

from __future__ import annotations

import random
import statistics

import pytest

from mirrorwatch.exporter.simulate.models import ProfileSpec
from mirrorwatch.exporter.simulate.profiles import (
    Clamped,
    Constant,
    Noise,
    Ramp,
    Square,
    build_profile,
    noise_key,
    standard_normal,
)


def spec(**fields: object) -> ProfileSpec:
    return ProfileSpec.model_validate(fields)


def test_a_constant_never_changes() -> None:
    profile = Constant(0.7)
    assert [profile.value(t) for t in (0.0, 1.5, 1e6)] == [0.7, 0.7, 0.7]


@pytest.mark.parametrize(
    ("t", "expected"), [(0.0, 10.0), (5.0, 10.0), (10.0, 15.0), (15.0, 20.0), (99.0, 20.0)]
)
def test_a_ramp_holds_then_moves_linearly_then_holds(t: float, expected: float) -> None:
    assert Ramp(10.0, 20.0, start=5.0, over=10.0).value(t) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("t", "expected"), [(0.0, 1.0), (2.9, 1.0), (3.0, 0.0), (9.9, 0.0), (10.0, 1.0), (13.5, 0.0)]
)
def test_a_square_wave_is_high_for_its_duty_share_of_each_period(t: float, expected: float) -> None:
    assert Square(low=0.0, high=1.0, period=10.0, duty=0.3, phase=0.0).value(t) == expected


def test_a_square_wave_phase_shifts_it_later() -> None:
    shifted = Square(low=0.0, high=1.0, period=10.0, duty=0.5, phase=2.0)
    assert [shifted.value(t) for t in (1.0, 2.0, 6.9, 7.0)] == [0.0, 1.0, 1.0, 0.0]


def test_clamping_holds_a_profile_within_its_range() -> None:
    ramp = Ramp(-1.0, 2.0, start=0.0, over=3.0)
    clamped = Clamped(ramp, 0.0, 1.0)
    assert [clamped.value(t) for t in (0.0, 1.5, 3.0)] == [0.0, 0.5, 1.0]


def test_noise_is_the_same_within_a_second() -> None:
    noise = Noise(None, 0.0, 1.0, noise_key(1, 0, "utilization"))
    assert noise.value(10.0) == noise.value(10.2) == noise.value(10.999)


def test_noise_changes_from_second_to_second() -> None:
    noise = Noise(None, 0.0, 1.0, noise_key(1, 0, "utilization"))
    assert len({noise.value(float(t)) for t in range(100)}) > 90


def test_noise_does_not_depend_on_the_order_it_is_read_in() -> None:
    key = noise_key(42, 3, "temperature_celsius")
    seconds = list(range(500))
    in_order = {second: standard_normal(key, second) for second in seconds}
    random.Random(0).shuffle(seconds)
    shuffled = {second: standard_normal(key, second) for second in seconds}
    assert shuffled == in_order


@pytest.mark.parametrize(
    "other", [(2, 0, "utilization"), (1, 1, "utilization"), (1, 0, "power_watts")]
)
def test_seed_gpu_and_quantity_each_give_their_own_noise(other: tuple[int, int, str]) -> None:
    base = [standard_normal(noise_key(1, 0, "utilization"), s) for s in range(50)]
    changed = [standard_normal(noise_key(*other), s) for s in range(50)]
    assert base != changed


def test_noise_has_its_mean_and_standard_deviation() -> None:
    noise = Noise(None, 5.0, 2.0, noise_key(7, 0, "power_watts"))
    values = [noise.value(float(t)) for t in range(20_000)]
    assert statistics.fmean(values) == pytest.approx(5.0, abs=0.1)
    assert statistics.pstdev(values) == pytest.approx(2.0, rel=0.05)


def test_noise_can_ride_on_another_profile() -> None:
    key = noise_key(1, 0, "utilization")
    noisy_ramp = Noise(Ramp(0.0, 100.0, start=0.0, over=100.0), 0.0, 0.5, key)
    alone = Noise(None, 0.0, 0.5, key)
    assert noisy_ramp.value(40.0) == pytest.approx(40.0 + alone.value(40.0))


def test_a_spec_builds_the_profile_it_describes() -> None:
    profile = build_profile(
        spec(ramp={"from": 0.2, "to": 0.8, "start": 10, "over": "1m"}),
        seed=1,
        gpu=0,
        quantity="utilization",
    )
    assert profile.value(40.0) == pytest.approx(0.5)


def test_a_spec_clamps_to_its_min_and_max_and_the_quantitys_range() -> None:
    profile = build_profile(
        spec(noise={"mean": 0.5, "stddev": 10.0}, max=0.9),
        seed=1,
        gpu=0,
        quantity="utilization",
        low=0.0,
        high=1.0,
    )
    values = [profile.value(float(t)) for t in range(200)]
    assert min(values) == 0.0
    assert max(values) == 0.9


def test_a_spec_built_twice_gives_the_same_values() -> None:
    noisy = spec(constant=300.0, noise={"stddev": 20.0})
    first = build_profile(noisy, seed=5, gpu=1, quantity="power_watts")
    second = build_profile(noisy, seed=5, gpu=1, quantity="power_watts")
    assert [first.value(float(t)) for t in range(100)] == [
        second.value(float(t)) for t in range(100)
    ]
