"""The alert thresholds: one validated model of thresholds.yml, read by everything that needs one.

The rule generator, the dashboards, the demo, the end-to-end drills and the run report all load
`Thresholds` from here, so a value is checked once, in one way, and a typo in thresholds.yml is
an error naming the setting rather than a rule that silently never fires. Needs pydantic and
PyYAML, both dependencies of the base install.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from mirrorwatch.contract.vocabulary import (
    format_duration,
    is_prometheus_duration,
    parse_prometheus_duration,
)

# Shipped as package data beside this module (pyproject.toml), so an installed mirrorwatch has it.
THRESHOLDS_FILE = Path(__file__).resolve().with_name("thresholds.yml")


def _duration(text: str) -> str:
    if not is_prometheus_duration(text):
        raise PydanticCustomError(
            "prometheus_duration", "expected a Prometheus duration such as 30s, 5m, 1h30m or 1d"
        )
    return text


# Numbers are strict: YAML's `true` or "0.5" is a mistake to report, not a value to coerce.
Ratio = Annotated[float, Field(ge=0, le=1, strict=True, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
Duration = Annotated[str, Field(strict=True), AfterValidator(_duration)]
Text = Annotated[str, Field(strict=True, min_length=1)]
XidNumber = Annotated[int, Field(gt=0, strict=True)]


class AlertSettings(BaseModel):
    """What every alert takes: how long its condition must hold before it fires (`for`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    hold: Duration = Field(alias="for")

    @property
    def hold_seconds(self) -> float:
        return parse_prometheus_duration(self.hold)

    @property
    def hold_in_words(self) -> str:
        """The `for` as a panel description says it: "a minute", "15 minutes"."""
        return in_words(self.hold_seconds)

    def settings(self) -> dict[str, float | str | tuple[int, ...]]:
        """This alert's own settings besides `for`, by name: the fragments its rules use."""
        return {name: getattr(self, name) for name in type(self).model_fields if name != "hold"}


class Imbalance(AlertSettings):
    spread_ratio: Ratio


class ThrottledTime(AlertSettings):
    throttled_fraction: Ratio


class SustainedThrottling(AlertSettings):
    """Throttled for at least ``minute_fraction`` of every minute for the whole `for`."""

    minute_fraction: Ratio


class NearSlowdown(AlertSettings):
    margin_celsius: Amount


class NvlinkErrors(AlertSettings):
    errors_per_10m: Amount


class XidErrors(AlertSettings):
    critical_xids: tuple[XidNumber, ...] = Field(min_length=1)

    @field_validator("critical_xids")
    @classmethod
    def _sorted_once(cls, xids: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(xids)))


class MemoryFull(AlertSettings):
    used_ratio: Ratio


class TemperatureSpread(AlertSettings):
    spread_celsius: Amount


class Missing(AlertSettings):
    fallback_lookback: Duration


class Stalled(AlertSettings):
    no_step_window: Duration


class ThroughputDrop(AlertSettings):
    below_baseline_ratio: Ratio


class ScalingEfficiency(AlertSettings):
    efficiency_ratio: Ratio


class TelemetryStale(AlertSettings):
    stale_after_seconds: Amount


class HeldBack(AlertSettings):
    cost_ratio: Ratio


class HungInCollective(AlertSettings):
    no_step_window: Duration
    busy_ratio: Ratio
    power_limit_ratio: Ratio


