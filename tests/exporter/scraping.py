"""The real Prometheus, scraping given jobs every second, and what it says of its targets."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.ports import free_port

DEADLINE_SECONDS = 60  # for a condition to hold; each test returns as soon as it does


@contextmanager
def prometheus_scraping(tmp: Path, jobs: list[dict[str, Any]]) -> Iterator[str]:
    """The real Prometheus scraping ``jobs`` every second; its URL while it runs."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run `make tools`", pytrace=False)
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}),
        encoding="utf-8",
    )
    with (tmp / "prometheus.log").open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def target_health(prometheus: str, tmp: Path) -> dict[str, tuple[str, str]]:
    """Each job's scrape health and last error, once every job has been scraped."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        try:
            answer = httpx.get(f"{prometheus}/api/v1/targets", timeout=10).json()
            targets = answer["data"]["activeTargets"]
        except (httpx.TransportError, ValueError, KeyError):
            targets = []
        health = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
        if health and all(state != "unknown" for state, _ in health.values()):
            return health
        if time.monotonic() > deadline:
            pytest.fail(f"no scrape in {DEADLINE_SECONDS} s; see {tmp / 'prometheus.log'}")
        time.sleep(0.2)
