"""Golden expositions: the simulated thermal-throttle host at a fixed clock, and a scrape of
every family the exporter serves (every-family.prom), byte for byte.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/exporter/test_golden.py`
and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.simulate.backend import SimulatedBackend
from mirrorwatch.exporter.simulate.scenario import load_scenario
from tests.exporter import every_family

GOLDEN = Path(__file__).parent / "golden"


def exposition(scenario: str, at_seconds: float) -> str:
    backend = SimulatedBackend(load_scenario(scenario), clock=lambda: at_seconds)
    backend.start()
    try:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            GpuMetrics(
                backend, ExporterInfo(version="golden", run_ttl_seconds=300, expected_gpus=2)
            )
        )
        text = generate_latest(registry).decode()
    finally:
        backend.shutdown()
    # Durations are wall-clock timings, the one thing a fixed clock cannot fix.
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if not line.startswith("mirrorwatch_exporter_collector_duration_seconds{")
    )


@pytest.mark.parametrize(("scenario", "at_seconds"), [("thermal-throttle", 120.0)])
def test_exposition_matches_the_golden_file(scenario: str, at_seconds: float) -> None:
    golden = GOLDEN / f"{scenario}-{int(at_seconds)}s.prom"
    text = exposition(scenario, at_seconds)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_the_same_clock_gives_the_same_exposition() -> None:
    assert exposition("imbalance", 300.0) == exposition("imbalance", 300.0)


def test_a_scrape_of_every_family_matches_its_golden_file() -> None:
    """Every family the exporter can serve, GPU, MIG, processes, training and ingest alike
    (tests/exporter/every_family.py): the exposition the series-name checks read."""
    golden = GOLDEN / "every-family.prom"
    text = every_family.exposition()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()
