"""Quantity profiles over time: constant, ramp, square wave and seeded noise, clamped to a range.

Noise is a pure function of (seed, gpu, quantity, whole second): a hash of those picks a draw
from a fixed table of standard normals, so two simulators agree whatever order they are read in.
"""

from __future__ import annotations

import math
import random
import zlib
from typing import Final, Protocol

from mirrorwatch.exporter.simulate.models import ProfileSpec

_MASK64: Final = (1 << 64) - 1
_TABLE_BITS: Final = 13


def _normal_table() -> tuple[float, ...]:
    # Fixed for ever: changing the seed or size changes every simulated reading.
    draw = random.Random(20240611)
    return tuple(draw.gauss(0.0, 1.0) for _ in range(1 << _TABLE_BITS))


_NORMALS: Final = _normal_table()


def _mix64(value: int) -> int:
    """splitmix64's finaliser: spreads every input bit over the whole word."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def noise_key(seed: int, gpu: int, quantity: str) -> int:
    """The stream of one quantity on one GPU of one seeded scenario."""
    key = _mix64(seed & _MASK64)
    key = _mix64(key ^ gpu)
    return _mix64(key ^ zlib.crc32(quantity.encode()))


def standard_normal(key: int, second: int) -> float:
    """A N(0, 1) draw that depends only on the stream `key` and the whole `second`."""
    return _NORMALS[_mix64(key ^ (second & _MASK64)) >> (64 - _TABLE_BITS)]


class Profile(Protocol):
    """A quantity as a function of seconds since the scenario started."""

    def value(self, t: float) -> float: ...


class Constant:
    __slots__ = ("level",)

    def __init__(self, level: float) -> None:
        self.level = level

    def value(self, t: float) -> float:
        return self.level


class Ramp:
    """`start_value` until `start`, then linearly to `end_value` over `over` seconds."""

    __slots__ = ("end_value", "over", "start", "start_value")

    def __init__(self, start_value: float, end_value: float, start: float, over: float) -> None:
        self.start_value = start_value
        self.end_value = end_value
        self.start = start
        self.over = over

    def value(self, t: float) -> float:
        if t <= self.start:
            return self.start_value
        if self.over <= 0 or t >= self.start + self.over:
            return self.end_value
        done = (t - self.start) / self.over
        return self.start_value + (self.end_value - self.start_value) * done


class Square:
    """`high` for the first `duty` of each `period` (shifted by `phase`), `low` otherwise."""

    __slots__ = ("duty", "high", "low", "period", "phase")

    def __init__(self, low: float, high: float, period: float, duty: float, phase: float) -> None:
        self.low = low
        self.high = high
        self.period = period
        self.duty = duty
        self.phase = phase

    def value(self, t: float) -> float:
        into_period = (t - self.phase) % self.period
        return self.high if into_period < self.duty * self.period else self.low


class Noise:
    """Seeded Gaussian noise, redrawn each whole second, optionally added to a base profile."""

    __slots__ = ("base", "key", "mean", "stddev")

    def __init__(self, base: Profile | None, mean: float, stddev: float, key: int) -> None:
        self.base = base
        self.mean = mean
        self.stddev = stddev
        self.key = key

    def value(self, t: float) -> float:
        level = self.mean + self.stddev * standard_normal(self.key, math.floor(t))
        return level if self.base is None else self.base.value(t) + level


class Clamped:
    """Another profile held within [low, high]."""

    __slots__ = ("high", "inner", "low")

    def __init__(self, inner: Profile, low: float, high: float) -> None:
        self.inner = inner
        self.low = low
        self.high = high

    def value(self, t: float) -> float:
        return min(self.high, max(self.low, self.inner.value(t)))


def build_profile(
    spec: ProfileSpec,
    *,
    seed: int,
    gpu: int,
    quantity: str,
    low: float = -math.inf,
    high: float = math.inf,
) -> Profile:
    """The profile a scenario describes, clamped to its min/max and to [low, high]."""
    base: Profile | None = None
    if spec.constant is not None:
        base = Constant(spec.constant)
    elif spec.ramp is not None:
        ramp = spec.ramp
        base = Ramp(ramp.from_, ramp.to, ramp.start, ramp.over)
    elif spec.square is not None:
        square = spec.square
        base = Square(square.low, square.high, square.period, square.duty, square.phase)
    profile: Profile
    if spec.noise is not None:
        key = noise_key(seed, gpu, quantity)
        profile = Noise(base, spec.noise.mean, spec.noise.stddev, key)
    else:
        assert base is not None, "ProfileSpec guarantees a shape or noise"
        profile = base
    if spec.min is not None:
        low = max(low, spec.min)
    if spec.max is not None:
        high = min(high, spec.max)
    if low == -math.inf and high == math.inf:
        return profile
    return Clamped(profile, low, high)
