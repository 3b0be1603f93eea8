"""Exporter benchmark: /metrics latency, CPU per scrape and RSS for 2, 8 and 16 simulated GPUs.

Each size runs the real exporter process over loopback HTTP. The floor is the same samples
rendered by prometheus_client alone from a prebuilt registry, in this process; targets are read
as ratios within one run, because this machine is shared and noisy.

    python bench/exporter_bench.py --out bench/results/exporter.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from tests.exporter.exporter_process import running_exporter

TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {
    "p99_ms_8_gpus": 10.0,
    "cpu_ms_per_scrape_8_gpus": 2.0,
    "floor_ratio": 2.0,
    "rss_mib": 60,
}


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Prebuilt:
    """A collector that yields families parsed once: rendering cost only, no collection."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def floor_cpu_ms(text: str, renders: int) -> float:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Prebuilt(list(text_string_to_metric_families(text))))
    started = time.process_time()
    for _ in range(renders):
        generate_latest(registry)
    return (time.process_time() - started) / renders * 1000


def measure(gpus: int, scrapes: int) -> dict[str, Any]:
    args = ["--simulate", "healthy", "--gpus", str(gpus), "--log-level", "warning"]
    with running_exporter(args, wait_for="/readyz") as exporter, httpx.Client() as client:
        pid = exporter.process.pid
        for _ in range(20):  # warm up: imports, first-call caches
            text = client.get(exporter.url + "/metrics").text
        latencies = []
        cpu_before = process_cpu_seconds(pid)
        for _ in range(scrapes):
            started = time.perf_counter()
            response = client.get(exporter.url + "/metrics")
            latencies.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
        cpu_ms = (process_cpu_seconds(pid) - cpu_before) / scrapes * 1000
        rss = rss_mib(pid)
        text = response.text
        # The HTTP stack's own cost (uvicorn, FastAPI, the threadpool hop), for context.
        cpu_before = process_cpu_seconds(pid)
        for _ in range(scrapes):
            client.get(exporter.url + "/readyz").raise_for_status()
        http_cpu_ms = (process_cpu_seconds(pid) - cpu_before) / scrapes * 1000
    latencies.sort()
    floor = floor_cpu_ms(text, scrapes)
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {
        "gpus": gpus,
        "samples": samples,
        "bytes": len(text),
        "latency_ms_p50": round(statistics.median(latencies), 3),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1], 3),
        "cpu_ms_per_scrape": round(cpu_ms, 3),
        "http_cpu_ms_per_readyz": round(http_cpu_ms, 3),
        "floor_cpu_ms_per_render": round(floor, 3),
        "floor_ratio": round(cpu_ms / floor, 2),
        "rss_mib": round(rss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/exporter.json"))
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()
    rows = [measure(gpus, args.scrapes) for gpus in (2, 8, 16)]
    eight = rows[1]
    verdict = {
        "p99_ms_8_gpus": eight["latency_ms_p99"] <= TARGETS["p99_ms_8_gpus"],
        "cpu_ms_per_scrape_8_gpus": eight["cpu_ms_per_scrape"]
        <= TARGETS["cpu_ms_per_scrape_8_gpus"],
        "floor_ratio": eight["floor_ratio"] <= TARGETS["floor_ratio"],
        "rss_mib": max(row["rss_mib"] for row in rows) <= TARGETS["rss_mib"],
    }
    result = {
        "benchmark": "exporter /metrics over loopback HTTP, simulated 'healthy' host",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "scrapes_per_size": args.scrapes,
        "targets": TARGETS,
        "met": verdict,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    header = f"{'gpus':>4} {'samples':>7} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>7} "
    print(header + f"{'http ms':>7} {'floor ms':>8} {'ratio':>6} {'rss MiB':>8}")
    for row in rows:
        print(
            f"{row['gpus']:>4} {row['samples']:>7} {row['latency_ms_p50']:>7} "
            f"{row['latency_ms_p99']:>7} {row['cpu_ms_per_scrape']:>7} "
            f"{row['http_cpu_ms_per_readyz']:>7} "
            f"{row['floor_cpu_ms_per_render']:>8} {row['floor_ratio']:>6} {row['rss_mib']:>8}"
        )
    print("targets met:", ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in verdict.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
