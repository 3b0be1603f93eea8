"""How one simulated GPU behaves, second by second: its profiles, derived quantities and events.

Gauges are evaluated on whole seconds (NVML itself samples utilisation over a period), so one
evaluation serves every reading within that second and every counter integrates its rate on the
same 1 s grid. Counts of discrete events (XID, ECC, NVLink errors, PCIe replays) are closed-form
in time instead.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from mirrorwatch.contract import causes
from mirrorwatch.exporter.backend import (
    CLOCKS_EVENT_REASONS,
    ECC_ERROR_TYPES,
    NVLINK_ERROR_TYPES,
    THROTTLE_REASONS,
    EccErrorType,
    MemoryBytes,
    NvlinkErrorType,
    PcieLink,
)
from mirrorwatch.exporter.simulate.models import (
    CollectiveHangEvent,
    EccEvent,
    GpuLostEvent,
    NvlinkDownEvent,
    NvlinkErrorsEvent,
    PcieDowngradeEvent,
    PcieReplaysEvent,
    PowerCapEvent,
    ProfileSpec,
    TemperatureEvent,
    ThrottleEvent,
    XidEvent,
)
from mirrorwatch.exporter.simulate.profiles import (
    Clamped,
    Constant,
    Noise,
    Profile,
    build_profile,
    noise_key,
)
from mirrorwatch.exporter.simulate.scenario import Scenario

IDLE_BELOW_UTILIZATION: Final = 0.05
IDLE_PCIE_GENERATION: Final = 1
AMBIENT_CELSIUS: Final = 28.0
# Degrees above ambient at the board power limit, without cooling trouble.
HEATING_CELSIUS_AT_LIMIT: Final = 36.0
# Share of the power limit a fully busy GPU draws when nothing holds it back.
BUSY_POWER_SHARE: Final = 0.92
CLOCK_STEP_MHZ: Final = 15.0
MEMORY_USED_BUSY_RATIO: Final = 0.9
MEMORY_USED_IDLE_RATIO: Final = 0.004
# Traffic rates at full utilization, on top of a trickle while idle.
PCIE_TRANSMIT_BYTES_PER_SECOND: Final = 2.0e9
PCIE_RECEIVE_BYTES_PER_SECOND: Final = 6.0e9
PCIE_IDLE_BYTES_PER_SECOND: Final = 15.0e6
NVLINK_BYTES_PER_SECOND: Final = 20.0e9
# What a GPU waiting inside the all-reduce kernel draws above idle, as a share of what it draws
# computing: NCCL's wait spins a few SMs (nccl#968: "GPU util is 100% but the power consumption
# is pretty low (~70W)").
WAIT_DRAW_SHARE: Final = 0.1

BIT: Final = dict(CLOCKS_EVENT_REASONS)
GPU_IDLE: Final = BIT["gpu_idle"]
SW_POWER_CAP: Final = BIT["sw_power_cap"]
SW_THERMAL_SLOWDOWN: Final = BIT["sw_thermal_slowdown"]
# How far each active reason pulls the graphics clock below its maximum.
_CLOCK_FACTOR: Final = {
    BIT["applications_clocks_setting"]: 0.85,
    SW_POWER_CAP: 0.8,
    BIT["hw_slowdown"]: 0.5,
    BIT["sync_boost"]: 0.9,
    SW_THERMAL_SLOWDOWN: 0.7,
    BIT["hw_thermal_slowdown"]: 0.5,
    BIT["hw_power_brake_slowdown"]: 0.35,
}


def _bits(reasons: Sequence[str]) -> int:
    return functools.reduce(operator.or_, (BIT[reason] for reason in reasons), 0)


# Which active reasons accrue violation time under each throttle_seconds_total reason. The
# cause table's (contract/causes.py): each throttling cause's clocks-event reasons under the
# violation counter that times it, so the simulated counters say what the rules and the report
# read them as; hardware slowdown, timed by no counter the rules read, under the board limit.
_ACCRUES: Final = {
    **{c.violation: _bits(c.clock_reasons) for c in causes.THROTTLES if c.violation},
    "board_limit": _bits(causes.cause("hardware_slowdown").clock_reasons),
    "sync_boost": BIT["sync_boost"],
    "low_utilization": GPU_IDLE,
    "reliability": 0,
}
THROTTLE_MASKS: Final = tuple(_ACCRUES[reason] for reason in THROTTLE_REASONS)

# Layout of Sample.rates, the per-second rates that counters integrate.
ENERGY: Final = 0
THROTTLE: Final = 1
PCIE_TRANSMIT: Final = THROTTLE + len(THROTTLE_REASONS)
PCIE_RECEIVE: Final = PCIE_TRANSMIT + 1
NVLINK: Final = PCIE_RECEIVE + 1  # then transmit, receive for each link in turn

_NO_NVLINK_ERRORS: Final[Mapping[NvlinkErrorType, float]] = MappingProxyType(
    dict.fromkeys(NVLINK_ERROR_TYPES, 0.0)
)


@dataclass(slots=True)
class Sample:
    """Every gauge of one GPU during one whole second, and the rates its counters integrate."""

    lost: bool
    utilization: float
    memory_utilization: float
    memory: MemoryBytes
    temperature_celsius: float
    power_watts: float
    power_limit_watts: float
    fans: tuple[float, ...]
    graphics_clock_hertz: float
    memory_clock_hertz: float
    reasons: Mapping[str, bool]
    pcie: PcieLink
    nvlink_up: tuple[bool, ...]
    rates: tuple[float, ...]
    # The share of the second the GPU computes (SM activity follows it); the utilisation
    # beyond it, in a synchronous run, is waiting in the all-reduce.
    compute: float = 0.0


@functools.cache
def reason_flags(reasons: int) -> Mapping[str, bool]:
    """The active flag of every clocks-event reason, from NVML's bit mask."""
    return MappingProxyType({name: bool(reasons & bit) for name, bit in CLOCKS_EVENT_REASONS})


