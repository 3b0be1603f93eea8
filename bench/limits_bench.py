"""Limits benchmark: the worst /metrics one token holder can cause, at the default ingest limits.

The real exporter runs as its own process (a simulated host of 8 Hopper-class GPUs, with GPM
and process lists: the 'foreign-process' scenario; bearer token).
A client that misbehaves (a retry loop with fresh run ids, a launcher bug) fills every limit
the way that costs the scrape most: as many runs as allowed, 64-character run ids, worker
indexes of four digits, every replica the limit allows on a GPU of this host (so each gets its
`replica_info` row and both memory series), every optional field set, 128-character model and
strategy names, and a pid so the run's GPUs get foreign-process series. One push more of each
kind is then checked to be refused with 429. Measured before the fill, after it, with every
worker pushing again before each scrape (so each worker's lines are written afresh: the
costliest scrape), and with a second client pushing every worker over and over during the
scrapes (pushes arriving mid-scrape must not stall it; their own latency is recorded too):
/metrics bytes (plain text, and gzip as Prometheus asks), series, scrape wall time (client
side, over loopback) with Prometheus's headers and plain, the exporter's CPU per scrape, and
its RSS. The load average before and after goes with the machine: on a shared machine the
wall times include waiting for a core, and the CPU per scrape is the steadier number.

Two settings run: the defaults (judged: the scrape under 0.5 s and 2 MB) and a cluster-sized
one, raised by flag to the limits the contract first had (recorded for docs/api.md).

    python bench/limits_bench.py --out bench/results/limits.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.peers_bench import PLAIN_HEADERS, PROMETHEUS_HEADERS
from mirrorwatch.contract.procfs import INIT_PID_NAMESPACE
from mirrorwatch.contract.snapshot import STEP_DURATION_BUCKETS
from mirrorwatch.exporter.settings import Settings
from tests.exporter.exporter_process import running_exporter

TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GPUS = 8
# GPM series and process lists on every GPU: the most GPU series, and foreign-process series
# for every GPU of every run.
SCENARIO = "foreign-process"
TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {"scrape_seconds_max": 0.5, "scrape_bytes": 2_000_000}
MODES = {"prometheus": PROMETHEUS_HEADERS, "plain": PLAIN_HEADERS}
LONGEST_RUN = 64  # vocabulary.RUN_RULE
LONGEST_TEXT = 128  # schema.ShortText
LONGEST_DEVICE = 256  # schema.Replica.device


@dataclass(frozen=True)
class Setting:
    """The four ingest limits, as the exporter's flags set them."""

    name: str
    max_runs: int
    max_workers_per_run: int
    max_workers: int
    max_replicas: int

    def args(self) -> list[str]:
        return [
            *("--max-runs", str(self.max_runs)),
            *("--max-workers-per-run", str(self.max_workers_per_run)),
            *("--max-workers", str(self.max_workers)),
            *("--max-replicas", str(self.max_replicas)),
        ]


def default_setting() -> Setting:
    defaults = Settings()
    return Setting(
        "default",
        defaults.max_runs,
        defaults.max_workers_per_run,
        defaults.max_workers,
        defaults.max_replicas,
    )


# The limits the contract first had, per-run limit as large as the total: one exporter for a
# cluster's workers.
CLUSTER = Setting("cluster", 64, 1024, 1024, 64)


def run_id(index: int) -> str:
    return f"run-{index:04d}-".ljust(LONGEST_RUN, "x")


