"""mirrorwatch.alerts.thresholds: the one validated model of thresholds.yml."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorwatch.alerts.thresholds import (
    Thresholds,
    ThresholdsError,
    in_words,
    load_thresholds,
    parse_thresholds,
)
from tests.alerts.tools import CONTRACT_ALERTS, THRESHOLDS, load_yaml


def settings() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(THRESHOLDS)
    return data


def error_of(raw: object) -> str:
    with pytest.raises(ThresholdsError) as caught:
        parse_thresholds(raw)
    return str(caught.value)


def test_the_shipped_file_is_valid() -> None:
    thresholds = load_thresholds()
    assert thresholds.GpuUtilizationImbalance.spread_ratio == 0.05
    assert thresholds.GpuLost.hold == "1m"


def test_there_is_one_section_per_contract_alert() -> None:
    assert Thresholds.alert_names() == CONTRACT_ALERTS


def test_an_unknown_setting_is_rejected_by_name() -> None:
    raw = settings()
    raw["GpuLost"]["treshold"] = 1
    assert "GpuLost.treshold: unknown setting" in error_of(raw)


def test_a_ratio_above_one_is_rejected() -> None:
    raw = settings()
    raw["GpuMemoryNearlyFull"]["used_ratio"] = 95
    assert "GpuMemoryNearlyFull.used_ratio: Input should be less than or equal to 1" in error_of(
        raw
    )


def test_a_missing_alert_section_is_rejected() -> None:
    raw = settings()
    del raw["Watchdog"]
    assert "Watchdog: missing setting" in error_of(raw)


def test_a_bad_duration_is_rejected() -> None:
    raw = settings()
    raw["GpuLost"]["for"] = "5 minutes"
    assert "GpuLost.for: expected a Prometheus duration" in error_of(raw)


@pytest.mark.parametrize("value", [True, "0.5", float("nan")])
def test_a_number_must_be_a_number(value: object) -> None:
    raw = settings()
    raw["GpuPowerCapped"]["throttled_fraction"] = value
    assert "GpuPowerCapped.throttled_fraction" in error_of(raw)


def test_every_problem_is_listed_at_once() -> None:
    raw = settings()
    raw["GpuLost"]["for"] = "soon"
    raw["GpuNvlinkErrors"]["errors_per_10m"] = -1
    message = error_of(raw)
    assert "GpuLost.for" in message
    assert "GpuNvlinkErrors.errors_per_10m" in message


def test_critical_xids_are_sorted_once_each() -> None:
    raw = settings()
    raw["GpuXidError"]["critical_xids"] = [79, 48, 79]
    assert parse_thresholds(raw).GpuXidError.critical_xids == (48, 79)


def test_a_non_mapping_is_rejected() -> None:
    assert "expected a mapping" in error_of(["not", "a", "mapping"])


def test_the_runbook_url_loses_a_trailing_anchor() -> None:
    raw = settings()
    raw["runbook_url"] = "https://wiki.example.org/runbook#"
    assert parse_thresholds(raw).runbook_url == "https://wiki.example.org/runbook"


def test_holds_divided_shortens_every_for_and_nothing_else() -> None:
    thresholds = load_thresholds()
    fast = thresholds.with_holds_divided(30)
    for name in Thresholds.alert_names():
        assert fast.alert(name).hold_seconds == thresholds.alert(name).hold_seconds / 30
    assert fast.GpuMissing.fallback_lookback == thresholds.GpuMissing.fallback_lookback
    assert fast.GpuPowerCapped.hold == "30s"


def test_an_alert_without_a_section_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="GpuOnFire"):
        load_thresholds().alert("GpuOnFire")


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(30, "30 seconds"), (60, "a minute"), (900, "15 minutes"), (3600, "an hour"), (86400, "a day"),
     (90, "90 seconds"), (7200, "2 hours")],
)  # fmt: skip
def test_durations_in_words(seconds: float, words: str) -> None:
    assert in_words(seconds) == words
