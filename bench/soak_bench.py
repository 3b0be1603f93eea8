"""Soak benchmark: the real exporter under scrapes, pushes and hostile requests for minutes.

Each second: one scrape, 40 pushes from 4 workers, four hostile requests (a 1 MiB header, an
unauthenticated 1 MiB body, a 20,000-key body, garbage bytes) and one head that never
completes. Reported: the exporter's RSS after the warm-up and at the end, and what was sent.

    python bench/soak_bench.py --seconds 300 --out bench/results/soak.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from tests.exporter.exporter_process import running_exporter
from tests.exporter.soak import TOKEN, soak

MIB = 1024 * 1024
RSS_GROWTH_BOUND_BYTES = 16 * MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/soak.json"))
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    exporter_args = ["--simulate", "healthy", "--log-level", "warning"]
    with running_exporter(exporter_args, env) as exporter:
        result = soak(exporter, args.seconds, args.warmup)
    met = not result.failures and result.rss_growth_bytes < RSS_GROWTH_BOUND_BYTES
    report = {
        "benchmark": "soak: scrapes every second, pushes from 4 workers, hostile requests, "
        "real exporter process (simulated 'healthy' host, token)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "scrapes": result.scrapes,
        "pushes": result.pushes,
        "hostile_requests": result.hostile,
        "hostile_statuses": result.statuses,
        "failures": result.failures[:20],
        "rss_after_warmup_mib": round(result.rss_after_warmup_bytes / MIB, 2),
        "rss_end_mib": round(result.rss_end_bytes / MIB, 2),
        "rss_growth_mib": round(result.rss_growth_bytes / MIB, 2),
        "rss_growth_bound_mib": RSS_GROWTH_BOUND_BYTES / MIB,
        "met": met,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{result.scrapes} scrapes, {result.pushes} pushes, {result.hostile} hostile "
        f"{result.statuses}; RSS {report['rss_after_warmup_mib']} -> {report['rss_end_mib']} MiB "
        f"(bound +{report['rss_growth_bound_mib']:g}): {'met' if met else 'NOT met'}"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
