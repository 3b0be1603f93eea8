"""Import benchmark: what `from mirrorwatch.torch import MirrorwatchMonitor` adds to a rank start.

Each round is a fresh interpreter that imports torch first, then times the monitor's import
with ``perf_counter`` (target <= 0.3 s beyond torch, issue 32) and lists the modules it added.
Beside it, the same for the ingest's pydantic schema (mirrorwatch.exporter.ingest.schema):
what every rank loaded before the clients built their snapshots from the contract's plain
dataclasses, so the saving reads on one machine in one run. Rounds alternate between the two;
the load average before and after goes with the machine (this machine is shared).

    python bench/import_bench.py --out bench/results/import.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine

TARGETS = {"monitor_import_seconds_p50": 0.3}
IMPORTS = {
    "monitor": "from mirrorwatch.torch import MirrorwatchMonitor",
    "ingest_schema_before": "from mirrorwatch.exporter.ingest import schema",
}
ROUND = """
import json, sys, time
import torch
before = set(sys.modules)
started = time.perf_counter()
{statement}
seconds = time.perf_counter() - started
print(json.dumps({{"seconds": seconds, "modules": sorted(set(sys.modules) - before)}}))
"""


def one_round(statement: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", ROUND.format(statement=statement)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50": round(statistics.median(ordered), 4),
        "p90": round(ordered[int(len(ordered) * 0.9)], 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
        "rounds": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench/results/import.json"))
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    import torch

    loads: dict[str, list[float]] = {"before": [round(x, 2) for x in os.getloadavg()]}
    one_round("pass")  # the first interpreter of a run reads torch from a cold page cache
    seconds: dict[str, list[float]] = {name: [] for name in IMPORTS}
    modules: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, statement in IMPORTS.items():
            found = one_round(statement)
            seconds[name].append(found["seconds"])
            modules[name] = found["modules"]
    loads["after"] = [round(x, 2) for x in os.getloadavg()]
    results = {name: summary(values) for name, values in seconds.items()}
    monitor = modules["monitor"]
    result = {
        "benchmark": "import",
        "machine": {**machine(), "torch": torch.__version__},
        "load_average_1_5_15_min": loads,
        "setup": "fresh interpreter per round; `import torch` first, then the import timed",
        "targets": TARGETS,
        "import_seconds_beyond_torch": results,
        "monitor_loads": {
            "mirrorwatch": [m for m in monitor if m.startswith("mirrorwatch")],
            "others": sorted({m.partition(".")[0] for m in monitor} - {"mirrorwatch"}),
            "count": len(monitor),
        },
        "ingest_schema_loads_count": len(modules["ingest_schema_before"]),
        "met": {
            "monitor_import_seconds_p50": results["monitor"]["p50"]
            <= TARGETS["monitor_import_seconds_p50"]
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'import beyond torch':<52}{'p50 s':>9}{'p90 s':>9}{'target':>9}")
    for name, statement in IMPORTS.items():
        target = "<= 0.3" if name == "monitor" else ""
        print(f"{statement:<52}{results[name]['p50']:>9}{results[name]['p90']:>9}{target:>9}")
    print(f"the monitor's import loads {len(monitor)} modules: {result['monitor_loads']}")
    print(f"load average (1, 5, 15 min): before {loads['before']}, after {loads['after']}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
