"""The one table of what a cause is: finding kind, alert, driver reasons, rank, title, runbook.

Read by the cause recording rules and the imbalance alert's text (mirrorwatch.alerts.rules.causes),
the run report (its kinds, their order and titles), the dashboards' "Why" panel, the doctor and
the simulator. The PromQL of each cause's condition is the query catalog's
(mirrorwatch.alerts.throttling.held), so this table stays plain data. The order
of CAUSES is the precedence: most important first. What breaks a GPU, then what slows one down
(a process that is not the run's taking its SMs too), then what that causes (an imbalance is
usually the symptom of one of the above), then what only warns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RUNBOOK = "docs/runbook.md"

# NVML's clocks-event (throttle) reasons, as the exporter's `reason` label spells them, by cause.
THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")
POWER_CAP_REASONS = ("sw_power_cap",)
HARDWARE_SLOWDOWN_REASONS = ("hw_slowdown", "hw_power_brake_slowdown")
# The reasons that cost speed (the three causes' above, in the dashboards' order); gpu_idle and
# the display/application settings do not.
SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


@dataclass(frozen=True)
class Cause:
    """One finding kind of the contract and everything said about it.

    ``alert`` names the runbook section that fits (GitHub's anchor is its lower case);
    ``violation`` is the reason of the driver's violation counter that times it
    (mirrorwatch_gpu_throttle_seconds_total), ``clock_reasons`` the clocks-event reasons that
    show it; ``held_back`` is how the report and the alert say what happens to the GPU;
    ``evidence`` names the value the live cause rule records, with its unit. A kind with no
    ``evidence`` is the report's alone (it needs a range, or is not about one GPU).
    """

    kind: str
    title: str
    alert: str
    violation: str | None = None
    clock_reasons: Sequence[str] = ()
    held_back: str = ""
    evidence: str = ""

    @property
    def rank(self) -> int:
        """1 for the most important cause."""
        return RANK[self.kind]

    @property
    def anchor(self) -> str:
        return self.alert.lower()

    @property
    def runbook(self) -> str:
        """The runbook section, as the report links it (relative to the repository)."""
        return f"{RUNBOOK}#{self.anchor}"

    @property
    def live(self) -> bool:
        """Whether a recording rule says, now, per GPU, that this cause holds."""
        return bool(self.evidence)


CAUSES: tuple[Cause, ...] = (
    Cause("gpu_error", "GPU error", "GpuXidError"),
    Cause(
        "hardware_slowdown",
        "Hardware slowdown",
        "GpuHardwareSlowdown",
        None,
        HARDWARE_SLOWDOWN_REASONS,
        "in hardware slowdown",
        "SM clock, share of its maximum",
    ),
    Cause(
        "thermal_throttling",
        "Thermal throttling",
        "GpuThermalThrottling",
        "thermal",
        THERMAL_REASONS,
        "held back for heat",
        "temperature, °C",
    ),
    Cause(
        "power_capping",
        "Power capping",
        "GpuPowerCapped",
        "power",
        POWER_CAP_REASONS,
        "held back by its power limit",
        "power, share of its limit",
    ),
    Cause(
        "pcie_degraded",
        "PCIe link below its maximum",
        "GpuPcieLinkDegraded",
        evidence="PCIe lanes x generation, share of the maximum",
    ),
    Cause(
        "foreign_process",
        "Another process on the GPU",
        "GpuSharedWithForeignProcess",
        evidence="processes that are not the run's",
    ),
    # One worker (or GPU) the others wait for in the all-reduce, with no hardware cause:
    # measured where the workers time their all-reduces, else from the waiting peers' power.
    Cause("straggler", "Straggler", "TrainingHeldBack", held_back="computes slower than its peers"),
    Cause(
        "interconnect",
        "Slow GPU interconnect",
        "GpuNvlinkDown",
        evidence="peer GPUs reached without NVLink",
    ),
    # One GPU lagging the busiest with no hardware cause (most likely its own input).
    Cause(
        "imbalance",
        "Utilisation imbalance",
        "GpuUtilizationImbalance",
        evidence="busy share below the busiest GPU",
    ),
    # Every GPU of the run starved (the busiest below busy): the report's, over a range.
    Cause("input_bound", "Input-bound", "GpuUtilizationImbalance"),
    Cause("temperature_headroom", "Little temperature headroom", "GpuTemperatureNearSlowdown"),
    Cause("telemetry_gap", "Gap in the telemetry", "MirrorwatchExporterDown"),
    Cause(
        "none",
        "Nothing wrong found",
        "GpuUtilizationImbalance",
        evidence="busy share below the busiest GPU",
    ),
)

RANK = {cause.kind: i + 1 for i, cause in enumerate(CAUSES)}
KINDS = tuple(cause.kind for cause in CAUSES)
BY_KIND = {cause.kind: cause for cause in CAUSES}
TITLES = {cause.kind: cause.title for cause in CAUSES}
# The causes that hold the clocks back: with any of them, a slow GPU is not input-bound.
THROTTLES = tuple(cause for cause in CAUSES if cause.clock_reasons)
# The causes the live rules record, most important first.
LIVE = tuple(cause for cause in CAUSES if cause.live)


def cause(kind: str) -> Cause:
    return BY_KIND[kind]
