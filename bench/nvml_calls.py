"""NVML calls per scrape and per idle second, by function, counted by the stand-in NVML.

    python bench/nvml_calls.py --gpus 8 --out bench/results/nvml-calls.json

Runs mirrorwatch-exporter (and nvitop-exporter, for scale, when installed) over
bench/peers/fakenvml with MW_FAKE_COUNT set: the stand-in counts every call per function and
rewrites the counts every 0.5 s. Idle calls are counted over an unscraped window first; the
per-scrape figure is a run of plain scrapes less that idle rate. This is how the calls that
cannot change between scrapes (thresholds, maximum clocks and PCIe link, fan count, supported
clocks-event reasons) were found and taken off the scrape path.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.peers_bench import MIRRORWATCH, NVITOP, PLAIN_HEADERS, Exporter, environment


def read_counts(path: Path, after: float) -> dict[str, int]:
    """The first dump the stand-in wrote after ``after`` (it rewrites it every 0.5 s)."""
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            doc = json.loads(path.read_text())
            if doc["t"] > after:
                return {str(k): int(v) for k, v in doc["counts"].items()}
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"no fresh counts in {path}")


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def count(name: str, command: list[str], gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="nvml-calls-"))
    counts = logs / "counts.json"
    env = environment(gpus)
    env["MW_FAKE_COUNT"] = str(counts)
    exporter = Exporter(name, command, env, logs / f"{name}.log")
    try:
        exporter.wait_ready(gpus, 60 + 2 * gpus)
        for _ in range(5):
            exporter.get(PLAIN_HEADERS)
        exporter.disconnect()
        time.sleep(1)
        t0 = time.time()
        c0 = read_counts(counts, t0)
        time.sleep(args.idle_seconds)
        t1 = time.time()
        c1 = read_counts(counts, t1)
        idle_rate = {k: v / (t1 - t0) for k, v in difference(c0, c1).items()}
        t2 = time.time()
        c2 = read_counts(counts, t2)
        for _ in range(args.scrapes):
            exporter.get(PLAIN_HEADERS)
        t3 = time.time()
        c3 = read_counts(counts, t3)
    finally:
        exporter.stop()
    per_scrape = {
        k: round((v - idle_rate.get(k, 0.0) * (t3 - t2)) / args.scrapes, 2)
        for k, v in difference(c2, c3).items()
    }
    per_scrape = {k: v for k, v in sorted(per_scrape.items()) if v > 0.05}
    return {
        "idle_calls_per_s": round(sum(idle_rate.values()), 2),
        "idle_by_function": {k: round(v, 2) for k, v in sorted(idle_rate.items())},
        "scrape_calls": round(sum(per_scrape.values()), 1),
        "scrape_calls_per_gpu": round(sum(per_scrape.values()) / gpus, 1),
        "scrape_by_function": per_scrape,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/nvml-calls.json"))
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--nvitop", type=Path, default=NVITOP)
    args = parser.parse_args()
    results = {
        "mirrorwatch": count(
            "mirrorwatch",
            [str(MIRRORWATCH), "--listen", "127.0.0.1:{port}", "--log-format", "text"],
            args.gpus,
            args,
        )
    }
    if args.nvitop.exists():
        results["nvitop"] = count(
            "nvitop",
            [str(args.nvitop), "--bind-address", "127.0.0.1", "--port", "{port}"],
            args.gpus,
            args,
        )
    doc = {
        "benchmark": "NVML calls per scrape and per idle second (stand-in NVML counts)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "gpus": args.gpus,
        "scrapes": args.scrapes,
        "idle_seconds": args.idle_seconds,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, r in results.items():
        print(
            f"{name}: {r['scrape_calls']} calls per scrape ({r['scrape_calls_per_gpu']} per GPU),"
            f" {r['idle_calls_per_s']} per idle second"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
