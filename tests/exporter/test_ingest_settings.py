"""Ingest settings on the command line: the token file, TTL and limits; bad values exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorwatch.exporter.cli import build_parser, load_settings, main
from mirrorwatch.exporter.ingest.store import Limits


def fail(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--simulate", "healthy", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.removeprefix("mirrorwatch-exporter: error: ").strip()


def test_a_missing_token_file_flag_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    message = fail(["--ingest-token-file", "/nonexistent/token"], capsys)
    assert message == (
        "--ingest-token-file: cannot read token file /nonexistent/token: No such file or directory"
    )


def test_a_missing_token_file_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORWATCH_INGEST_TOKEN_FILE", "/nonexistent/token")
    message = fail([], capsys)
    assert message.startswith("MIRRORWATCH_INGEST_TOKEN_FILE: cannot read token")


def test_an_empty_token_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    assert fail(["--ingest-token-file", str(token_file)], capsys).endswith("is empty")


def test_a_token_and_a_token_file_together_are_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    monkeypatch.setenv("MIRRORWATCH_INGEST_TOKEN", "from-env")
    message = fail(["--ingest-token-file", str(token_file)], capsys)
    assert message.startswith("--ingest-token-file: set MIRRORWATCH_INGEST_TOKEN")


def test_the_token_file_is_read_stripped(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  from-file\n")
    settings = load_settings(build_parser().parse_args(["--ingest-token-file", str(token_file)]))
    assert settings.ingest_token_value() == "from-file"


def test_the_token_itself_is_never_a_flag_and_never_echoed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    message = fail(["--ingest-token", "hunter2"], capsys)
    assert message.startswith("--ingest-token: a token on the command line shows in `ps`")
    assert "hunter2" not in message


def test_the_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRRORWATCH_INGEST_TOKEN", "from-env")
    assert load_settings(build_parser().parse_args([])).ingest_token_value() == "from-env"


def test_ttl_and_limits_map_onto_settings() -> None:
    args = ["--run-ttl", "30", "--max-runs", "2", "--max-workers-per-run", "3"]
    args += ["--max-workers", "8", "--max-replicas", "16"]
    limits = Limits.from_settings(load_settings(build_parser().parse_args(args)))
    assert limits == Limits(
        max_runs=2, max_workers_per_run=3, max_workers=8, max_replicas=16, ttl_seconds=30.0
    )


def test_the_default_limits_are_sized_for_one_host() -> None:
    # docs/api.md "Limits" gives the reasons: a host of up to 16 GPUs, one worker process per
    # GPU, a few runs at once and the finished ones lingering one TTL.
    settings = load_settings(build_parser().parse_args([]))
    assert Limits.from_settings(settings) == Limits(
        max_runs=16, max_workers_per_run=16, max_workers=64, max_replicas=16, ttl_seconds=300.0
    )
    assert settings.ingest_token_value() is None


def test_a_cluster_sized_setting_is_possible_by_flag() -> None:
    args = ["--max-runs", "64", "--max-workers-per-run", "1024", "--max-workers", "1024"]
    settings = load_settings(build_parser().parse_args([*args, "--max-replicas", "64"]))
    assert (settings.max_workers_per_run, settings.max_workers, settings.max_replicas) == (
        1024,
        1024,
        64,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--run-ttl", "0"], "--run-ttl: must be more than 0.0, got 0.0"),
        (["--max-runs", "0"], "--max-runs: must be at least 1, got 0"),
        (["--max-replicas", "5000"], "--max-replicas: must be at most 4096, got 5000"),
        (["--max-workers", "many"], "argument --max-workers: expected a whole number, got 'many'"),
        (
            ["--max-workers-per-run", "0"],
            "--max-workers-per-run: must be at least 1, got 0",
        ),
    ],
)
def test_bad_ttl_and_limits_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert fail(args, capsys).startswith(expected)


def test_empty_token_variables_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRRORWATCH_INGEST_TOKEN", "")
    monkeypatch.setenv("MIRRORWATCH_INGEST_TOKEN_FILE", "")
    assert load_settings(build_parser().parse_args([])).ingest_token_value() is None
