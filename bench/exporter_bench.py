"""Exporter benchmark: /metrics latency, CPU per scrape and RSS for 2, 8 and 16 simulated GPUs.

Each size runs the real exporter process over loopback HTTP, scraped twice over: plain
(``Accept: text/plain``, no gzip) and with the headers Prometheus 2.55 sends (OpenMetrics
preferred, gzip; bench/peers_bench.py cites them). The floor is the same samples rendered by
prometheus_client alone from a prebuilt registry, in this process, in the format the headers
ask for (and gzipped at the exporter's level when they ask for gzip); targets are read as
ratios within one run, because this machine is shared and noisy.

    python bench/exporter_bench.py --out bench/results/exporter.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.peers_bench import MODES, PLAIN_HEADERS, floor_cpu_ms
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


def scrape_mode(
    client: httpx.Client, url: str, pid: int, scrapes: int, mode: str
) -> dict[str, Any]:
    headers = MODES[mode]
    for _ in range(20):  # warm up: imports, first-call caches
        client.get(url + "/metrics", headers=headers).raise_for_status()
    latencies = []
    cpu_before = process_cpu_seconds(pid)
    for _ in range(scrapes):
        started = time.perf_counter()
        response = client.get(url + "/metrics", headers=headers)
        latencies.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    cpu_ms = (process_cpu_seconds(pid) - cpu_before) / scrapes * 1000
    latencies.sort()
    return {
        "content_type": response.headers["content-type"],
        "content_encoding": response.headers.get("content-encoding", "identity"),
        "wire_bytes": len(response.content) if mode == "plain" else None,
        "latency_ms_p50": round(statistics.median(latencies), 3),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1], 3),
        "cpu_ms_per_scrape": round(cpu_ms, 3),
    }


def measure(gpus: int, scrapes: int) -> dict[str, Any]:
    args = ["--simulate", "healthy", "--gpus", str(gpus), "--log-level", "warning"]
    with running_exporter(args, wait_for="/readyz") as exporter, httpx.Client() as client:
        pid = exporter.process.pid
        modes = {mode: scrape_mode(client, exporter.url, pid, scrapes, mode) for mode in MODES}
        text = client.get(exporter.url + "/metrics", headers=PLAIN_HEADERS).text
        rss = rss_mib(pid)
        # The HTTP stack's own cost (uvicorn, FastAPI, the threadpool hop), for context.
        cpu_before = process_cpu_seconds(pid)
        for _ in range(scrapes):
            client.get(exporter.url + "/readyz").raise_for_status()
        http_cpu_ms = (process_cpu_seconds(pid) - cpu_before) / scrapes * 1000
    for mode, row in modes.items():
        floor = floor_cpu_ms(text, mode, scrapes)
        row["floor_cpu_ms_per_render"] = round(floor, 3)
        row["floor_ratio"] = round(row["cpu_ms_per_scrape"] / floor, 2)
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {
        "gpus": gpus,
        "samples": samples,
        "bytes": len(text),
        "http_cpu_ms_per_readyz": round(http_cpu_ms, 3),
        "rss_mib": round(rss, 1),
        "modes": modes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/exporter.json"))
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = [measure(gpus, args.scrapes) for gpus in (2, 8, 16)]
    load_after = os.getloadavg()
    eight = rows[1]["modes"]
    verdict = {
        "p99_ms_8_gpus": all(
            m["latency_ms_p99"] <= TARGETS["p99_ms_8_gpus"] for m in eight.values()
        ),
        "cpu_ms_per_scrape_8_gpus": all(
            m["cpu_ms_per_scrape"] <= TARGETS["cpu_ms_per_scrape_8_gpus"] for m in eight.values()
        ),
        "floor_ratio": all(m["floor_ratio"] <= TARGETS["floor_ratio"] for m in eight.values()),
        "rss_mib": max(row["rss_mib"] for row in rows) <= TARGETS["rss_mib"],
    }
    result = {
        "benchmark": "exporter /metrics over loopback HTTP, simulated 'healthy' host",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "scrapes_per_size": args.scrapes,
        "modes": MODES,
        "targets": TARGETS,
        "met": verdict,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    header = f"{'gpus':>4} {'headers':>10} {'samples':>7} {'p50 ms':>7} {'p99 ms':>7} "
    print(header + f"{'cpu ms':>7} {'http ms':>7} {'floor ms':>8} {'ratio':>6} {'rss MiB':>8}")
    for row in rows:
        for mode, m in row["modes"].items():
            print(
                f"{row['gpus']:>4} {mode:>10} {row['samples']:>7} {m['latency_ms_p50']:>7} "
                f"{m['latency_ms_p99']:>7} {m['cpu_ms_per_scrape']:>7} "
                f"{row['http_cpu_ms_per_readyz']:>7} "
                f"{m['floor_cpu_ms_per_render']:>8} {m['floor_ratio']:>6} {row['rss_mib']:>8}"
            )
    print(f"load average {load_before} -> {load_after}")
    print("targets met:", ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in verdict.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
