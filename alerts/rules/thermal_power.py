"""GPU alerts on heat and power: throttling, near slowdown, hardware slowdown, uneven heat."""

from __future__ import annotations

from mirrorwatch.alerts import gpu_queries, promql, recorded, throttling
from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.templates import gpu_value
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import HARDWARE_SLOWDOWN_REASONS, POWER_CAP_REASONS
from mirrorwatch.contract.labels import TARGET_KEY
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_POWER_LIMIT_WATTS,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
)

TEMPERATURE_NOW = gpu_value(GPU_TEMPERATURE_CELSIUS, "humanize")


def alerts(t: Thresholds) -> list[Alert]:
    busy_temperature = gpu_queries.busy_temperature(t.busy_utilization_ratio)
    return [
        # Pending while the share of the last minute reaches the fraction, firing once it has
        # for all of `for`: every minute of it throttled that much. The first minute below
        # resolves it. The share rides out a scrape gap (queries.throttled_share_of_minute).
        Alert(
            "GpuThermalThrottling",
            "warning",
            "«thermal_minute» >= «minute_fraction»",
            "GPU {{ $labels.gpu }} of «HOST» is thermally throttled",
            "«GPU», «RUN_OF_GPU», keeps lowering its clocks for heat: at least "
            "«minute_fraction:%» of every minute, «PCT» of the last one (now at «temperature» °C).",
            "«PCT»",
            fragments={
                "thermal_minute": recorded.THERMAL_MINUTE,
                "temperature": TEMPERATURE_NOW,
            },
        ),
        Alert(
            "GpuTemperatureNearSlowdown",
            "warning",
            """
            mirrorwatch_gpu_temperature_celsius
            >= on («GPU_KEY»)
              mirrorwatch_gpu_temperature_threshold_celsius{threshold="slowdown"} - «margin_celsius»
            """,
            "GPU {{ $labels.gpu }} of «HOST» is near its slowdown temperature",
            "«GPU», «RUN_OF_GPU», is at {{ $value | humanize }} °C, within «margin_celsius» °C "
            "of the slowdown temperature NVML reports («slowdown» °C); past it the GPU lowers "
            "its clocks.",
            "{{ $value | humanize }} °C",
            fragments={
                "slowdown": gpu_value(
                    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
                    "humanize",
                    'threshold="slowdown"',
                )
            },
        ),
        Alert(
            "GpuHardwareSlowdown",
            "critical",
            "mirrorwatch_gpu_clocks_event_active{«hardware»} == 1",
            "GPU {{ $labels.gpu }} of «HOST» is in hardware slowdown",
            "«GPU», «RUN_OF_GPU», reports {{ $labels.reason }}: the board itself has cut its "
            "clocks by half or more (SM clock now «sm_clock»Hz).",
            "{{ $labels.reason }}",
            fragments={
                "hardware": throttling.reasons(HARDWARE_SLOWDOWN_REASONS),
                "sm_clock": gpu_value(GPU_CLOCK_HERTZ, "humanize", 'clock="sm"'),
            },
        ),
        Alert(
            "GpuPowerCapped",
            "info",
            "«throttled» > «throttled_fraction»",
            "GPU {{ $labels.gpu }} of «HOST» is held back by its power limit",
            "«GPU», «RUN_OF_GPU», ran at its power limit («limit» W) «PCT» of the last 5 "
            "minutes (alert above «throttled_fraction:%»).",
            "«PCT»",
            fragments={
                "throttled": throttling.throttled_share("power", POWER_CAP_REASONS),
                "limit": gpu_value(GPU_POWER_LIMIT_WATTS, "humanize"),
            },
        ),
        Alert(
            "GpuTemperatureSpread",
            "warning",
            """
            (
              max by («TARGET_KEY») «busy_temperature»
              - min by («TARGET_KEY») «busy_temperature»
              > «spread_celsius»
            )
            «labels_of_hottest_gpu»
            """,
            "Busy GPUs of «HOST» differ in temperature",
            "The busy GPUs of «HOST» are {{ $value | humanize }} °C apart "
            "(alert above «spread_celsius» °C); the hottest is «GPU», «RUN_OF_GPU», at "
            "«temperature» °C.",
            "{{ $value | humanize }} °C",
            fragments={
                "busy_temperature": busy_temperature,
                "labels_of_hottest_gpu": promql.labels_of_extreme(
                    busy_temperature, TARGET_KEY, "max"
                ),
                "temperature": TEMPERATURE_NOW,
            },
        ),
    ]
