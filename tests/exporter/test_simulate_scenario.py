"""Scenario files: the built-ins load, and every mistake in a file is one line naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mirrorwatch.exporter.simulate.models import (
    EVENT_TYPES,
    WORKLOAD_QUANTITIES,
    Hardware,
    duration_seconds,
)
from mirrorwatch.exporter.simulate.scenario import (
    Scenario,
    ScenarioError,
    builtin_expected_alerts,
    builtin_scenarios,
    is_path,
    load_scenario,
)

CONTRACT_BUILTINS = (
    "healthy",
    "imbalance",
    "thermal-throttle",
    "pcie-degraded",
    "nvlink-errors",
    "xid",
    "gpu-lost",
)


def highest_gpu_named(scenario: Scenario) -> int:
    gpus = [event.gpu for event in scenario.events] + [o.gpu for o in scenario.overrides]
    return max(gpus, default=0)


def write(tmp_path: Path, text: str, name: str = "custom.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(name_or_path: str, *, gpus: int | None = None) -> str:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(name_or_path, gpus=gpus)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- built-ins ------------------------------------------------------------------------------


def test_the_contract_built_ins_all_ship() -> None:
    assert set(CONTRACT_BUILTINS) <= set(builtin_scenarios())


def test_built_ins_are_listed_sorted() -> None:
    assert builtin_scenarios() == sorted(builtin_scenarios())


@pytest.mark.parametrize("name", CONTRACT_BUILTINS)
def test_every_built_in_describes_itself(name: str) -> None:
    assert load_scenario(name).description.strip()


@pytest.mark.parametrize("name", CONTRACT_BUILTINS)
def test_every_built_in_simulates_two_gpus_by_default(name: str) -> None:
    assert load_scenario(name).gpus.count == 2


@pytest.mark.parametrize("gpus", [1, 2, 64])
@pytest.mark.parametrize("name", CONTRACT_BUILTINS)
def test_every_built_in_loads_with_any_gpu_count_its_events_allow(name: str, gpus: int) -> None:
    needed = highest_gpu_named(load_scenario(name)) + 1
    if gpus >= needed:
        assert load_scenario(name, gpus=gpus).gpus.count == gpus
    else:
        assert error_of(name, gpus=gpus).endswith(
            f"GPU {needed - 1} does not exist on a {gpus}-GPU host"
        )


def test_a_scenario_naming_gpu_1_on_one_gpu_says_which_field() -> None:
    assert error_of("gpu-lost", gpus=1) == (
        "scenario file gpu-lost.yaml (built-in): events[0].gpu: "
        "GPU 1 does not exist on a 1-GPU host"
    )


@pytest.mark.parametrize("gpus", [0, 65, -1])
def test_a_gpu_count_outside_1_to_64_is_refused(gpus: int) -> None:
    assert error_of("healthy", gpus=gpus) == f"GPU count {gpus}: must be between 1 and 64"


def test_an_unknown_built_in_lists_the_built_ins() -> None:
    assert error_of("heathly") == (
        "unknown scenario 'heathly': the built-ins are "
        f"{', '.join(builtin_scenarios())}; or give the path of a .yaml file"
    )


@pytest.mark.parametrize(
    ("argument", "path"),
    [
        ("healthy", False),
        ("thermal-throttle", False),
        ("healthy.yaml", True),
        ("my.yml", True),
        ("./healthy", True),
        ("/etc/scenarios/x", True),
    ],
)
def test_a_name_with_a_separator_or_yaml_suffix_is_a_path(argument: str, path: bool) -> None:
    assert is_path(argument) is path


# --- custom files ---------------------------------------------------------------------------


def test_a_custom_file_loads_with_its_own_values(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
description: one busy SXM GPU
seed: 9
gpus: {count: 1, fans: 0, power_limit_watts: 500}
workload:
  utilization: {ramp: {from: 0.1, to: 0.9, start: 10s, over: 1m}, noise: {stddev: 0.02}}
events:
  - {type: throttle, gpu: 0, reason: hw_slowdown, at: 90, duration: "2m"}
""",
    )
    scenario = load_scenario(path)
    assert scenario.seed == 9
    assert scenario.gpus.fans == 0
    assert scenario.gpus.power_limit_watts == 500
    ramp = scenario.workload.utilization.ramp if scenario.workload.utilization else None
    assert ramp is not None
    assert (ramp.from_, ramp.to, ramp.start, ramp.over) == (0.1, 0.9, 10.0, 60.0)
    assert scenario.events[0].at == 90.0
    assert scenario.events[0].end == 210.0


