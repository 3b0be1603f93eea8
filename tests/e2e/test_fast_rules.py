"""The drills' rule copy differs from alerts/mirrorwatch.rules.yml in `for:` alone."""

from __future__ import annotations

from typing import Any

from demo.stack import RULES, load_yaml
from mirrorwatch.contract.vocabulary import parse_prometheus_duration
from tests.e2e.drill import FOR_DIVISOR, FastRules


def rules_by_position(path: Any) -> list[dict[str, Any]]:
    return [rule for group in load_yaml(path)["groups"] for rule in group["rules"]]


def test_fast_rules_keep_every_expression_label_and_annotation(fast_rules: FastRules) -> None:
    production = rules_by_position(RULES)
    fast = rules_by_position(fast_rules.rules)
    assert len(fast) == len(production)
    for ours, theirs in zip(fast, production, strict=True):
        assert {k: v for k, v in ours.items() if k != "for"} == {
            k: v for k, v in theirs.items() if k != "for"
        }


def test_fast_rules_divide_every_for_by_the_divisor(fast_rules: FastRules) -> None:
    for ours, theirs in zip(
        rules_by_position(fast_rules.rules), rules_by_position(RULES), strict=True
    ):
        if "alert" in theirs:
            assert (
                parse_prometheus_duration(ours["for"])
                == parse_prometheus_duration(theirs["for"]) / FOR_DIVISOR
            )
