"""Label key sets: one home (contract/labels.py); every alert-text lookup carries its whole key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorwatch.contract.labels import TARGET_LABELS
from tests.alerts.tools import ALERTS, alert_rules

# The modules that write rule text, and the annotation pieces they share.
RULE_TEXT_SOURCES = [*sorted((ALERTS / "rules").glob("*.py")), ALERTS / "templates.py"]
# A printf'd selector of an annotation: `metric{a=%q,b=%q}`.
LOOKUP = re.compile(r"\{([^{}`]*%q[^{}`]*)\}")


@pytest.mark.parametrize("path", RULE_TEXT_SOURCES, ids=lambda p: p.name)
def test_no_rule_module_or_template_writes_a_key_set_literally(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "cluster, host" not in text, "write «TARGET_KEY» (or another key) instead"
    assert not re.search(r"\binstance=%q", text), "look up by a key: templates.value_of"


def lookups() -> list[tuple[str, str]]:
    """(alert, the matchers of each lookup) over every annotation of the generated rules."""
    found = []
    for rule in alert_rules():
        for text in rule["annotations"].values():
            found += [(rule["alert"], m) for m in LOOKUP.findall(text)]
    return found


def test_the_generated_rules_look_values_up() -> None:
    assert len(lookups()) > 20


@pytest.mark.parametrize(("alert", "wanted"), lookups())
def test_every_lookup_carries_the_whole_target_key(alert: str, wanted: str) -> None:
    """Only a run's own series (grouped by run alone, over all its hosts) go without it."""
    names = [part.split("=")[0] for part in wanted.split(",")]
    if names == ["run"]:
        return
    assert names[: len(TARGET_LABELS)] == list(TARGET_LABELS), f"{alert}: {{{wanted}}}"