def test_every_field_has_a_default(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, "seed: 3\n"))
    assert (scenario.description, scenario.gpus.count, scenario.events) == ("", 2, [])


def test_a_bare_number_is_a_constant_profile(tmp_path: Path) -> None:
    path = write(tmp_path, "description: d\nworkload: {utilization: 0.5}\n")
    utilization = load_scenario(path).workload.utilization
    assert utilization is not None
    assert utilization.constant == 0.5


def test_an_event_without_duration_lasts_for_ever(tmp_path: Path) -> None:
    path = write(tmp_path, "description: d\nevents: [{type: gpu_lost, gpu: 1, at: 5s}]\n")
    assert load_scenario(path).events[0].end == float("inf")


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1m 30s", 90.0),
        ("250ms", 0.25),
        ("0", 0.0),
        ("1d", 86400.0),  # every unit of vocabulary.parse_duration, as everywhere else
    ],
)
def test_durations_are_seconds_or_suffixed(written: object, seconds: float) -> None:
    assert duration_seconds(written) == seconds


@pytest.mark.parametrize("written", ["soon", "5 minutes", "m", "-3s", -1, True, None, [1], "1x"])
def test_anything_else_is_not_a_duration(written: object) -> None:
    with pytest.raises(ValueError, match="must be a duration like"):
        duration_seconds(written)


