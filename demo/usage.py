"""Usage errors of the demo's make targets in the words the user typed: the make variables.

`make demo EXPORTER_LISTEN=127.0.0.1:99999` passes ``--exporter=127.0.0.1:99999`` on, but the
user never typed that flag: a mistake is said as ``make demo: EXPORTER_LISTEN: ...``, in one
line, exit 2, never with argparse's usage block.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

# The demo's flags and the make variables that set them (the Makefile's DEMO_ARGS, REPORT_ARGS).
DEMO_VARIABLES: Mapping[str, str] = {
    "--scenario": "SCENARIO",
    "--exporter": "EXPORTER_LISTEN",
    "--prometheus": "PROMETHEUS_LISTEN",
    "--alertmanager": "ALERTMANAGER_LISTEN",
    "--receiver": "RECEIVER_LISTEN",
}
REPORT_VARIABLES: Mapping[str, str] = {
    "--run": "RUN",
    "--since": "SINCE",
    "--out": "REPORT_OUT",
    "--prometheus": "PROMETHEUS_LISTEN",
}


class MakeUsageError(Exception):
    """A bad argument of a make target; str() names the variable (or flag) and says why."""


def variable_words(message: str, variables: Mapping[str, str]) -> str:
    """argparse's ``argument --flag: why`` as ``VARIABLE: why`` for the flags make sets."""
    for flag, variable in variables.items():
        message = message.replace(f"argument {flag}:", f"{variable}:")
    return message


class MakeParser(argparse.ArgumentParser):
    """argparse's parser for a make target: a mistake raises MakeUsageError naming the make
    variable the user typed (flags no variable sets keep their own name)."""

    def __init__(self, *, variables: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variables = variables

    def error(self, message: str) -> NoReturn:
        raise MakeUsageError(variable_words(message, self.variables))


def refuse(prog: str, why: str) -> int:
    """Say a usage error in one line on stderr; the exit code for it (2)."""
    print(f"{prog}: {why}", file=sys.stderr)
    return 2
