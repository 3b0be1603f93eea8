"""The Makefile's user-facing targets: `make help` lists each in one line, and `make demo` /
`make report` say a bad variable in the user's words before they install anything."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from demo.stack import REPO
from tests.hang import HANG_SECONDS

MAKEFILE = REPO / "Makefile"


def make(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.fail("GNU make is needed (Debian's make package)", pytrace=False)
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )


def phony_targets() -> list[str]:
    text = MAKEFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    found = re.search(r"^\.PHONY:(.*)$", text, re.MULTILINE)
    assert found is not None
    return found.group(1).split()


def test_make_help_lists_every_target_a_user_runs_in_one_line_each() -> None:
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[1] for line in result.stdout.splitlines()]
    assert len(listed) == len(set(listed)) == len(result.stdout.splitlines())
    for target in ("lint", "typecheck", "pytest", "clean", "demo", "report", "last-report"):
        assert target in listed, target
    # Only the internal steps (checks and installs the others run) are left out.
    unlisted = set(phony_targets()) - set(listed)
    assert unlisted == {"demo-tools", "install", "demo-install", "demo-check", "report-check"}


@pytest.mark.parametrize(
    ("target", "variable", "said"),
    [
        (
            "demo",
            "EXPORTER_LISTEN=127.0.0.1:99999",
            "make demo: EXPORTER_LISTEN: port 99999 is out of range 1..65535 in '127.0.0.1:99999'",
        ),
        ("demo", "SCENARIO=nosuch", "make demo: SCENARIO: unknown scenario 'nosuch': "),
        (
            "report",
            "SINCE=bogus",
            "make report: SINCE: expected a duration such as 30m, 1h or 2d, got 'bogus'",
        ),
    ],
)
def test_a_bad_variable_is_named_as_typed_before_anything_installs(
    target: str, variable: str, said: str
) -> None:
    result = make(target, variable)
    assert result.returncode == 2
    assert result.stderr.startswith(said), result.stderr
    assert "usage:" not in result.stderr
    assert "argument --" not in result.stderr
    # Stopped at the check: no setup step, no pip refresh, no pipeline.
    assert result.stdout == ""
