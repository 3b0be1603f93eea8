"""Scenario files: a simulated host, the alerts it is meant to raise, and the loader.

The parts of a scenario (durations, profiles, hardware, events) are in models.py.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from mirrorwatch.exporter.simulate.messages import describe_error, kind_of
from mirrorwatch.exporter.simulate.models import (
    MAX_GPUS,
    Event,
    Hardware,
    NvlinkDownEvent,
    NvlinkErrorsEvent,
    Override,
    PcieDowngradeEvent,
    ProcessSpec,
    StrictModel,
    Training,
    Workload,
)

BUILTIN_PACKAGE = "mirrorwatch.exporter.simulate"


class ScenarioError(ValueError):
    """A scenario that cannot be used; str() is one line naming the file, the field and why."""


# --- the scenario ---------------------------------------------------------------------------

Severity = Literal["critical", "warning", "info"]


class ExpectedAlert(StrictModel):
    """An alert the scenario is meant to raise (alerts/mirrorwatch.rules.yml) and its severity."""

    alert: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", description="the alert's name, CamelCase")
    severity: Severity


class Scenario(StrictModel):
    """One simulated host: its GPUs, what they run, and what happens to them when."""

    description: str = ""
    seed: int = 0
    driver_version: str = "550.90.07"
    # The newest CUDA that driver supports (R550: CUDA 12.4), as nvmlSystemGetCudaDriverVersion.
    cuda_version: str = Field(default="12.4", pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")
    gpus: Hardware = Hardware()
    workload: Workload = Workload()
    overrides: list[Override] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    # The synchronous run the GPUs train, coupling them each second; null: independent GPUs.
    training: Training | None = Training()
    # Processes on the GPUs; None (left out): the GPUs list no processes, as where NVML
    # cannot; [] lists none but counts 0.
    processes: list[ProcessSpec] | None = None
    # What the scenario drills: [] for none but Watchdog (which always fires), None for unsaid.
    expected_alerts: list[ExpectedAlert] | None = None

    @field_validator("expected_alerts")
    @classmethod
    def _each_alert_once(cls, alerts: list[ExpectedAlert] | None) -> list[ExpectedAlert] | None:
        # One alert may come with two severities (GpuXidError: critical and other XIDs).
        pairs = [(expected.alert, expected.severity) for expected in alerts or []]
        repeated = next((pair for pair in pairs if pairs.count(pair) > 1), None)
        if repeated is not None:
            alert, severity = repeated
            raise PydanticCustomError(
                "expected_alerts", f"{alert} with severity {severity} is listed twice"
            )
        return alerts

    def reference_problem(self) -> tuple[str, str] | None:
        """The first GPU, link or PCIe value that this host lacks, as (field, what is wrong)."""
        count = self.gpus.count
        for i, override in enumerate(self.overrides):
            if override.gpu >= count:
                return f"overrides[{i}].gpu", _missing_gpu(override.gpu, count)
        for i, process in enumerate(self.processes or []):
            if process.gpu >= count:
                return f"processes[{i}].gpu", _missing_gpu(process.gpu, count)
        members = self.training.gpus if self.training is not None else None
        for i, gpu in enumerate(members or []):
            if gpu >= count:
                return f"training.gpus[{i}]", _missing_gpu(gpu, count)
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


def builtin_expected_alerts() -> dict[str, tuple[ExpectedAlert, ...]]:
    """Each built-in scenario's ``expected_alerts``, from its file, by scenario name."""
    return {name: tuple(load_scenario(name).expected_alerts or ()) for name in builtin_scenarios()}


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
