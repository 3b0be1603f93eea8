"""GPU host rows about each GPU's work: utilisation and memory, heat, power, clocks, throttling."""

from __future__ import annotations

from typing import Any

from dashboards.kinds import against_limit, amount_series, ratio_series, reasons_timeline
from dashboards.layout import Row
from dashboards.panels import Query
from dashboards.selectors import GPU, PER_GPU, RATE_INTERVAL
from mirrorwatch.alerts import gpu_queries, throttling
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_FAN_SPEED_RATIO,
    GPU_MEMORY_UTILIZATION_RATIO,
    GPU_POWER_LIMIT_WATTS,
    GPU_POWER_WATTS,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
    GPU_UTILIZATION_RATIO,
)

# The instance variable defaults to All: without it, two hosts draw two "GPU 0".
LEGEND = PER_GPU


def per_gpu(expr: str, *legend: str) -> Query:
    """A query with one series per GPU, its legend "GPU n" and then the words of ``legend``."""
    return Query(expr, " ".join([LEGEND, *legend]))


def by_gpu(metric: str, *matchers: str, legend: str = "") -> Query:
    """``metric`` of each selected GPU, its legend "GPU n" and then ``legend``."""
    return per_gpu(GPU(metric, *matchers), *([legend] if legend else []))


def utilisation_row(t: Thresholds) -> Row:
    memory = t.GpuMemoryNearlyFull
    return Row(
        "Utilisation and memory",
        [
            ratio_series(
                "Utilisation",
                "Share of time each GPU ran a kernel. GPUs of one data-parallel run should "
                "move together; one below the others is the slow replica (see the Training "
                "balance dashboard).",
                [by_gpu(GPU_UTILIZATION_RATIO)],
            ),
            ratio_series(
                "Memory used",
                f"Memory used as a share of each GPU's total. Above {memory.used_ratio:.0%} "
                f"for {memory.hold_in_words}: GpuMemoryNearlyFull. TensorFlow reserves nearly "
                "all memory up front, so for a training GPU the Training balance dashboard's "
                "Replica memory is the truer figure.",
                [per_gpu(gpu_queries.memory_used_ratio(GPU))],
                limit=(memory.used_ratio, "red"),
                fill_opacity=10,
            ),
            ratio_series(
                "Memory controller busy",
                "Share of time each GPU's memory controller was reading or writing (not "
                "capacity). High with low Utilisation: a memory-bound workload.",
                [by_gpu(GPU_MEMORY_UTILIZATION_RATIO)],
            ),
        ],
    )


def clock_panel(title: str, clock: str, description: str) -> Any:
    """One clock domain's current clock per GPU, with its maximum as a dashed line."""
    domain = f'clock="{clock}"'
    return against_limit(
        title,
        description,
        "hertz",
        [
            by_gpu(GPU_CLOCK_HERTZ, domain),
            by_gpu(GPU_CLOCK_MAX_HERTZ, domain, legend="max"),
        ],
        "max$",
    )


def thermal_row(t: Thresholds) -> Row:
    return Row(
        "Temperature, power and clocks",
        [
            against_limit(
                "Temperature",
                "GPU temperature with each GPU's slowdown and shutdown thresholds (dashed). "
                f"Within {t.GpuTemperatureNearSlowdown.margin_celsius:g} °C of slowdown: "
                "GpuTemperatureNearSlowdown; past it the GPU throttles. Busy GPUs more than "
                f"{t.GpuTemperatureSpread.spread_celsius:g} °C apart: GpuTemperatureSpread "
                "(uneven airflow).",
                "celsius",
                [
                    by_gpu(GPU_TEMPERATURE_CELSIUS),
                    by_gpu(
                        GPU_TEMPERATURE_THRESHOLD_CELSIUS,
                        'threshold=~"slowdown|shutdown"',
                        legend="{{threshold}}",
                    ),
                ],
                "(slowdown|shutdown)$",
                min_value=None,
            ),
            ratio_series(
                "Fan speed",
                "Fan speed as a share of maximum, per fan. Fans follow temperature; a fan "
                "at 100 % with a hot GPU, or one fan far below its twin, points at a failing "
                "fan. Empty on SXM and passively cooled boards (NVML cannot see their fans).",
                [by_gpu(GPU_FAN_SPEED_RATIO, legend="fan {{fan}}")],
            ),
            against_limit(
                "Power",
                "Power draw against the enforced power limit (dashed). Draw pinned at the "
                "limit means the GPU is power-capped (sw_power_cap in Throttle reasons); "
                "different limits on GPUs of one run unbalance it.",
                "watt",
                [
                    by_gpu(GPU_POWER_WATTS),
                    by_gpu(GPU_POWER_LIMIT_WATTS, legend="limit"),
                ],
                "limit$",
            ),
            amount_series(
                "Average power from the energy counter",
                "Each GPU's mean power over the rate window, in kW (the kWh it uses per "
                "hour at this rate), from its energy counter: unlike the sampled Power panel "
                "it misses no spike between scrapes. Compare GPUs doing the same work: one "
                "using less is doing less.",
                "kwatt",
                [per_gpu(gpu_queries.energy_kwh_per_hour(GPU, RATE_INTERVAL))],
                fill_opacity=10,
            ),
            clock_panel(
                "SM clock",
                "sm",
                "Streaming-multiprocessor clock against its maximum (dashed). A busy GPU well "
                "below its maximum is throttled: see Throttle reasons for why.",
            ),
            clock_panel(
                "Memory clock",
                "memory",
                "Memory clock against its maximum (dashed). It drops with hardware slowdown and "
                "power braking.",
            ),
        ],
    )


def throttle_row(t: Thresholds) -> Row:
    power, heat = t.GpuPowerCapped, t.GpuThermalThrottling
    return Row(
        "Throttling",
        [
            reasons_timeline(
                "Clock-event reasons per GPU, red while active. sw_thermal_slowdown / "
                "hw_thermal_slowdown: heat (GpuThermalThrottling); sw_power_cap: the power "
                "limit (GpuPowerCapped); hw_slowdown / hw_power_brake_slowdown: the board "
                "cut clocks (GpuHardwareSlowdown); gpu_idle: nothing to do.",
                by_gpu(GPU_CLOCKS_EVENT_ACTIVE, legend="{{reason}}"),
                height=12,
            ),
            ratio_series(
                "Throttle time fraction",
                "Share of time each GPU was held back, by reason, from the driver's "
                f"violation counters. Thermal time of at least {heat.minute_fraction:.0%} of "
                f"every minute for {heat.hold_in_words} is GpuThermalThrottling (a shorter "
                "blip shows here without paging); power above "
                f"the {power.throttled_fraction:g} line for {power.hold_in_words} is "
                "GpuPowerCapped. low_utilization is idle time, not a fault.",
                [per_gpu(throttling.throttle_fraction(GPU, RATE_INTERVAL), "{{reason}}")],
                width=12,
                height=12,
                limit=(power.throttled_fraction, "orange"),
            ),
        ],
    )
