"""Runs mirrorwatch-doctor as users do: in-process through main(), or as its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from mirrorwatch.doctor.cli import main

DOCTOR = os.path.join(os.path.dirname(sys.executable), "mirrorwatch-doctor")


def doctor_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """main() with --json: the exit code and the document it printed."""
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def doctor_process(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCTOR, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def by_id(document: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    return [c for c in document["checks"] if c["id"] == check_id]
