"""Doctor probe benchmark: what `mirrorwatch-doctor --probe --model M` costs, per model.

Each model's probe runs as a user runs it (``--simulate healthy --probe --model M --json``, a
process of its own, default --probe-seconds), watched by a child of this script so that its
maximum RSS (the doctor's, or its model-timing child's, whichever is larger) is that run's
alone. Recorded: the wall time, the probing time the doctor reports, the RSS, whether the answer
is partial, and the load average before and after (the machine may be shared).

Target: the probing within --probe-seconds (60 s) plus the few seconds a cut step takes to stop.

    python bench/doctor_probe_bench.py --out bench/results/doctor-probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine

DOCTOR = os.path.join(os.path.dirname(sys.executable), "mirrorwatch-doctor")
MODELS = ("cnn", "resnet50")
PROBE_SECONDS = 60.0
STOP_SLACK_SECONDS = 5.0


def child(model: str) -> dict[str, Any]:
    """In a fresh process: one probe, its wall time and the largest RSS among its processes."""
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = subprocess.run(
        [DOCTOR, "--simulate", "healthy", "--probe", "--model", model, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    probed = re.search(r"probed in (\d+) s", result.stderr)
    speedup = json.loads(result.stdout)["expected_speedup"] if result.stdout else None
    return {
        "model": model,
        "exit_code": result.returncode,
        "wall_s": round(wall, 1),
        "probing_s": int(probed.group(1)) if probed else None,
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "progress_lines": sum(1 for x in result.stderr.splitlines() if "mirrorwatch-doctor: " in x),
        "answer": None if speedup is None else speedup["text"],
        "partial": None if speedup is None else speedup["partial"],
        "load_average_before": round(load_before, 1),
        "load_average_after": round(os.getloadavg()[0], 1),
    }


def measured(model: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", model], capture_output=True, text=True, check=True
    )
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench/results/doctor-probe.json"))
    p.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    runs = [measured(model) for model in MODELS]
    limit = PROBE_SECONDS + STOP_SLACK_SECONDS
    result: dict[str, Any] = {
        "benchmark": "doctor-probe",
        "machine": machine(),
        "targets": {"probing_s": limit},
        "runs": runs,
        "met": {
            run["model"]: run["probing_s"] is not None and run["probing_s"] <= limit for run in runs
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'model':<10}{'wall s':>8}{'probing s':>11}{'RSS MiB':>9}{'load':>7}  answer")
    for run in runs:
        print(
            f"{run['model']:<10}{run['wall_s']:>8}{run['probing_s']!s:>11}{run['max_rss_mib']:>9}"
            f"{run['load_average_before']:>7}  {run['answer']}"
        )


if __name__ == "__main__":
    main()