@functools.cache
def throttle_indicators(reasons: int) -> tuple[float, ...]:
    """1.0 for each THROTTLE_REASONS entry that accrues violation time under `reasons`."""
    return tuple(1.0 if reasons & mask else 0.0 for mask in THROTTLE_MASKS)


@functools.cache
def slowest_clock_factor(reasons: int) -> float:
    """The share of the maximum graphics clock left under the active `reasons`."""
    return min([factor for bit, factor in _CLOCK_FACTOR.items() if reasons & bit], default=1.0)


def burst_count(count: int, at: float, duration: float | None, t: float) -> float:
    """Events seen by `t` of `count` spread evenly over [at, at + duration]."""
    if t < at:
        return 0.0
    if not duration or t >= at + duration:
        return float(count)
    return float(math.floor(count * (t - at) / duration))


def burst_last_event(count: int, at: float, duration: float | None, t: float) -> float | None:
    """When the latest event by `t` of `count` spread evenly over [at, at + duration] happened.

    Event k (1..count) happens at at + k * duration / count, when burst_count reaches k; all of
    them at `at` without a duration. None before the first.
    """
    seen = burst_count(count, at, duration, t)
    if seen == 0.0:
        return None
    if not duration:
        return at
    return min(at + seen * duration / count, t)


class GpuPhysics:
    """The behaviour of GPU `index` of a scenario; pure functions of time, no state."""

    def __init__(self, scenario: Scenario, index: int) -> None:
        hardware = scenario.gpus
        self.index = index
        self.nvlink_count = hardware.nvlinks
        self.memory_total_bytes = hardware.memory_gib * 2**30
        self._idle_watts = hardware.idle_power_watts
        self._limit_watts = hardware.power_limit_watts
        self._graphics_max_mhz = hardware.graphics_clock_max_mhz
        self._graphics_idle_mhz = min(hardware.graphics_clock_idle_mhz, self._graphics_max_mhz)
        self._memory_clock_hertz = hardware.memory_clock_max_mhz * 1e6
        self._slowdown_celsius = hardware.slowdown_celsius
        self._pcie_generation = hardware.pcie_generation
        self._pcie_width = hardware.pcie_width
        self._fans = hardware.fans

        specs: dict[str, ProfileSpec | None] = dict(scenario.workload)
        for override in scenario.overrides:
            if override.gpu == index:
                specs.update(
                    {name: spec for name, spec in override if isinstance(spec, ProfileSpec)}
                )
        seed = scenario.seed

        def profile(quantity: str, low: float, high: float) -> Profile | None:
            spec = specs.get(quantity)
            if spec is None:
                return None
            return build_profile(spec, seed=seed, gpu=index, quantity=quantity, low=low, high=high)

        def noise(quantity: str, stddev: float) -> Noise:
            return Noise(None, 0.0, stddev, noise_key(seed, index, f"derived:{quantity}"))

        self._utilization = profile("utilization", 0.0, 1.0) or Constant(0.0)
        self._memory_utilization = profile("memory_utilization", 0.0, 1.0)
        self._memory_used_ratio = profile("memory_used_ratio", 0.0, 1.0)
        self._temperature = profile("temperature_celsius", -40.0, 150.0)
        self._power = profile("power_watts", 0.0, math.inf)
        self._fan = profile("fan_ratio", 0.0, 1.0)
        self._pcie_transmit = profile("pcie_transmit_bytes_per_second", 0.0, math.inf)
        self._pcie_receive = profile("pcie_receive_bytes_per_second", 0.0, math.inf)
        self._nvlink_rate = profile("nvlink_bytes_per_second", 0.0, math.inf)
        self._compute_speed = profile("compute_speed", 0.01, 1.0)
        self._power_noise = noise("power_watts", 4.0)
        self._temperature_noise = noise("temperature_celsius", 0.3)
        self._memory_utilization_noise = Clamped(noise("memory_utilization", 0.01), -0.05, 0.05)

        events = [event for event in scenario.events if event.gpu == index]
        self._throttles = [e for e in events if isinstance(e, ThrottleEvent)]
        self._excursions = [e for e in events if isinstance(e, TemperatureEvent)]
        self._losses = [e for e in events if isinstance(e, GpuLostEvent)]
        self._downgrades = [e for e in events if isinstance(e, PcieDowngradeEvent)]
        self._power_caps = [e for e in events if isinstance(e, PowerCapEvent)]
        self._links_down = [e for e in events if isinstance(e, NvlinkDownEvent)]
        self._xids = [e for e in events if isinstance(e, XidEvent)]
        self._eccs = [e for e in events if isinstance(e, EccEvent)]
        self._replays = [e for e in events if isinstance(e, PcieReplaysEvent)]
        self._hangs = [e for e in events if isinstance(e, CollectiveHangEvent)]
        self._processes = tuple(p for p in scenario.processes or () if p.gpu == index)
        self._nvlink_errors: dict[int, list[NvlinkErrorsEvent]] = {}
        for event in events:
            if isinstance(event, NvlinkErrorsEvent):
                self._nvlink_errors.setdefault(event.link, []).append(event)
        self.rate_count = NVLINK + 2 * self.nvlink_count
        self._no_rates = (0.0,) * self.rate_count
        self._all_links_up = (True,) * self.nvlink_count

    def lost(self, t: float) -> bool:
        """Whether the GPU is off the bus at `t`."""
        if not self._losses:  # every reading asks, so the common case stays cheap
            return False
        return any(event.at <= t < event.end for event in self._losses)

    def hung(self, t: float) -> bool:
        """Whether the GPU has left its run's all-reduce at `t` (a collective hang)."""
        return any(event.at <= t < event.end for event in self._hangs)

    def speed(self, sample: Sample, t: float) -> float:
        """How fast the GPU computes a step during the second of `sample`, against itself
        unslowed: its SM clock's share of the maximum, less what other processes take of its
        SMs, times the scenario's own compute speed."""
        clock = sample.graphics_clock_hertz / (self._graphics_max_mhz * 1e6)
        speed = min(1.0, clock) * (1.0 - self.foreign_sm_share(t))
        if self._compute_speed is not None:
            speed *= self._compute_speed.value(t)
        return max(speed, 0.01)

    def foreign_sm_share(self, t: float) -> float:
        """The share of the GPU's SMs that processes of the scenario (never the run's) take."""
        taken = sum(p.sm_utilization or 0.0 for p in self._processes if p.present(t))
        return min(taken, 0.95)

    def coupled(self, sample: Sample, second: int, utilization: float, compute: float) -> Sample:
        """`sample` as the GPU reads it in a synchronous run: kernels resident for
        `utilization` of the second (computing for `compute` of it, the all-reduce's transfer
        included; the rest waiting in the all-reduce), drawing power and memory bandwidth for
        its compute and close to idle while it waits."""
        t = float(second)
        power_watts = sample.power_watts
        if self._power is None:
            busy_watts = BUSY_POWER_SHARE * self._limit_watts - self._idle_watts
            drawn = compute + WAIT_DRAW_SHARE * max(0.0, utilization - compute)
            demand_watts = max(
                0.0, self._idle_watts + busy_watts * drawn + self._power_noise.value(t)
            )
            clock = sample.graphics_clock_hertz / (self._graphics_max_mhz * 1e6)
            power_watts = min(
                demand_watts * (0.6 + 0.4 * min(1.0, clock)), sample.power_limit_watts
            )
        memory_utilization = sample.memory_utilization
        if self._memory_utilization is None:
            jitter = (
                self._memory_utilization_noise.value(t)
                if compute >= IDLE_BELOW_UTILIZATION
                else 0.0
            )
            memory_utilization = min(1.0, max(0.0, 0.55 * compute + jitter))
        rates = self._rates(t, sample.lost, compute, power_watts, 0, sample.nvlink_up)
        return replace(
            sample,
            utilization=utilization,
            memory_utilization=memory_utilization,
            power_watts=power_watts,
            rates=(rates[ENERGY], *sample.rates[THROTTLE:PCIE_TRANSMIT], *rates[PCIE_TRANSMIT:]),
            compute=compute,
        )

    def sample(self, second: int) -> Sample:
        """Every gauge during `second`, and the counter rates over it, as if it were alone."""
        t = float(second)
        utilization = 0.0 if self._hangs and self.hung(t) else self._utilization.value(t)
        busy = utilization >= IDLE_BELOW_UTILIZATION

        if self._power is not None:
            demand_watts = self._power.value(t)
        else:
            busy_watts = BUSY_POWER_SHARE * self._limit_watts - self._idle_watts
            demand_watts = self._idle_watts + busy_watts * utilization
            demand_watts = max(0.0, demand_watts + self._power_noise.value(t))

        if self._temperature is not None:
            temperature = self._temperature.value(t)
        else:
            heating = HEATING_CELSIUS_AT_LIMIT * demand_watts / self._limit_watts
            temperature = AMBIENT_CELSIUS + heating + self._temperature_noise.value(t)
        for excursion in self._excursions:
            if excursion.at <= t < excursion.end:
                ramped = (t - excursion.at) / excursion.ramp if excursion.ramp > 0 else 1.0
                temperature += excursion.delta_celsius * min(1.0, ramped)

        reasons = 0 if busy else GPU_IDLE
        for throttle in self._throttles:
            if throttle.at <= t < throttle.end:
                reasons |= BIT[throttle.reason]
        if temperature >= self._slowdown_celsius:
            reasons |= SW_THERMAL_SLOWDOWN

        clock_factor = slowest_clock_factor(reasons)
        # A slower clock draws less power; the enforced limit pins what is left.
        power_watts = demand_watts * (0.6 + 0.4 * clock_factor)
        limit_watts = self._limit_watts
        for cap in self._power_caps:
            if cap.at <= t < cap.end:
                limit_watts = min(limit_watts, cap.watts)
        if power_watts > limit_watts:
            power_watts = limit_watts
            reasons |= SW_POWER_CAP
            clock_factor = min(clock_factor, _CLOCK_FACTOR[SW_POWER_CAP])

        if busy:
            mhz = self._graphics_max_mhz * clock_factor
            graphics_mhz = max(
                self._graphics_idle_mhz, round(mhz / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ
            )
        else:
            graphics_mhz = self._graphics_idle_mhz

        generation, width = self._pcie_generation, self._pcie_width
        for downgrade in self._downgrades:
            if downgrade.at <= t < downgrade.end:
                generation = min(generation, downgrade.generation or generation)
                width = min(width, downgrade.width or width)
        if not busy:
            # Idle GPUs retrain their link to the lowest generation to save power.
            generation = IDLE_PCIE_GENERATION

        if self._memory_utilization is not None:
            memory_utilization = self._memory_utilization.value(t)
        else:
            jitter = self._memory_utilization_noise.value(t) if busy else 0.0
            memory_utilization = min(1.0, max(0.0, 0.55 * utilization + jitter))
        if self._memory_used_ratio is not None:
            memory_used_ratio = self._memory_used_ratio.value(t)
        else:
            memory_used_ratio = MEMORY_USED_BUSY_RATIO if busy else MEMORY_USED_IDLE_RATIO
        if self._fan is not None:
            fan_ratio = self._fan.value(t)
        else:
            fan_ratio = min(1.0, max(0.3, 0.3 + (temperature - 40.0) / 50.0))

        lost = self.lost(t)
        total_bytes = self.memory_total_bytes
        if self._links_down:
            nvlink_up = tuple(
                not any(e.link == link and e.at <= t < e.end for e in self._links_down)
                for link in range(self.nvlink_count)
            )
        else:
            nvlink_up = self._all_links_up
        return Sample(
            lost=lost,
            utilization=utilization,
            memory_utilization=memory_utilization,
            memory=MemoryBytes(memory_used_ratio * total_bytes, total_bytes),
            temperature_celsius=temperature,
            power_watts=power_watts,
            power_limit_watts=limit_watts,
            fans=(fan_ratio,) * self._fans,
            graphics_clock_hertz=graphics_mhz * 1e6,
            memory_clock_hertz=self._memory_clock_hertz,
            reasons=reason_flags(reasons),
            pcie=PcieLink(generation, self._pcie_generation, width, self._pcie_width),
            nvlink_up=nvlink_up,
            rates=self._rates(t, lost, utilization, power_watts, reasons, nvlink_up),
            compute=utilization,
        )

    def _rates(
        self,
        t: float,
        lost: bool,
        utilization: float,
        power_watts: float,
        reasons: int,
        nvlink_up: tuple[bool, ...],
    ) -> tuple[float, ...]:
        if lost:
            return self._no_rates
        if self._pcie_transmit is not None:
            transmit = self._pcie_transmit.value(t)
        else:
            transmit = PCIE_IDLE_BYTES_PER_SECOND + PCIE_TRANSMIT_BYTES_PER_SECOND * utilization
        if self._pcie_receive is not None:
            receive = self._pcie_receive.value(t)
        else:
            receive = PCIE_IDLE_BYTES_PER_SECOND + PCIE_RECEIVE_BYTES_PER_SECOND * utilization
        if self._nvlink_rate is not None:
            link_rate = self._nvlink_rate.value(t)
        else:
            link_rate = NVLINK_BYTES_PER_SECOND * utilization
        if nvlink_up is self._all_links_up:
            nvlink_rates: tuple[float, ...] = (link_rate,) * (2 * self.nvlink_count)
        else:
            nvlink_rates = tuple(link_rate if up else 0.0 for up in nvlink_up for _ in range(2))
        return (power_watts, *throttle_indicators(reasons), transmit, receive, *nvlink_rates)

    def xid_counts(self, t: float) -> dict[int, float]:
        """XID events seen by `t`, by XID number.

        Every XID the scenario will raise on this GPU is there from the start at 0: a counter
        series that is born at 1 hides its first increase from rate() and increase().
        """
        counts = {event.xid: 0.0 for event in self._xids}
        for event in self._xids:
            counts[event.xid] += burst_count(event.count, event.at, event.duration, t)
        return counts

    def xid_last_events(self, t: float) -> dict[int, float]:
        """Scenario time of the latest XID event by `t`, by XID number; only XIDs seen by `t`."""
        latest: dict[int, float] = {}
        for event in self._xids:
            at = burst_last_event(event.count, event.at, event.duration, t)
            if at is not None and at >= latest.get(event.xid, at):
                latest[event.xid] = at
        return latest

    def ecc_counts(self, t: float) -> dict[EccErrorType, float]:
        """Volatile ECC errors by `t`, by type."""
        counts = dict.fromkeys(ECC_ERROR_TYPES, 0.0)
        for event in self._eccs:
            counts[event.error] += burst_count(event.count, event.at, event.duration, t)
        return counts

    def pcie_replays(self, t: float) -> float:
        """PCIe replays by `t`."""
        return sum(burst_count(e.count, e.at, e.duration, t) for e in self._replays)

    def nvlink_errors(self, link: int, t: float) -> Mapping[NvlinkErrorType, float]:
        """NVLink errors of `link` by `t`, by type."""
        events = self._nvlink_errors.get(link)
        if not events:
            return _NO_NVLINK_ERRORS
        counts = dict.fromkeys(NVLINK_ERROR_TYPES, 0.0)
        for event in events:
            counts[event.error] += burst_count(event.count, event.at, event.duration, t)
        return counts
