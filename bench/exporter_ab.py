"""Exporter CPU per scrape, this tree against a git ref, side by side on one shared machine.

    python bench/exporter_ab.py --base main --gpus 8 --out bench/results/exporter-ab.json

The ref's exporter package (``git archive`` of exporter/ into a temporary folder, put first on
PYTHONPATH, so ``mirrorwatch.exporter`` comes from it) and this tree's run at once as two
processes, each simulating the same 'healthy' host. Batches of scrapes alternate between them,
in both header modes (bench/peers_bench.py's), the order flipped every round, so the machine's
load falls on both alike; each batch's CPU is read from /proc (10 ms ticks: batches of a few
hundred scrapes). A round's ratio is this tree's CPU per scrape over the ref's; the median
ratio is the result, as absolute figures on a loaded machine are not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.exporter_bench import process_cpu_seconds, rss_mib
from bench.machine import machine
from bench.peers_bench import MODES
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def ref_tree(ref: str) -> Iterator[Path]:
    """A folder holding ``mirrorwatch/exporter`` as of ``ref``."""
    with tempfile.TemporaryDirectory(prefix="exporter-ab-") as folder:
        package = Path(folder) / "mirrorwatch"
        package.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "exporter"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(package)], input=archive, check=True)
        yield Path(folder)


@contextlib.contextmanager
def exporter(gpus: int, pythonpath: Path | None) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = dict(os.environ)
    if pythonpath is not None:  # mirrorwatch is a namespace package: the first portion wins
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, "-m", "mirrorwatch.exporter", "--listen", f"127.0.0.1:{port}"]
    command += ["--simulate", "healthy", "--gpus", str(gpus), "--log-level", "warning"]
    process = subprocess.Popen(command, env=env, cwd=tempfile.gettempdir())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz").status_code == 200:
                    break
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"exporter did not start: {command}")
            time.sleep(0.1)
        yield process, url
    finally:
        process.terminate()
        process.wait(timeout=15)


def batch_cpu_ms(
    client: httpx.Client, pid: int, url: str, headers: dict[str, str], n: int
) -> float:
    before = process_cpu_seconds(pid)
    for _ in range(n):
        client.get(url + "/metrics", headers=headers).raise_for_status()
    return (process_cpu_seconds(pid) - before) / n * 1000


def compare(base: Path, gpus: int, rounds: int, batch: int) -> dict[str, Any]:
    cpu: dict[tuple[str, str], list[float]] = {(t, m): [] for t in ("base", "tree") for m in MODES}
    with (
        exporter(gpus, base) as (base_process, base_url),
        exporter(gpus, None) as (tree_process, tree_url),
        httpx.Client() as client,
    ):
        sides = [("base", base_process.pid, base_url), ("tree", tree_process.pid, tree_url)]
        for _, pid, url in sides:
            for headers in MODES.values():
                batch_cpu_ms(client, pid, url, headers, 20)  # warm up
        load_before = os.getloadavg()
        for number in range(rounds):
            for mode, headers in MODES.items():
                for side, pid, url in sides if number % 2 == 0 else sides[::-1]:
                    cpu[(side, mode)].append(batch_cpu_ms(client, pid, url, headers, batch))
        load_after = os.getloadavg()
        rss = {side: round(rss_mib(pid), 1) for side, pid, _ in sides}
    modes = {}
    for mode in MODES:
        base_ms, tree_ms = cpu[("base", mode)], cpu[("tree", mode)]
        ratios = [tree / base for base, tree in zip(base_ms, tree_ms, strict=True)]
        modes[mode] = {
            "base_cpu_ms_per_scrape_median": round(statistics.median(base_ms), 3),
            "tree_cpu_ms_per_scrape_median": round(statistics.median(tree_ms), 3),
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    return {
        "gpus": gpus,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "rss_mib": rss,
        "modes": modes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git ref to compare against")
    parser.add_argument("--gpus", type=int, nargs="+", default=[8])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=300, help="scrapes per batch")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    # Resolved once, first: a branch may move while the benchmark runs.
    base_commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.base], check=True, capture_output=True, text=True
    ).stdout.strip()
    with ref_tree(base_commit) as base:
        rows = [compare(base, gpus, args.rounds, args.batch) for gpus in args.gpus]
    result = {
        "benchmark": "exporter CPU per scrape, this tree against a git ref, alternating batches",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "base": {"ref": args.base, "commit": base_commit},
        "rounds": args.rounds,
        "scrapes_per_batch": args.batch,
        "results": rows,
    }
    for row in rows:
        for mode, m in row["modes"].items():
            print(
                f"{row['gpus']:>3} GPUs {mode:>10}: base {m['base_cpu_ms_per_scrape_median']} ms, "
                f"tree {m['tree_cpu_ms_per_scrape_median']} ms, ratio {m['ratio_median']} "
                f"({m['ratio_range'][0]}-{m['ratio_range'][1]})"
            )
        print(
            f"    load {row['load_average_before']} -> {row['load_average_after']}, "
            f"RSS MiB {row['rss_mib']}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
