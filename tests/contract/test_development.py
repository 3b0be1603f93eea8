"""docs/development.md's checklists: every file they name exists, and none names more than six."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "development.md"
# A repository path in backticks: a folder and a file name, `<area>` standing for any one.
PATH = re.compile(r"`((?:[a-z_]+/)+(?:<[a-z]+>|[A-Za-z_.-]+)\.(?:py|yml|yaml|md|json))`")
STEP = re.compile(r"^\d+\. `([^`]+)`", re.M)


def checklists() -> dict[str, list[str]]:
    """Each "## Add a ..." section: the file each numbered step starts with."""
    sections = re.split(r"^## ", DOCUMENT.read_text(encoding="utf-8"), flags=re.M)
    return {
        section.splitlines()[0]: STEP.findall(section)
        for section in sections
        if section.startswith("Add a")
    }


def test_there_is_a_checklist_for_each_kind_of_change() -> None:
    assert set(checklists()) == {
        "Add a metric",
        "Add a collector",
        "Add a cause",
        "Add a scenario",
        "Add a threshold",
    }


@pytest.mark.parametrize(("change", "steps"), checklists().items())
def test_a_checklist_touches_at_most_six_files(change: str, steps: list[str]) -> None:
    assert 0 < len(set(steps)) <= 6, f"{change}: {steps}"


def named_paths() -> list[str]:
    return sorted(set(PATH.findall(DOCUMENT.read_text(encoding="utf-8"))))


def test_the_checklists_name_files() -> None:
    assert len(named_paths()) > 20


@pytest.mark.parametrize("path", named_paths())
def test_every_file_a_checklist_names_exists(path: str) -> None:
    if "<" in path:  # `alerts/rules/<area>.py`: at least one such file
        folder, _, name = path.rpartition("/")
        assert list((ROOT / folder).glob(name.replace("<area>", "*").replace("<name>", "*")))
    else:
        assert (ROOT / path).is_file(), path
