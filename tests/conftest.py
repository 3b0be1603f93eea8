"""Suite-wide rules: in CI a skipped test is a failure, never a silent pass. And the alert
drills' time-to-alert summary (tests/e2e), gathered from the test reports: under pytest-xdist
the drills run in worker processes and only their reports reach this one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from bench.machine import machine
from tests.e2e.drill import LATENCY_PROPERTY, Latency, write_report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") == "true" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which counts as a failure: {report.longrepr}"
    return None


# The modules that take longest (`pytest --durations`, 2 cores): under pytest-xdist
# (`--dist loadfile --no-loadscope-reorder`, pyproject.toml) each module runs on one worker, in
# this order first, so that no long module starts last and holds up the end of the run.
SLOWEST_FIRST = (
    "tests/stack/test_runtime.py",
    "tests/report/test_report.py",
    "tests/trainer/test_cli.py",
    "tests/e2e/test_healthy.py",
    "tests/fleet/test_loopback.py",
    "tests/e2e/test_thermal.py",
    "tests/trainer/test_callback.py",
    "tests/fleet/test_shared_instance.py",
    "tests/e2e/test_exporter_down.py",
    "tests/trainer/test_gpu_smoke_rehearsal.py",
    "tests/torch_monitor/test_ddp.py",
    "tests/e2e/test_imbalance.py",
    "tests/exporter/test_soak.py",
    "tests/e2e/test_ddp_imbalance.py",
    "tests/e2e/test_foreign_process.py",
    "tests/stack/test_demo_report.py",
    "tests/stack/test_fleet_compose.py",
    "tests/doctor/test_live.py",
    # Timing-sensitive under load: started once the heaviest CPU users above are under way.
    "tests/e2e/test_multi_worker.py",
    "tests/dashboards/test_live.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist only (every worker sorts alike): the slowest modules first, the rest
    in their usual order. A run without workers keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    stale = [path for path in SLOWEST_FIRST if not (config.rootpath / path).is_file()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOWEST_FIRST names no module: {stale}")
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


class LatencySummary:
    """The drills' latencies, read off their teardown reports (the fixture records them then),
    printed once the session ends and written to MIRRORWATCH_ALERT_LATENCY_OUT when set."""

    def __init__(self) -> None:
        self.measured: list[Latency] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, fields in report.user_properties:
            if name == LATENCY_PROPERTY and isinstance(fields, Mapping):
                self.measured.append(Latency.from_fields(fields))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.measured:
            return
        terminalreporter.section("time to alert (event -> webhook notification)")
        for latency in self.measured:
            low, high = latency.model_compose
            terminalreporter.write_line(
                f"{latency.case:18} {latency.status:8} {latency.alert:26} "
                f"{latency.seconds:6.1f} s (model {latency.model_test[0]:.0f}-"
                f"{latency.model_test[1]:.0f} s; at compose defaults {low:.0f}-{high:.0f} s)"
            )
        out = os.environ.get("MIRRORWATCH_ALERT_LATENCY_OUT")
        if out:
            write_report(Path(out), self.measured, machine())
            terminalreporter.write_line(f"written to {out}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the summary is the controller's (or the only) one
        config.pluginmanager.register(LatencySummary(), "mirrorwatch-latency-summary")
