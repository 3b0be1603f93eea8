"""The exporter's resident memory at 32 GPUs on the stand-in NVML: peers_bench's RSS part alone.

    python bench/rss_bench.py --out bench/results/rss.json

The same process, load and reading as bench/peers_bench.py's (it needs no nvitop-exporter):
mirrorwatch-exporter in its real-NVML mode over bench/peers/fakenvml, scraped with each header
mode (warm-up, then the scrapes), left unscraped for the idle period, then VmRSS and VmHWM read
from /proc. Target: RSS <= 60 MiB at 32 GPUs (peers_bench's ``rss_mib_at_32_gpus``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.peers_bench import MIRRORWATCH, MODES, TARGETS, Exporter, environment, idle


def measure(gpus: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    command = [str(MIRRORWATCH), "--listen", "127.0.0.1:{port}", "--log-format", "text"]
    exporter = Exporter("mirrorwatch", command, environment(gpus), logs / f"rss-{gpus}.log")
    try:
        exporter.wait_ready(gpus, 60)
        for headers in MODES.values():
            for _ in range(args.warmup + args.scrapes):
                status, _, _ = exporter.get(headers)
                if status != 200:
                    raise SystemExit(f"HTTP {status}; see {exporter.log}")
        reading: dict[str, Any] = idle([exporter], args.idle_seconds)["mirrorwatch"]
        return reading
    finally:
        exporter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/rss.json"))
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3, help="exporter starts, median reported")
    parser.add_argument("--scrapes", type=int, default=300, help="per mode, as peers_bench")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="rss-bench-"))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    runs = [measure(args.gpus, args, logs) for _ in range(args.runs)]
    rss = statistics.median(run["rss_mib"] for run in runs)
    target = TARGETS["rss_mib_at_32_gpus"]
    result = {
        "benchmark": "mirrorwatch-exporter RSS on the stand-in NVML (peers_bench's RSS part)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            **machine(),
            "load_average_before": load_before,
            "load_average_after": Path("/proc/loadavg").read_text().split()[:3],
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {
            "gpus": args.gpus,
            "scrapes": args.scrapes,
            "warmup": args.warmup,
            "idle_seconds": args.idle_seconds,
            "modes": list(MODES),
        },
        "runs": runs,
        "met": {"rss_mib_at_32_gpus": {"target": target, "median": rss, "met": rss <= target}},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        print(f"rss {run['rss_mib']} MiB, peak {run['rss_peak_mib']} MiB")
    print(f"median {rss} MiB (target <= {target}): {'met' if rss <= target else 'MISSED'}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
