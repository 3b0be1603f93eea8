"""The real exporter process over HTTP on loopback: a simulated host, and a host without NVML."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboards.test_live import prometheus_binary, start_prometheus
from tests.exporter.exporter_process import running_exporter

# Every family of the contract's GPU table, as exposed (counters with _total).
CONTRACT_GPU_METRICS = (
    "mirrorwatch_gpu_info",
    "mirrorwatch_gpu_up",
    "mirrorwatch_gpu_utilization_ratio",
    "mirrorwatch_gpu_memory_utilization_ratio",
    "mirrorwatch_gpu_memory_used_bytes",
    "mirrorwatch_gpu_memory_total_bytes",
    "mirrorwatch_gpu_temperature_celsius",
    "mirrorwatch_gpu_temperature_threshold_celsius",
    "mirrorwatch_gpu_power_watts",
    "mirrorwatch_gpu_power_limit_watts",
    "mirrorwatch_gpu_energy_joules_total",
    "mirrorwatch_gpu_clock_hertz",
    "mirrorwatch_gpu_clock_max_hertz",
    "mirrorwatch_gpu_clocks_event_active",
    "mirrorwatch_gpu_throttle_seconds_total",
    "mirrorwatch_gpu_fan_speed_ratio",
    "mirrorwatch_gpu_pcie_link_generation",
    "mirrorwatch_gpu_pcie_link_generation_max",
    "mirrorwatch_gpu_pcie_link_width",
    "mirrorwatch_gpu_pcie_link_width_max",
    "mirrorwatch_gpu_pcie_transmit_bytes_total",
    "mirrorwatch_gpu_pcie_receive_bytes_total",
    "mirrorwatch_gpu_pcie_replays_total",
    "mirrorwatch_gpu_nvlink_up",
    "mirrorwatch_gpu_nvlink_transmit_bytes_total",
    "mirrorwatch_gpu_nvlink_receive_bytes_total",
    "mirrorwatch_gpu_nvlink_errors_total",
    "mirrorwatch_gpu_ecc_errors_total",
    "mirrorwatch_gpu_xid_errors_total",
    "mirrorwatch_gpu_p2p_link_info",
)
EXPORTER_METRICS = (
    "mirrorwatch_up",
    "mirrorwatch_exporter_build_info",
    "mirrorwatch_exporter_gpus",
    "mirrorwatch_exporter_collector_success",
    "mirrorwatch_exporter_collector_duration_seconds",
)
# uvicorn re-raises SIGTERM after a graceful shutdown, so "killed by SIGTERM" is clean too.
CLEAN_EXIT = (0, -signal.SIGTERM)
NO_NVML = os.path.join(os.path.dirname(__file__), "no_nvml")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package")
    return path


def gpus_per_family(text: str) -> dict[str, set[str]]:
    """Which GPU indices each family has samples for (sample names, so counters end in _total)."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(sample.labels.get("gpu", ""))
    return found


def test_simulated_dual_gpu_host_serves_every_contract_metric_lint_clean() -> None:
    # The xid scenario also fills the XID counter, which a healthy host leaves empty.
    with running_exporter(["--simulate", "xid"], wait_for="/readyz") as exporter:
        text = httpx.get(exporter.url + "/metrics").text
        code, log = exporter.stop()
    families = gpus_per_family(text)
    missing = [name for name in CONTRACT_GPU_METRICS if families.get(name) != {"0", "1"}]
    assert missing == [] or missing == ["mirrorwatch_gpu_xid_errors_total"], missing
    assert "mirrorwatch_gpu_xid_errors_total" in families
    assert [name for name in EXPORTER_METRICS if name not in families] == []
    check = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert (check.returncode, check.stdout + check.stderr) == (0, "")
    assert code in CLEAN_EXIT, log
    assert "Traceback" not in log


def test_the_exporter_logs_where_it_serves_under_its_own_name() -> None:
    with running_exporter(["--simulate", "healthy"], wait_for="/readyz") as exporter:
        exporter.process.send_signal(signal.SIGINT)  # Ctrl-C in a terminal
        _, log = exporter.process.communicate(timeout=30)
    entries = [json.loads(line) for line in log.splitlines()]
    address = exporter.url.removeprefix("http://")
    serving = [entry for entry in entries if entry.get("listen") == address]
    assert [entry["logger"] for entry in serving] == ["mirrorwatch.exporter"]
    assert f"serving {exporter.url}/" in serving[0]["msg"]
    # uvicorn's start and stop chatter at INFO, under its misleading `uvicorn.error` name.
    assert not [e for e in entries if e["logger"] == "uvicorn.error" and e["level"] == "info"]
    assert entries[-1]["msg"].startswith("stopped")
    assert exporter.process.returncode == 130, log  # Ctrl-C, without a traceback
    assert "Traceback" not in log


def test_healthy_scenario_has_no_xid_but_every_other_metric_on_both_gpus() -> None:
    with running_exporter(["--simulate", "healthy", "--gpus", "2"], wait_for="/readyz") as exporter:
        families = gpus_per_family(httpx.get(exporter.url + "/metrics").text)
    missing = [name for name in CONTRACT_GPU_METRICS if families.get(name) != {"0", "1"}]
    assert missing == ["mirrorwatch_gpu_xid_errors_total"]
    assert "mirrorwatch_gpu_xid_last_event_timestamp_seconds" not in families


def test_without_nvml_the_exporter_serves_up_zero_and_readyz_503() -> None:
    env = {"PYTHONPATH": NO_NVML}
    with running_exporter([], env=env) as exporter:
        ready = httpx.get(exporter.url + "/readyz")
        text = httpx.get(exporter.url + "/metrics").text
        health = httpx.get(exporter.url + "/healthz")
        code, log = exporter.stop()
    assert health.status_code == 200
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert "NVML" in ready.json()["reason"]
    assert "mirrorwatch_up 0.0" in text.splitlines()
    assert not [line for line in text.splitlines() if line.startswith("mirrorwatch_gpu_")]
    assert code in CLEAN_EXIT, log


def test_real_prometheus_scrapes_the_negotiated_format_up(tmp_path: Path) -> None:
    # Debian's Prometheus 2.42 asks for OpenMetrics 1.0.0 first and for gzip
    # (tests/exporter/test_negotiation.py), so this is the gzipped OpenMetrics path end to end.
    with ExitStack() as stack:
        exporter = stack.enter_context(
            running_exporter(["--simulate", "healthy", "--gpus", "2"], wait_for="/readyz")
        )
        config = tmp_path / "prometheus.yml"
        target = exporter.url.removeprefix("http://")
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": "mirrorwatch", "static_configs": [{"targets": [target]}]}
                    ],
                }
            ),
            encoding="utf-8",
        )
        prometheus = start_prometheus(prometheus_binary(), tmp_path, config, stack)

        def query(expr: str) -> list[dict[str, object]]:
            body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
            result: list[dict[str, object]] = body.json()["data"]["result"]
            return result

        deadline = time.monotonic() + 30
        while not query('up{job="mirrorwatch"} == 1') or not query("mirrorwatch_gpu_up"):
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.5)
        assert len(query("mirrorwatch_gpu_up == 1")) == 2
        assert query("mirrorwatch_gpu_energy_joules_total")
