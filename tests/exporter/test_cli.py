"""The CLI: bad flags, variables, scenarios and addresses exit 2 with one line naming them."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
from pathlib import Path

import pytest

from mirrorwatch.exporter.cli import build_parser, load_settings, main
from mirrorwatch.exporter.settings import Settings
from mirrorwatch.exporter.simulate.scenario import builtin_scenarios, load_scenario
from tests.exporter.exporter_process import EXPORTER


def fail(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("mirrorwatch-exporter: error: ")
    return err.removeprefix("mirrorwatch-exporter: error: ").strip()


def test_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(["--bogus"], capsys) == "unrecognized arguments: --bogus"


def test_gpu_count_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--gpus", "65"], capsys)
    assert message == "--gpus: must be at most 64, got 65"


def test_gpu_count_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(["--gpus", "two"], capsys) == "argument --gpus: expected a whole number, got 'two'"


def test_gpus_without_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(["--gpus", "4"], capsys).startswith("--gpus: only applies with --simulate")


def test_bad_listen_address(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--listen", "localhost"], capsys)
    assert message == "--listen: expected HOST:PORT such as 127.0.0.1:9090, got 'localhost'"


def test_a_port_out_of_range_is_said_to_be(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--listen", "127.0.0.1:99999"], capsys)
    assert message == "--listen: port 99999 is out of range 1..65535 in '127.0.0.1:99999'"


def test_bad_environment_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORWATCH_EXPECTED_GPUS", "lots")
    message = fail(["--simulate", "healthy"], capsys)
    assert message == "MIRRORWATCH_EXPECTED_GPUS: expected a whole number, got 'lots'"


def test_a_variable_out_of_range_or_choices_says_the_bound(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORWATCH_GPUS", "99")
    assert (
        fail(["--simulate", "healthy"], capsys) == "MIRRORWATCH_GPUS: must be at most 64, got '99'"
    )
    monkeypatch.delenv("MIRRORWATCH_GPUS")
    monkeypatch.setenv("MIRRORWATCH_LOG_LEVEL", "loud")
    message = fail(["--simulate", "healthy"], capsys)
    assert message == (
        "MIRRORWATCH_LOG_LEVEL: expected one of 'debug', 'info', 'warning' or 'error', got 'loud'"
    )


def test_unknown_collector(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--collectors", "power,vibes"], capsys)
    assert message.startswith("--collectors: unknown collector 'vibes'; known: all, device,")


def test_an_unknown_collector_in_the_environment_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORWATCH_COLLECTORS", "power,vibes")
    message = fail(["--simulate", "healthy"], capsys)
    assert message.startswith("MIRRORWATCH_COLLECTORS: unknown collector 'vibes'")


def test_unknown_scenario_names_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "no-such-scenario"], capsys)
    assert "no-such-scenario" in message
    assert "healthy" in message


def test_bad_scenario_file_names_the_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = tmp_path / "broken.yaml"
    scenario.write_text("gpus:\n  count: many\n")
    message = fail(["--simulate", str(scenario)], capsys)
    assert str(scenario) in message
    assert "gpus.count" in message


def test_port_in_use_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        message = fail(["--simulate", "healthy", "--listen", f"127.0.0.1:{port}"], capsys)
    assert message == f"--listen 127.0.0.1:{port}: Address already in use"


def test_list_scenarios_prints_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--list-scenarios"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    named = {line.split()[0] for line in out.splitlines() if not line.startswith(" ")}
    assert named == set(builtin_scenarios())
    # Each with what it simulates, from its own file.
    first_words = " ".join(load_scenario("imbalance").description.split()[:4])
    assert re.search(r"^imbalance +" + re.escape(first_words), out, re.MULTILINE)
    assert max(len(line) for line in out.splitlines()) <= 100


def test_console_script_exits_2_without_a_traceback() -> None:
    result = subprocess.run(
        [EXPORTER, "--simulate", "healthy", "--gpus", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("mirrorwatch-exporter: error: --gpus:")


def test_every_setting_but_the_secret_is_a_flag_with_its_description() -> None:
    actions = {action.dest: action for action in build_parser()._actions}
    for name, field in Settings.model_fields.items():
        if name == "ingest_token":
            assert actions[f"refused_{name}"].help == argparse.SUPPRESS
            continue
        action = actions[name]
        assert action.option_strings == ["--" + name.replace("_", "-")]
        assert action.default is None  # unset flags leave the variables and defaults alone
        assert action.help is not None
        assert action.help.startswith(str(field.description))
        assert action.help.endswith(f"$MIRRORWATCH_{name.upper()})")


def test_the_flags_are_the_documented_ones() -> None:
    flags = {option for action in build_parser()._actions for option in action.option_strings}
    assert flags == {
        "-h",
        "--help",
        "--version",
        "--listen",
        "--simulate",
        "--gpus",
        "--expected-gpus",
        "--collectors",
        "--top-processes",
        "--nvml-retry-max-seconds",
        "--ingest-token-file",
        "--ingest-token",
        "--run-ttl",
        "--max-runs",
        "--max-workers-per-run",
        "--max-workers",
        "--max-replicas",
        "--trusted-proxies",
        "--max-header-bytes",
        "--header-timeout",
        "--body-timeout",
        "--web-config-file",
        "--log-level",
        "--log-format",
        "--list-scenarios",
    }


def test_typed_flags_convert_and_choices_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["--nvml-retry-max-seconds", "2.5", "--max-runs", "3"])
    assert (args.nvml_retry_max_seconds, args.max_runs) == (2.5, 3)
    message = fail(["--log-level", "loud"], capsys)
    assert message.startswith("argument --log-level: invalid choice: 'loud'")


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRRORWATCH_EXPECTED_GPUS", "4")
    monkeypatch.setenv("MIRRORWATCH_MAX_RUNS", "5")
    settings = load_settings(build_parser().parse_args(["--expected-gpus", "8"]))
    assert (settings.expected_gpus, settings.max_runs) == (8, 5)


def test_the_readme_documents_every_flag_and_variable() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### The exporter", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    for name, field in Settings.model_fields.items():
        variable = f"`MIRRORWATCH_{name.upper()}`"
        secret = "SecretStr" in str(field.annotation)
        flag = "(variable only)" if secret else "`--" + name.replace("_", "-")
        row = next((line for line in rows if variable in line), "")
        assert row.startswith(f"| {flag}"), name
