"""Scenario files: the models of a simulated host and the loader that reads and checks them."""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mirrorwatch.exporter.backend import EccErrorType, NvlinkErrorType
from mirrorwatch.exporter.simulate.messages import describe_error, kind_of

MAX_GPUS = 64
BUILTIN_PACKAGE = "mirrorwatch.exporter.simulate"

# The labels of backend.CLOCKS_EVENT_REASONS, spelled out so that pydantic can check them
# (a test keeps the two in step).
ClocksEventReason = Literal[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
]
Topology = Literal["nvlink", "pcie_switch", "pcie_host_bridge", "numa_node", "cross_numa"]

DURATION_HINT = 'must be a duration like 90, "90s" or "5m"'
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ScenarioError(ValueError):
    """A scenario that cannot be used; str() is one line naming the file, the field and why."""


def parse_duration(value: object) -> float:
    """Seconds from a number of seconds or a string such as "90", "90s", "5m", "1h30m", "250ms"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            if _DURATION_WHOLE.fullmatch(text):
                return sum(
                    float(amount) * _UNIT_SECONDS[unit]
                    for amount, unit in _DURATION_PART.findall(text)
                )
        else:
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
    raise PydanticCustomError("duration", DURATION_HINT)


Duration = Annotated[float, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    # Strict: YAML already gives numbers and booleans their own types, so `count: true` or
    # `stddev: "0.1"` is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


# --- profiles -------------------------------------------------------------------------------


class RampSpec(_Model):
    """Linear change from `from` to `to`, beginning at `start` and lasting `over`."""

    from_: float = Field(alias="from")
    to: float
    start: Duration = 0.0
    over: Duration


class SquareSpec(_Model):
    """`high` for the first `duty` fraction of every `period`, `low` for the rest."""

    low: float
    high: float
    period: Duration
    duty: float = Field(default=0.5, ge=0.0, le=1.0)
    phase: Duration = 0.0

    @field_validator("period")
    @classmethod
    def _period_positive(cls, period: float) -> float:
        if period <= 0:
            raise PydanticCustomError("duration", "must be a duration above 0")
        return period


class NoiseSpec(_Model):
    """Gaussian noise, a fresh seeded draw every second."""

    mean: float = 0.0
    stddev: float = Field(ge=0.0)


class ProfileSpec(_Model):
    """A quantity over time: one base shape (or noise alone), optional noise, clamped."""

    constant: float | None = None
    ramp: RampSpec | None = None
    square: SquareSpec | None = None
    noise: NoiseSpec | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _number_is_constant(cls, data: Any) -> Any:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"constant": data}
        if not isinstance(data, dict):
            raise PydanticCustomError(
                "profile", "must be a number or a mapping with constant, ramp, square or noise"
            )
        return data

    @model_validator(mode="after")
    def _one_shape(self) -> ProfileSpec:
        shapes = [self.constant is not None, self.ramp is not None, self.square is not None]
        if sum(shapes) > 1:
            raise PydanticCustomError(
                "profile", "give only one of constant, ramp and square (noise may be added)"
            )
        if not any(shapes) and self.noise is None:
            raise PydanticCustomError("profile", "give one of constant, ramp, square or noise")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise PydanticCustomError("profile", "min must not be above max")
        return self


class Workload(_Model):
    """Profiles of the quantities a scenario may drive; a quantity left out is derived."""

    utilization: ProfileSpec | None = None
    memory_utilization: ProfileSpec | None = None
    memory_used_ratio: ProfileSpec | None = None
    temperature_celsius: ProfileSpec | None = None
    power_watts: ProfileSpec | None = None
    fan_ratio: ProfileSpec | None = None
    pcie_transmit_bytes_per_second: ProfileSpec | None = None
    pcie_receive_bytes_per_second: ProfileSpec | None = None
    nvlink_bytes_per_second: ProfileSpec | None = None


WORKLOAD_QUANTITIES: tuple[str, ...] = tuple(Workload.model_fields)


class Override(Workload):
    """Workload profiles for one GPU, replacing the scenario-wide ones quantity by quantity."""

    gpu: int = Field(ge=0)


# --- hardware -------------------------------------------------------------------------------


class Hardware(_Model):
    """The GPUs of the simulated host; the defaults describe an H100-class board."""

    count: int = Field(default=2, ge=1, le=MAX_GPUS)
    name: str = Field(default="NVIDIA H100 80GB HBM3", min_length=1)
    memory_gib: float = Field(default=80.0, gt=0)
    power_limit_watts: float = Field(default=700.0, gt=0)
    idle_power_watts: float = Field(default=70.0, ge=0, validate_default=True)
    fans: int = Field(default=2, ge=0, le=8)
    nvlinks: int = Field(default=4, ge=0, le=18)
    topology: Topology | None = None
    pcie_generation: int = Field(default=5, ge=1, le=6)
    pcie_width: Literal[1, 2, 4, 8, 16, 32] = 16
    ecc: bool = True
    graphics_clock_max_mhz: float = Field(default=1980.0, gt=0)
    graphics_clock_idle_mhz: float = Field(default=345.0, gt=0)
    memory_clock_max_mhz: float = Field(default=2619.0, gt=0)
    slowdown_celsius: float = 87.0
    shutdown_celsius: float = 92.0
    gpu_max_celsius: float = 87.0
    memory_max_celsius: float = 95.0

    @field_validator("idle_power_watts")
    @classmethod
    def _idle_below_limit(cls, idle: float, info: ValidationInfo) -> float:
        limit = info.data.get("power_limit_watts")
        if limit is not None and idle >= limit:
            raise PydanticCustomError("hardware", f"must be below power_limit_watts ({limit:g})")
        return idle

    @field_validator("topology")
    @classmethod
    def _topology_fits_nvlinks(
        cls, topology: Topology | None, info: ValidationInfo
    ) -> Topology | None:
        nvlinks = info.data.get("nvlinks")
        if nvlinks is None or topology is None:
            return topology
        if topology == "nvlink" and nvlinks == 0:
            raise PydanticCustomError("hardware", "nvlink needs gpus.nvlinks above 0")
        if topology != "nvlink" and nvlinks > 0:
            raise PydanticCustomError(
                "hardware", "GPUs with NVLink links reach each other over nvlink; set nvlinks: 0"
            )
        return topology

    @property
    def peer_link(self) -> Topology:
        """How every GPU reaches every other one."""
        if self.topology is not None:
            return self.topology
        return "nvlink" if self.nvlinks > 0 else "pcie_switch"


# --- events ---------------------------------------------------------------------------------


class _Event(_Model):
    at: Duration
    duration: Duration | None = None
    gpu: int = Field(ge=0)

    @property
    def end(self) -> float:
        """When the event stops (infinity when it has no duration)."""
        return math.inf if self.duration is None else self.at + self.duration


class ThrottleEvent(_Event):
    """A clocks-event reason active for a while; violation time accrues meanwhile."""

    type: Literal["throttle"]
    reason: ClocksEventReason


class TemperatureEvent(_Event):
    """The GPU runs `delta_celsius` hotter, reached linearly over `ramp`."""

    type: Literal["temperature"]
    delta_celsius: float
    ramp: Duration = 0.0


class XidEvent(_Event):
    """`count` XID events of one number, spread over `duration` when given."""

    type: Literal["xid"]
    xid: int = Field(ge=1)
    count: int = Field(default=1, ge=1)


class GpuLostEvent(_Event):
    """The GPU falls off the bus: it answers nothing until `duration` ends."""

    type: Literal["gpu_lost"]


class PcieDowngradeEvent(_Event):
    """The PCIe link trains below its maximum generation and/or width."""

    type: Literal["pcie_downgrade"]
    generation: int | None = Field(default=None, ge=1, le=6)
    width: Literal[1, 2, 4, 8, 16, 32] | None = None

    @model_validator(mode="after")
    def _something_degraded(self) -> PcieDowngradeEvent:
        if self.generation is None and self.width is None:
            raise PydanticCustomError("event", "give generation, width or both")
        return self


class PcieReplaysEvent(_Event):
    """`count` PCIe replays, spread over `duration` when given."""

    type: Literal["pcie_replays"]
    count: int = Field(ge=1)


class NvlinkDownEvent(_Event):
    """One NVLink link goes down; its traffic stops."""

    type: Literal["nvlink_down"]
    link: int = Field(ge=0)


class NvlinkErrorsEvent(_Event):
    """`count` NVLink errors of one type on one link, spread over `duration` when given."""

    type: Literal["nvlink_errors"]
    link: int = Field(ge=0)
    error: NvlinkErrorType
    count: int = Field(ge=1)


class EccEvent(_Event):
    """`count` ECC errors of one type, spread over `duration` when given."""

    type: Literal["ecc"]
    error: EccErrorType
    count: int = Field(ge=1)


class PowerCapEvent(_Event):
    """The enforced power limit drops to `watts`; a GPU that wants more is pinned there."""

    type: Literal["power_cap"]
    watts: float = Field(gt=0)


Event = Annotated[
    ThrottleEvent
    | TemperatureEvent
    | XidEvent
    | GpuLostEvent
    | PcieDowngradeEvent
    | PcieReplaysEvent
    | NvlinkDownEvent
    | NvlinkErrorsEvent
    | EccEvent
    | PowerCapEvent,
    Field(discriminator="type"),
]
EVENT_TYPES: tuple[str, ...] = tuple(
    get_args(member.model_fields["type"].annotation)[0] for member in get_args(get_args(Event)[0])
)


# --- the scenario ---------------------------------------------------------------------------


class Scenario(_Model):
    """One simulated host: its GPUs, what they run, and what happens to them when."""

    description: str = ""
    seed: int = 0
    driver_version: str = "550.90.07"
    gpus: Hardware = Hardware()
    workload: Workload = Workload()
    overrides: list[Override] = []
    events: list[Event] = []

    def reference_problem(self) -> tuple[str, str] | None:
        """The first GPU, link or PCIe value that this host lacks, as (field, what is wrong)."""
        count = self.gpus.count
        for i, override in enumerate(self.overrides):
            if override.gpu >= count:
                return f"overrides[{i}].gpu", _missing_gpu(override.gpu, count)
        for i, event in enumerate(self.events):
            if event.gpu >= count:
                return f"events[{i}].gpu", _missing_gpu(event.gpu, count)
            if isinstance(event, NvlinkDownEvent | NvlinkErrorsEvent):
                links = self.gpus.nvlinks
                if event.link >= links:
                    have = f"links 0..{links - 1}" if links else "no NVLink (gpus.nvlinks is 0)"
                    return (
                        f"events[{i}].link",
                        f"NVLink {event.link} does not exist: GPUs have {have}",
                    )
            if isinstance(event, PcieDowngradeEvent):
                top_generation, top_width = self.gpus.pcie_generation, self.gpus.pcie_width
                if event.generation is not None and event.generation > top_generation:
                    what = f"{event.generation} is above the link's maximum {top_generation}"
                    return f"events[{i}].generation", what
                if event.width is not None and event.width > top_width:
                    what = f"{event.width} is above the link's maximum {top_width}"
                    return f"events[{i}].width", what
        return None


def _missing_gpu(gpu: int, count: int) -> str:
    return f"GPU {gpu} does not exist on a {count}-GPU host"


# --- loading --------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, except that 1e9 is a number (as in YAML 1.2), not a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def builtin_scenarios() -> list[str]:
    """Names of the scenarios that ship with mirrorwatch, sorted."""
    folder = resources.files(BUILTIN_PACKAGE).joinpath("scenarios")
    return sorted(
        entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml")
    )


def is_path(name_or_path: str) -> bool:
    """Whether the argument names a file rather than a built-in scenario."""
    return "/" in name_or_path or "\\" in name_or_path or name_or_path.endswith((".yaml", ".yml"))


def load_scenario(name_or_path: str, *, gpus: int | None = None) -> Scenario:
    """Read a built-in scenario by name, or a scenario file by path; `gpus` overrides the count.

    Raises ScenarioError, whose message is one line naming the file, the field and the problem.
    """
    if is_path(name_or_path):
        source = name_or_path
        text = _read_file(Path(name_or_path))
    else:
        source = f"{name_or_path}.yaml (built-in)"
        text = _read_builtin(name_or_path)
    scenario = parse_scenario(text, source=source)
    if gpus is not None:
        if not 1 <= gpus <= MAX_GPUS:
            raise ScenarioError(f"GPU count {gpus}: must be between 1 and {MAX_GPUS}")
        hardware = scenario.gpus.model_copy(update={"count": gpus})
        scenario = scenario.model_copy(update={"gpus": hardware})
    problem = scenario.reference_problem()
    if problem is not None:
        field, what = problem
        raise ScenarioError(f"scenario file {source}: {field}: {what}")
    return scenario


def parse_scenario(text: str, *, source: str) -> Scenario:
    """Validate scenario YAML; `source` names it in errors. GPU references are not checked."""
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        raise ScenarioError(f"scenario file {source}: {_yaml_problem(error)}") from None
    except yaml.YAMLError as error:
        raise ScenarioError(f"scenario file {source}: YAML syntax error: {error}") from None
    if data is None:
        raise ScenarioError(f"scenario file {source}: is empty; give at least a description")
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario file {source}: must be a mapping of fields, got {kind_of(data)}"
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        field, what = describe_error(error.errors()[0], Scenario)
        where = f"{field}: " if field else ""
        raise ScenarioError(f"scenario file {source}: {where}{what}") from None


def _read_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"scenario file {path}: does not exist") from None
    except IsADirectoryError:
        raise ScenarioError(f"scenario file {path}: is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"scenario file {path}: is not UTF-8 text") from None
    except OSError as error:
        raise ScenarioError(f"scenario file {path}: cannot be read: {error.strerror}") from None


def _read_builtin(name: str) -> str:
    names = builtin_scenarios()
    if name not in names:
        raise ScenarioError(
            f"unknown scenario {name!r}: the built-ins are {', '.join(names)}; "
            "or give the path of a .yaml file"
        )
    folder = resources.files(BUILTIN_PACKAGE).joinpath("scenarios")
    return folder.joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def _yaml_problem(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    problem = error.problem or error.context or "cannot be parsed"
    if mark is None:
        return f"YAML syntax error: {problem}"
    return f"line {mark.line + 1}, column {mark.column + 1}: YAML syntax error: {problem}"