class InputBound(BaseModel):
    """When the run report calls a run input-bound (no alert: the report's finding only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    busiest_below_ratio: Ratio
    held_share: Ratio


class Thresholds(BaseModel):
    """thresholds.yml: settings shared by several alerts, then one section per contract alert.

    The section fields carry the alert names of the contract, so `t.GpuLost.hold` reads as the
    file does and `alert_names()` is the contract's list.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    exporter_job_regex: Text
    runbook_url: Text
    busy_utilization_ratio: Ratio
    input_bound: InputBound

    GpuUtilizationImbalance: Imbalance
    GpuThermalThrottling: SustainedThrottling
    GpuTemperatureNearSlowdown: NearSlowdown
    GpuHardwareSlowdown: AlertSettings
    GpuPowerCapped: ThrottledTime
    GpuPcieLinkDegraded: AlertSettings
    GpuNvlinkDown: AlertSettings
    GpuNvlinkErrors: NvlinkErrors
    GpuXidError: XidErrors
    GpuEccUncorrectable: AlertSettings
    GpuMemoryNearlyFull: MemoryFull
    GpuTemperatureSpread: TemperatureSpread
    GpuSharedWithForeignProcess: AlertSettings  # beyond the contract's list (issue 13)
    GpuMissing: Missing
    GpuLost: AlertSettings
    TrainingStalled: Stalled
    TrainingThroughputDrop: ThroughputDrop
    TrainingScalingEfficiencyLow: ScalingEfficiency
    TrainingTelemetryStale: TelemetryStale
    TrainingHeldBack: HeldBack
    TrainingHungInCollective: HungInCollective
    MirrorwatchExporterDown: AlertSettings
    MirrorwatchNvmlUnavailable: AlertSettings
    Watchdog: AlertSettings

    @field_validator("runbook_url")
    @classmethod
    def _without_anchor(cls, url: str) -> str:
        return url.rstrip("#")

    @classmethod
    def alert_names(cls) -> tuple[str, ...]:
        """Every alert with a section, in file order."""
        return tuple(name for name, _ in cls._sections())

    @classmethod
    def _sections(cls) -> Iterator[tuple[str, type[AlertSettings]]]:
        for name, info in cls.model_fields.items():
            kind = info.annotation
            if isinstance(kind, type) and issubclass(kind, AlertSettings):
                yield name, kind

    def alert(self, name: str) -> AlertSettings:
        """The section of the alert called ``name``; KeyError for a name that has none."""
        if name not in self.alert_names():
            raise KeyError(f"{name} is not an alert of thresholds.yml")
        section: AlertSettings = getattr(self, name)
        return section

    def with_holds_divided(self, divisor: float) -> Thresholds:
        """The same thresholds with every `for` divided by ``divisor`` (the alert drills)."""
        shorter = {
            name: getattr(self, name).model_copy(
                update={"hold": format_duration(getattr(self, name).hold_seconds / divisor)}
            )
            for name in self.alert_names()
        }
        return self.model_copy(update=shorter)


def in_words(seconds: float) -> str:
    """A duration as a sentence says it: "30 seconds", "a minute", "15 minutes", "a day"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{'an' if unit == 'hour' else 'a'} {unit}" if count == 1 else f"{count} {unit}s"
    return f"{seconds:g} seconds"


class ThresholdsError(ValueError):
    """thresholds.yml is not valid; the message names each wrong setting and what it expects."""


def _describe(error: ErrorDetails) -> str:
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown setting"
    if error["type"] == "missing":
        return f"{where}: missing setting"
    return f"{where}: {error['msg']}, got {error['input']!r}"


def parse_thresholds(raw: Any, source: str = "thresholds.yml") -> Thresholds:
    """Validate the parsed YAML of thresholds.yml; ThresholdsError lists what is wrong."""
    if not isinstance(raw, dict):
        raise ThresholdsError(f"{source}: expected a mapping at the top level")
    try:
        return Thresholds.model_validate(raw)
    except ValidationError as error:
        problems = "\n".join(f"  {_describe(e)}" for e in error.errors())
        raise ThresholdsError(f"{source}:\n{problems}") from None


def load_thresholds(path: Path = THRESHOLDS_FILE) -> Thresholds:
    """Read and validate thresholds.yml (the shipped one unless told otherwise)."""
    with path.open(encoding="utf-8") as f:
        try:
            raw = yaml.safe_load(f)
        except yaml.YAMLError as error:
            raise ThresholdsError(f"{path}: not YAML: {error}") from None
    return parse_thresholds(raw, source=str(path))