# --- mistakes, each one line: file, field, what ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "description: d\ncolour: red\n",
            "colour: unknown field; expected one of description, seed, driver_version, "
            "cuda_version, gpus, workload, overrides, events, training, processes, expected_alerts",
            id="unknown-field",
        ),
        pytest.param(
            "description: d\ngpus: {count: two}\n",
            "gpus.count: input should be a valid integer (got 'two')",
            id="wrong-type",
        ),
        pytest.param(
            "description: d\ngpus: {count: true}\n",
            "gpus.count: input should be a valid integer (got true)",
            id="boolean-for-number",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: xid, gpu: 0, xid: 43, at: soon}\n",
            'events[0].at: must be a duration like 90, "90s" or "5m"',
            id="bad-duration",
        ),
        pytest.param(
            "description: d\nevents:\n"
            "  - {type: xid, gpu: 0, xid: 43, at: 1s}\n"
            "  - {type: xid, gpu: 0, xid: 43, at: 1s}\n"
            "  - {type: xid, gpu: 3, xid: 43, at: 1s}\n",
            "events[2].gpu: GPU 3 does not exist on a 2-GPU host",
            id="gpu-out-of-range",
        ),
        pytest.param(
            "description: d\noverrides:\n  - {gpu: 2, utilization: 0.5}\n",
            "overrides[0].gpu: GPU 2 does not exist on a 2-GPU host",
            id="override-gpu-out-of-range",
        ),
        pytest.param(
            "description: d\ngpus:\n  count: 2\n    nvlinks: 3\n",
            "line 4, column 12: YAML syntax error: mapping values are not allowed here",
            id="yaml-syntax",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: boom, gpu: 0, at: 1s}\n",
            "events[0].type: must be one of throttle, temperature, xid, gpu_lost, "
            "pcie_downgrade, pcie_replays, nvlink_down, nvlink_errors, ecc, power_cap, "
            "collective_hang, got 'boom'",
            id="unknown-event-type",
        ),
        pytest.param(
            "description: d\nevents:\n  - {gpu: 0, at: 1s}\n",
            "events[0].type: is required: one of throttle, temperature, xid, gpu_lost, "
            "pcie_downgrade, pcie_replays, nvlink_down, nvlink_errors, ecc, power_cap, "
            "collective_hang",
            id="event-without-type",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: xid, gpu: 0, xid: 43, at: 1s, colour: 1}\n",
            "events[0].colour: unknown field; expected one of at, duration, gpu, type, xid, count",
            id="unknown-event-field",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: nvlink_down, gpu: 0, link: 4, at: 1s}\n",
            "events[0].link: NVLink 4 does not exist: GPUs have links 0..3",
            id="link-out-of-range",
        ),
        pytest.param(
            "description: d\ngpus: {nvlinks: 0}\n"
            "events:\n  - {type: nvlink_down, gpu: 0, link: 0, at: 1s}\n",
            "events[0].link: NVLink 0 does not exist: GPUs have no NVLink (gpus.nvlinks is 0)",
            id="link-without-nvlink",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: pcie_downgrade, gpu: 0, at: 1s}\n",
            "events[0]: give generation, width or both",
            id="downgrade-of-nothing",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: pcie_downgrade, gpu: 0, at: 1s, width: 12}\n",
            "events[0].width: input should be 1, 2, 4, 8, 16 or 32 (got 12)",
            id="impossible-width",
        ),
        pytest.param(
            "description: d\nworkload:\n  utilization: {ramp: {from: 0, to: 1}}\n",
            "workload.utilization.ramp.over: is required",
            id="ramp-without-over",
        ),
        pytest.param(
            "description: d\nworkload:\n  utilization: high\n",
            "workload.utilization: must be a number or a mapping with constant, ramp, square "
            "or noise",
            id="profile-of-a-word",
        ),
        pytest.param(
            "description: d\nworkload:\n  utilization: {constant: 1, square: "
            "{low: 0, high: 1, period: 10}}\n",
            "workload.utilization: give only one of constant, ramp and square (noise may be added)",
            id="profile-with-two-shapes",
        ),
        pytest.param(
            "description: d\nworkload:\n  power_watts: {noise: {mean: 300, stddev: 5}, "
            "wobble: 1}\n",
            "workload.power_watts.wobble: unknown field; expected one of constant, ramp, "
            "square, noise, min, max",
            id="unknown-profile-field",
        ),
        pytest.param(
            "description: d\nworkload:\n  fan_ratio: {square: {low: 0, high: 1, period: 0}}\n",
            "workload.fan_ratio.square.period: must be a duration above 0",
            id="zero-period",
        ),
        pytest.param(
            "description: d\nevents:\n  - {type: throttle, gpu: 0, at: 1s, reason: hot}\n",
            "events[0].reason: input should be 'gpu_idle', 'applications_clocks_setting', "
            "'sw_power_cap', 'hw_slowdown', 'sync_boost', 'sw_thermal_slowdown', "
            "'hw_thermal_slowdown', 'hw_power_brake_slowdown' or 'display_clock_setting' "
            "(got 'hot')",
            id="unknown-throttle-reason",
        ),
        pytest.param(
            "description: d\ngpus: {nvlinks: 0, topology: nvlink}\n",
            "gpus.topology: nvlink needs gpus.nvlinks above 0",
            id="nvlink-topology-without-links",
        ),
        pytest.param(
            "description: d\ngpus: {idle_power_watts: 800}\n",
            "gpus.idle_power_watts: must be below power_limit_watts (700)",
            id="idle-above-limit",
        ),
        pytest.param(
            "description: d\nexpected_alerts:\n  - {alert: GpuLost, severity: loud}\n",
            "expected_alerts[0].severity: input should be 'critical', 'warning' or 'info' "
            "(got 'loud')",
            id="unknown-severity",
        ),
        pytest.param(
            "description: d\nexpected_alerts:\n  - {alert: gpu lost, severity: critical}\n",
            "expected_alerts[0].alert: string should match pattern '^[A-Z][A-Za-z0-9]*$' "
            "(got 'gpu lost')",
            id="alert-name-not-camel-case",
        ),
        pytest.param(
            "description: d\nexpected_alerts:\n  - {alert: GpuLost}\n",
            "expected_alerts[0].severity: is required",
            id="alert-without-severity",
        ),
        pytest.param(
            "description: d\nexpected_alerts:\n"
            "  - {alert: GpuLost, severity: critical}\n"
            "  - {alert: GpuLost, severity: critical}\n",
            "expected_alerts: GpuLost with severity critical is listed twice",
            id="alert-listed-twice",
        ),
        pytest.param("- a\n- b\n", "must be a mapping of fields, got a list", id="a-list"),
        pytest.param("", "is empty; give at least a description", id="empty"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_field_and_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    assert error_of(path) == f"scenario file {path}: {expected}"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert error_of(str(path)) == f"scenario file {path}: does not exist"


def test_a_directory_is_not_a_scenario(tmp_path: Path) -> None:
    assert error_of(f"{tmp_path}/") == f"scenario file {tmp_path}: is a directory, not a file"


def test_gpu_references_are_checked_against_the_overridden_count(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "description: d\ngpus: {count: 8}\nevents: [{type: xid, gpu: 5, xid: 31, at: 1}]\n",
    )
    assert load_scenario(path).gpus.count == 8
    assert error_of(path, gpus=4) == (
        f"scenario file {path}: events[0].gpu: GPU 5 does not exist on a 4-GPU host"
    )


def test_scenario_error_is_a_value_error() -> None:
    assert issubclass(ScenarioError, ValueError)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"


def documented_examples() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    return [block for block in blocks if "..." not in block]


def test_the_docs_show_examples() -> None:
    assert len(documented_examples()) >= 2


@pytest.mark.parametrize("example", documented_examples())
def test_every_complete_example_in_the_docs_loads(tmp_path: Path, example: str) -> None:
    load_scenario(write(tmp_path, example))


def test_the_docs_describe_every_field_quantity_and_event_type() -> None:
    text = DOCS.read_text(encoding="utf-8")
    names = [*Hardware.model_fields, *WORKLOAD_QUANTITIES, *EVENT_TYPES, *Scenario.model_fields]
    assert [name for name in names if f"`{name}`" not in text] == []


# --- expected alerts: the files say, the docs and the rules agree ---------------------------

RULES = DOCS.parents[1] / "alerts" / "mirrorwatch.rules.yml"


def test_every_built_in_says_what_it_drills() -> None:
    for name in builtin_scenarios():
        assert load_scenario(name).expected_alerts is not None, name


def test_an_unsaid_expectation_is_none_and_an_empty_one_is_nothing(tmp_path: Path) -> None:
    assert load_scenario(write(tmp_path, "description: d\n")).expected_alerts is None
    assert load_scenario("healthy").expected_alerts == []


def test_one_alert_may_be_expected_with_two_severities() -> None:
    xid = [(a.alert, a.severity) for a in builtin_expected_alerts()["xid"]]
    assert ("GpuXidError", "warning") in xid
    assert ("GpuXidError", "critical") in xid


def documented_drills() -> dict[str, set[tuple[str, str]]]:
    """The built-ins table of docs/scenarios.md: name -> {(alert, severity)} of its last column."""
    section = DOCS.read_text().split("## Built-in scenarios", 1)[1].split("\n## ", 1)[0]
    drills = {}
    for row in re.findall(r"^\| `([a-z-]+)` \|.*\| (.*?) \|$", section, re.MULTILINE):
        name, cell = row
        drills[name] = set(re.findall(r"`([A-Z][A-Za-z0-9]*)` \((critical|warning|info)", cell))
    return drills


def test_the_docs_list_each_built_in_s_expected_alerts_from_its_file() -> None:
    documented = documented_drills()
    for name, alerts in builtin_expected_alerts().items():
        assert documented.get(name) == {(a.alert, a.severity) for a in alerts}, name


def test_each_expected_alert_is_a_rule_with_that_severity() -> None:
    rules = yaml.safe_load(RULES.read_text())
    defined = {
        (rule["alert"], rule["labels"]["severity"])
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    for name, alerts in builtin_expected_alerts().items():
        for expected in alerts:
            assert (expected.alert, expected.severity) in defined, (name, expected)
