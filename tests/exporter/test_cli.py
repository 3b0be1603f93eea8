"""The CLI: bad flags, variables, scenarios and addresses exit 2 with one line naming them."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from mirrorwatch.exporter.cli import main
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
    assert message == "--gpus: Input should be less than or equal to 64"


def test_gpu_count_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(["--gpus", "two"], capsys) == "argument --gpus: invalid int value: 'two'"


def test_gpus_without_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(["--gpus", "4"], capsys).startswith("--gpus: only applies with --simulate")


def test_bad_listen_address(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--listen", "localhost"], capsys)
    assert message == "--listen: Value error, expected HOST:PORT, got 'localhost'"


def test_bad_environment_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORWATCH_EXPECTED_GPUS", "lots")
    message = fail(["--simulate", "healthy"], capsys)
    assert message.startswith("MIRRORWATCH_EXPECTED_GPUS: Input should be a valid integer")


def test_unknown_collector(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--simulate", "healthy", "--collectors", "power,vibes"], capsys)
    assert message.startswith("--collectors: Value error, unknown collector 'vibes'")


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
    assert set(capsys.readouterr().out.split()) >= {
        "healthy",
        "imbalance",
        "thermal-throttle",
        "pcie-degraded",
        "nvlink-errors",
        "xid",
        "gpu-lost",
    }


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
