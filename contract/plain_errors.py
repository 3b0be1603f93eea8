"""Plain one-line errors for mirrorwatch's commands: a bad flag, number or setting, named.

Every command says a mistake the same way: one line, ``PROG: error: WHAT: SENTENCE``, exit code
2. A number typed as a flag and a setting pydantic refused get the same sentence: pydantic's own
wording ("Value error, ...", "Input should be a valid integer, unable to parse string as an
integer") speaks of the library, not of the flag the user typed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:  # a type only: the training CLI's import loads no pydantic
    from pydantic_core import ErrorDetails

_Number = TypeVar("_Number", int, float)

# pydantic's error types (pydantic_core's ErrorType) and the sentence each becomes; ctx holds
# the bound (ge, le, ...) and `given` the input as typed.
_SENTENCES = {
    "int_parsing": "expected a whole number, got {given}",
    "int_from_float": "expected a whole number, got {given}",
    "float_parsing": "expected a number, got {given}",
    "bool_parsing": "expected true or false, got {given}",
    "greater_than_equal": "must be at least {ge}, got {given}",
    "greater_than": "must be more than {gt}, got {given}",
    "less_than_equal": "must be at most {le}, got {given}",
    "less_than": "must be less than {lt}, got {given}",
    "literal_error": "expected one of {expected}, got {given}",
    "finite_number": "expected a finite number, got {given}",
}


class UsageError(Exception):
    """A bad flag, variable or file: one line that names it, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse's parser whose mistakes raise UsageError, said as the command's own are."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def usage_line(prog: str, error: Exception) -> str:
    """The one line a command prints on stderr before it exits 2: ``error`` names what."""
    return f"{prog}: error: {error}"


def plain_message(error: ErrorDetails) -> str:
    """The sentence for one of ``ValidationError.errors()``."""
    kind = error["type"]
    ctx = dict(error.get("ctx") or {})
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])  # the validator's own sentence, without "Value error, "
    sentence = _SENTENCES.get(kind)
    if sentence is None:
        return error["msg"]
    return sentence.format(given=repr(error.get("input")), **{k: str(v) for k, v in ctx.items()})


def whole_number(text: str) -> int:
    """An argparse type: ``text`` as an int, or the sentence pydantic's int_parsing becomes."""
    return _converted(int, "int_parsing", text)


def number(text: str) -> float:
    """An argparse type: ``text`` as a float, or the sentence of pydantic's float_parsing."""
    return _converted(float, "float_parsing", text)


def _converted(kind: Callable[[str], _Number], error_type: str, text: str) -> _Number:
    try:
        return kind(text)
    except ValueError:
        message = _SENTENCES[error_type].format(given=repr(text))
        raise argparse.ArgumentTypeError(message) from None


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (pydantic's ``ge``)."""

    def whole_number_at_least(text: str) -> int:
        value = whole_number(text)
        if value < minimum:
            message = _SENTENCES["greater_than_equal"].format(ge=minimum, given=repr(value))
            raise argparse.ArgumentTypeError(message)
        return value

    return whole_number_at_least


def above(bound: float) -> Callable[[str], float]:
    """An argparse type: a number more than ``bound`` (pydantic's ``gt``); NaN is not."""

    def number_above(text: str) -> float:
        value = number(text)
        if not value > bound:
            message = _SENTENCES["greater_than"].format(gt=bound, given=repr(value))
            raise argparse.ArgumentTypeError(message)
        return value

    return number_above
