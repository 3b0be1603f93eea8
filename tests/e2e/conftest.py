"""Fixtures of the alert drills: the fast rule copy, a work folder, the latency report.

Set MIRRORWATCH_ALERT_LATENCY_OUT=bench/results/alert-latency.json to write the measured times
to alert (docs/alert-latency.md explains them); every run prints them in the summary. The
summary is written by tests/conftest.py from each test's report, so that it also sees the drills
that pytest-xdist's workers ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.e2e.drill import LATENCY_PROPERTY, FastRules, Latency, build_fast_rules


@pytest.fixture(scope="session")
def fast_rules(tmp_path_factory: pytest.TempPathFactory) -> FastRules:
    return build_fast_rules(tmp_path_factory.mktemp("fast-rules"))


@pytest.fixture
def latencies(request: pytest.FixtureRequest) -> Iterator[list[Latency]]:
    """Where a drill records what it measured; carried on the test's report to the summary."""
    measured: list[Latency] = []
    yield measured
    for latency in measured:
        request.node.user_properties.append((LATENCY_PROPERTY, dataclasses.asdict(latency)))
