"""Fixtures of the alert drills: the fast rule copy, a work folder, the latency report.

Set MIRRORWATCH_ALERT_LATENCY_OUT=bench/results/alert-latency.json to write the measured times
to alert (docs/alert-latency.md explains them); every run prints them in the summary.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.machine import machine
from tests.e2e.drill import FastRules, Latency, build_fast_rules, write_report

LATENCIES = pytest.StashKey[list[Latency]]()


@pytest.fixture(scope="session")
def fast_rules(tmp_path_factory: pytest.TempPathFactory) -> FastRules:
    return build_fast_rules(tmp_path_factory.mktemp("fast-rules"))


@pytest.fixture
def latencies(request: pytest.FixtureRequest) -> list[Latency]:
    """Where a drill records what it measured; reported once the session ends."""
    return request.config.stash.setdefault(LATENCIES, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    measured = config.stash.get(LATENCIES, [])
    if not measured:
        return
    terminalreporter.section("time to alert (event -> webhook notification)")
    for latency in measured:
        low, high = latency.model_compose
        terminalreporter.write_line(
            f"{latency.case:18} {latency.status:8} {latency.alert:26} {latency.seconds:6.1f} s "
            f"(model {latency.model_test[0]:.0f}-{latency.model_test[1]:.0f} s; at compose "
            f"defaults {low:.0f}-{high:.0f} s)"
        )
    out = os.environ.get("MIRRORWATCH_ALERT_LATENCY_OUT")
    if out:
        write_report(Path(out), measured, machine())
        terminalreporter.write_line(f"written to {out}")