def snapshot(replicas: int, uuids: list[str], sequence: int = 1) -> dict[str, Any]:
    """A push with everything a worker may say, each replica on a GPU of this host."""
    steps = 1000 * sequence
    return {
        "schema": 1,
        "session": "s".ljust(LONGEST_RUN, "x"),
        "sequence": sequence,
        "model": "m" * LONGEST_TEXT,
        "strategy": "s" * LONGEST_TEXT,
        "replicas": replicas,
        "global_batch_size": 2**31,
        "steps_total": steps,
        "examples_total": steps * 2**31,
        "step_duration_seconds": {
            "bucket_counts": [steps] * len(STEP_DURATION_BUCKETS),
            "count": steps,
            "sum_seconds": 123456.789012,
        },
        "examples_per_second": 12345.678901,
        "epoch": 2**31,
        "loss": 0.123456789012345,
        "replica_devices": [
            {
                "replica": replica,
                "device": f"/job:worker/replica:0/task:0/device:GPU:{replica}".ljust(
                    LONGEST_DEVICE, "x"
                ),
                "uuid": uuids[replica % len(uuids)],
                "memory_current_bytes": 81_234_567_890.0,
                "memory_peak_bytes": 85_234_567_890.0,
            }
            for replica in range(replicas)
        ],
        "scaling": {
            "speedup": 1.61234567,
            "efficiency_ratio": 0.80617283,
            "baseline_examples_per_second": 1000.123456,
            "examples_per_second": 1612.345678,
        },
        "telemetry_dropped_total": 12345,
        "pid": 1,
        "pid_namespace": INIT_PID_NAMESPACE,
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (/proc/loadavg)."""
    return [float(part) for part in Path("/proc/loadavg").read_text().split()[:3]]


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def memory_mib(pid: int) -> dict[str, float]:
    """Resident memory now and at its peak (VmRSS, VmHWM)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": fields["VmRSS"], "peak_rss_mib": fields["VmHWM"]}


def series(text: str) -> dict[str, int]:
    """Samples in a scrape: all, and the training ones (training_* and the run's GPU series)."""
    total = training = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            total += 1
            training += "run" in sample.labels
    return {"series": total, "training_series": training}


def scrape(
    client: httpx.Client,
    url: str,
    pid: int,
    scrapes: int,
    before: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Scrape ``scrapes`` times in each mode, calling ``before`` (untimed) before each; wall
    times client side, CPU of the exporter during the scrape.

    On a shared machine the wall time includes waiting for a core; the exporter's CPU time
    per scrape is the steadier number.
    """
    plain = client.get(url + "/metrics", headers=PLAIN_HEADERS)
    plain.raise_for_status()
    result: dict[str, Any] = {"bytes": len(plain.content), **series(plain.text)}
    for mode, headers in MODES.items():
        for _ in range(2):  # warm up
            client.get(url + "/metrics", headers=headers).raise_for_status()
        seconds = []
        cpu = 0.0
        for _ in range(scrapes):
            before()
            cpu_before = process_cpu_seconds(pid)
            started = time.perf_counter()
            response = client.get(url + "/metrics", headers=headers)
            seconds.append(time.perf_counter() - started)
            cpu += (process_cpu_seconds(pid) - cpu_before) / scrapes
            response.raise_for_status()
        result[mode] = {
            "content_type": response.headers["content-type"],
            "content_encoding": response.headers.get("content-encoding", "identity"),
            "wire_bytes": int(response.headers["content-length"]),
            "scrape_seconds_p50": round(statistics.median(seconds), 4),
            "scrape_seconds_max": round(max(seconds), 4),
            "cpu_seconds_per_scrape": round(cpu, 4),
        }
    return result


def worker_paths(setting: Setting) -> list[str]:
    """Every worker the limits allow, spread over as many runs as they allow."""
    runs = min(setting.max_runs, setting.max_workers)
    per_run = min(setting.max_workers_per_run, math.ceil(setting.max_workers / runs))
    paths = []
    for index in range(setting.max_workers):
        run, position = divmod(index, per_run)
        worker = 1023 - position  # four digits, as a large cluster's indexes are
        paths.append(f"/api/v1/runs/{run_id(run)}/workers/{worker}")
    return paths


class Pushes:
    """Every worker pushing again, with the next sequence: the scrape after it builds every
    worker's samples afresh (the costliest scrape, as when all workers push between two)."""

    def __init__(self, client: httpx.Client, url: str, setting: Setting, uuids: list[str]):
        self.client, self.url, self.setting, self.uuids = client, url, setting, uuids
        self.paths = worker_paths(setting)
        self.sequence = 1

    def __call__(self) -> None:
        self.sequence += 1
        body = json.dumps(snapshot(self.setting.max_replicas, self.uuids, self.sequence))
        headers = {**AUTH, "Content-Type": "application/json"}
        for path in self.paths:
            response = self.client.put(self.url + path, content=body.encode(), headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"push to {path} answered {response.text}")


class PushesDuring:
    """While open, a second client repeats ``pushes`` (every worker, next sequence) without
    pause: each scrape meets pushes arriving while it runs. Records each push's latency."""

    def __init__(self, pushes: Pushes) -> None:
        self.pushes = pushes
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._failure: BaseException | None = None

    def _run(self) -> None:
        shared = self.pushes
        with httpx.Client(timeout=300) as client:
            pushes = Pushes(client, shared.url, shared.setting, shared.uuids)
            pushes.sequence = shared.sequence
            try:
                while not self._stop.is_set():
                    started = time.perf_counter()
                    pushes()
                    self.latencies.append((time.perf_counter() - started) / len(pushes.paths))
            except BaseException as failure:  # reported by __exit__, in the caller's thread
                self._failure = failure
            finally:
                shared.sequence = pushes.sequence  # later pushes carry on after these

    def __enter__(self) -> PushesDuring:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._failure is not None:
            raise RuntimeError("a push during the scrapes failed") from self._failure

    def summary(self) -> dict[str, Any]:
        """Mean push latency of each round of pushes (every worker once)."""
        rounds = self.latencies
        return {
            "push_rounds": len(rounds),
            "push_seconds_mean_p50": round(statistics.median(rounds), 5),
            "push_seconds_mean_max": round(max(rounds), 5),
        }


def fill(client: httpx.Client, url: str, setting: Setting, uuids: list[str]) -> dict[str, Any]:
    """Push workers until every limit is reached, then check one more of each is refused."""
    runs = min(setting.max_runs, setting.max_workers)
    per_run = min(setting.max_workers_per_run, math.ceil(setting.max_workers / runs))
    body = json.dumps(snapshot(setting.max_replicas, uuids)).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    pushed = 0
    started = time.perf_counter()
    for path in worker_paths(setting):
        response = client.put(url + path, content=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"push {pushed} to {path} answered {response.text}")
        pushed += 1
    fill_seconds = time.perf_counter() - started
    over = {
        "one_more_run": client.put(
            f"{url}/api/v1/runs/{run_id(runs)}/workers/0", content=body, headers=headers
        ),
        "one_more_worker": client.put(
            f"{url}/api/v1/runs/{run_id(0)}/workers/0", content=body, headers=headers
        ),
        "one_more_replica": client.put(
            f"{url}/api/v1/runs/{run_id(0)}/workers/1023",
            content=json.dumps(snapshot(setting.max_replicas + 1, uuids)).encode(),
            headers=headers,
        ),
    }
    refusals = {
        name: {"status": r.status_code, "limit": r.json().get("limit")} for name, r in over.items()
    }
    if any(refusal["status"] != 429 for refusal in refusals.values()):
        raise RuntimeError(f"not at the limits: {refusals}")
    return {
        "runs": runs,
        "workers_per_run": per_run,
        "workers": pushed,
        "replicas_per_worker": setting.max_replicas,
        "snapshot_bytes": len(body),
        "fill_seconds": round(fill_seconds, 2),
        "one_more_refused": refusals,
    }


def measure(setting: Setting, scrapes: int) -> dict[str, Any]:
    args = ["--simulate", SCENARIO, "--gpus", str(GPUS), "--log-level", "error", *setting.args()]
    env = {"MIRRORWATCH_INGEST_TOKEN": TOKEN}
    with (
        running_exporter(args, env, wait_for="/readyz") as exporter,
        httpx.Client(timeout=300) as client,  # a cluster-sized scrape takes tens of seconds
    ):
        pid = exporter.process.pid
        gpus = client.get(exporter.url + "/api/v1/gpus").json()["gpus"]
        uuids = [gpu["uuid"] for gpu in gpus]
        empty = {**scrape(client, exporter.url, pid, scrapes), **memory_mib(pid)}
        filled = fill(client, exporter.url, setting, uuids)
        full = {**scrape(client, exporter.url, pid, scrapes), **memory_mib(pid)}
        pushes = Pushes(client, exporter.url, setting, uuids)
        pushed = {**scrape(client, exporter.url, pid, scrapes, pushes), **memory_mib(pid)}
        with PushesDuring(pushes) as during:
            meanwhile = {**scrape(client, exporter.url, pid, scrapes), **memory_mib(pid)}
        meanwhile["pushes"] = during.summary()
    return {
        "setting": setting.name,
        "limits": {
            "max_runs": setting.max_runs,
            "max_workers_per_run": setting.max_workers_per_run,
            "max_workers": setting.max_workers,
            "max_replicas": setting.max_replicas,
        },
        "fill": filled,
        "no_training": empty,
        "at_the_limits": full,
        "at_the_limits_all_pushed_since": pushed,
        "at_the_limits_pushes_during": meanwhile,
    }


STATES = (
    "no_training",
    "at_the_limits",
    "at_the_limits_all_pushed_since",
    "at_the_limits_pushes_during",
)


def verdict(row: Mapping[str, Any]) -> dict[str, bool]:
    full = [row[state] for state in STATES[1:]]
    return {
        "scrape_seconds_max": all(
            m[mode]["scrape_seconds_max"] <= TARGETS["scrape_seconds_max"]
            for m in full
            for mode in MODES
        ),
        "scrape_bytes": all(m["bytes"] <= TARGETS["scrape_bytes"] for m in full),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/limits.json"))
    parser.add_argument("--scrapes", type=int, default=20, help="timed scrapes per mode")
    parser.add_argument("--cluster-scrapes", type=int, default=3)
    args = parser.parse_args()
    load_before = load_average()
    default = measure(default_setting(), args.scrapes)
    cluster = measure(CLUSTER, args.cluster_scrapes)
    met = verdict(default)
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    result = {
        "benchmark": "the worst /metrics one token holder can cause, at the ingest limits: "
        f"real exporter process (simulated '{SCENARIO}' host, {GPUS} GPUs, token), loopback HTTP",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {**machine(), **load},
        "modes": MODES,
        "targets_at_the_defaults": TARGETS,
        "met": met,
        "results": [default, cluster],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'setting':>8} {'state':>30} {'series':>7} {'bytes':>9} {'gzip':>8} "
        f"{'prom p50':>8} {'prom max':>8} {'plain max':>9} {'rss MiB':>7}"
    )
    for row in (default, cluster):
        for state in STATES:
            m = row[state]
            print(
                f"{row['setting']:>8} {state:>30} {m['series']:>7} {m['bytes']:>9} "
                f"{m['prometheus']['wire_bytes']:>8} {m['prometheus']['scrape_seconds_p50']:>8} "
                f"{m['prometheus']['scrape_seconds_max']:>8} "
                f"{m['plain']['scrape_seconds_max']:>9} {m['rss_mib']:>7}"
            )
    print(
        "targets at the defaults:",
        ", ".join(f"{k}={'met' if v else 'NOT met'}" for k, v in met.items()),
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
