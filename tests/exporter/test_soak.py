"""A short soak in every `make test`: 20 s of scrapes, pushes and hostile requests together,
and the exporter's memory stays where the warm-up left it (bench/soak_bench.py runs longer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.exporter.exporter_process import RunningExporter, running_exporter
from tests.exporter.soak import TOKEN, soak

SOAK_SECONDS = 20
RSS_GROWTH_BOUND_BYTES = 10 * 1024 * 1024  # measured: about 0-2 MiB on 2 cores


@pytest.fixture
def exporter() -> Iterator[RunningExporter]:
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    args = ["--simulate", "healthy", "--log-level", "warning", "--header-timeout", "2"]
    with running_exporter(args, env) as exporter:
        yield exporter


def test_memory_stays_flat_under_scrapes_pushes_and_hostile_requests(
    exporter: RunningExporter,
) -> None:
    result = soak(exporter, SOAK_SECONDS)
    assert not result.failures, result.failures[:5]
    assert result.scrapes >= SOAK_SECONDS
    assert set(result.statuses) <= {"400", "401", "413", "431"}, result.statuses
    assert result.rss_growth_bytes < RSS_GROWTH_BOUND_BYTES, (
        result.rss_after_warmup_bytes,
        result.rss_end_bytes,
    )
