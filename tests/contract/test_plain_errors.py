"""Every command refuses a bad number in one line, in the words a refused setting gets."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import pytest
from pydantic import BaseModel, Field, ValidationError

from mirrorwatch.contract.plain_errors import above, at_least, plain_message, whole_number
from mirrorwatch.doctor.cli import main as doctor_main
from mirrorwatch.exporter.cli import main as exporter_main
from mirrorwatch.trainer.cli import main as train_main


class _Bounds(BaseModel):
    count: int = Field(ge=1)
    seconds: float = Field(gt=0.0)


def _pydantic_says(field: str, value: object) -> str:
    with pytest.raises(ValidationError) as refused:
        _Bounds.model_validate({"count": 1, "seconds": 1.0, field: value})
    return plain_message(refused.value.errors()[0])


def _flag_says(read: Callable[[str], object], text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        read(text)
    return str(refused.value)


@pytest.mark.parametrize(
    ("read", "text", "field", "value"),
    [
        (at_least(1), "0", "count", 0),
        (at_least(1), "many", "count", "many"),
        (above(0.0), "-1", "seconds", -1.0),
        (above(0.0), "0", "seconds", 0.0),
        (above(0.0), "soon", "seconds", "soon"),
    ],
)
def test_a_flag_is_refused_in_the_words_of_the_same_bound_in_settings(
    read: Callable[[str], object], text: str, field: str, value: object
) -> None:
    assert _flag_says(read, text) == _pydantic_says(field, value)


def test_nan_is_not_above_any_bound() -> None:
    assert _flag_says(above(0.0), "nan") == "must be more than 0.0, got nan"


def test_a_bound_lets_its_own_value_and_above_through() -> None:
    assert at_least(0)("0") == 0
    assert above(0.0)("0.25") == 0.25
    assert whole_number("-3") == -3


def _exporter(argv: Sequence[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        exporter_main(list(argv))
    return int(exited.value.code or 0)


@pytest.mark.parametrize(
    ("command", "argv", "line"),
    [
        (
            doctor_main,
            ["--gpus", "0"],
            "mirrorwatch-doctor: error: argument --gpus: must be at least 1, got 0",
        ),
        (
            doctor_main,
            ["--probe", "--gradient-bytes", "1e6", "--step-seconds", "0"],
            "mirrorwatch-doctor: error: argument --gradient-bytes: expected a whole number, "
            "got '1e6'",
        ),
        (
            train_main,
            ["--steps", "many"],
            "mirrorwatch-train: error: argument --steps: expected a whole number, got 'many'",
        ),
        (
            train_main,
            ["--interval", "-1"],
            "mirrorwatch-train: error: argument --interval: must be more than 0.0, got -1.0",
        ),
        (
            train_main,
            ["--task-index", "0"],
            "mirrorwatch-train: error: --task-index needs --multi-worker",
        ),
        (
            _exporter,
            ["--gpus", "two"],
            "mirrorwatch-exporter: error: argument --gpus: expected a whole number, got 'two'",
        ),
    ],
)
def test_every_command_says_a_bad_flag_in_one_line_and_exits_2(
    command: Callable[[Sequence[str]], int],
    argv: list[str],
    line: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert command(argv) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", line + "\n")
