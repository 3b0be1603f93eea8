"""What each cache of the exposition writer saves: CPU per scrape with it and with it defeated.

    python bench/writer_bench.py --out bench/results/writer.json

The scrape's own work in this process, without HTTP: GpuMetrics and TrainingMetrics collect,
then OpenMetrics is rendered and gzipped at the exporter's level (what Prometheus's headers
ask for), over the real NVML backend on the stand-in libnvidia-ml (bench/peers/fakenvml, as
bench/peers_bench.py runs it: each GPU count in a child process), at 2, 8 and 32 GPUs, and
with the training families at the default ingest limits (64 workers of 16 replicas). Each
cache is defeated in turn by a patch here, in the bench, never in the exporter:

- ``series``: the GPU series cache (collectors/base.py ``_SERIES``) finds nothing, so every
  sample writes its ``name{labels} `` again;
- ``last_line``: ``Series.line`` formats every value, repeated or not;
- ``static_families``: identity, limits and topology are built on every scrape;
- ``push_lines``: every scrape writes each worker's lines afresh (as if each pushed);
- ``push_series``: every push writes its series afresh, none taken from the previous push
  (measured on the scrape after every worker pushed, the costliest one);
- ``replica_rows``: the replica -> GPU rows are joined on every scrape.

Batches with and without alternate (5 rounds), the thread's CPU clock read around each; the
saving is the median of the rounds' differences, in ms per scrape and as a share of the
scrape with every cache. The retained memory of the GPU caches (tracemalloc, after the
scrapes) goes with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.peers_bench import environment

ROUNDS = 5
Patch = Callable[[], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def patched(owner: object, name: str, value: object) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def gpu_patches() -> dict[str, Patch]:
    from mirrorwatch.exporter.collectors import base
    from mirrorwatch.exporter.exposition import Series, go_float

    class Forgetful(dict[tuple[object, ...], Series]):
        def __setitem__(self, key: tuple[object, ...], value: Series) -> None:
            pass

    def always_format(self: Series, value: float) -> str:
        text = self._last[1]
        return f"{text[: text.rindex(' ') + 1]}{go_float(value)}\n"

    def always_build(self: object, key: object, build: Callable[[], Any]) -> list[Any]:
        return list(build())

    return {
        "series": lambda: patched(base, "_SERIES", Forgetful()),
        "last_line": lambda: patched(Series, "line", always_format),
        "static_families": lambda: patched(base.StaticFamilies, "get", always_build),
    }


def training_patches() -> dict[str, Patch]:
    from mirrorwatch.exporter.collectors.training import TrainingMetrics
    from mirrorwatch.exporter.collectors.worker_lines import WorkerLines

    written = TrainingMetrics._worker_lines
    rows = WorkerLines.replica_info

    def every_scrape(self: TrainingMetrics, views: Any) -> Any:
        stale = {key: _Stale(lines) for key, lines in self._lines.items()}
        self._lines = cast(dict[tuple[str, int], WorkerLines], stale)
        return written(self, views)

    def rejoin(self: WorkerLines, gpus: Any) -> Any:
        self._replica_info = None
        return rows(self, gpus)

    return {
        "push_lines": lambda: patched(TrainingMetrics, "_worker_lines", every_scrape),
        "replica_rows": lambda: patched(WorkerLines, "replica_info", rejoin),
    }


class _Stale:
    """A worker's lines whose entry matches no push: rewritten, its series reused."""

    def __init__(self, lines: Any) -> None:
        self.entry = None
        self._series = lines._series


def child(gpus: int, scrapes: int) -> dict[str, Any]:
    """This process is on the stand-in NVML: measure every cache at ``gpus`` GPUs."""
    from mirrorwatch.exporter.collectors import base
    from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
    from mirrorwatch.exporter.collectors.training import TrainingMetrics
    from mirrorwatch.exporter.exposition import OpenMetricsRenderer
    from mirrorwatch.exporter.ingest.errors import RejectionCounter
    from mirrorwatch.exporter.ingest.schema import TrainingSnapshot
    from mirrorwatch.exporter.ingest.store import Limits, RunStore
    from mirrorwatch.exporter.logs import RejectionLog
    from mirrorwatch.exporter.nvml import NvmlBackend
    from mirrorwatch.exporter.routes.metrics import GZIP_LEVEL
    from mirrorwatch.exporter.settings import Settings
    from tests.exporter.ingest_snapshots import snapshot_body

    backend = NvmlBackend(retry_max_s=1.0)
    backend.start()
    deadline = time.monotonic() + 60
    while not backend.status().up:  # NVML starts in the background
        if time.monotonic() > deadline:
            raise SystemExit(f"the stand-in NVML did not start: {backend.status().reason}")
        time.sleep(0.05)
    renderer = OpenMetricsRenderer()
    gpu = GpuMetrics(backend, ExporterInfo("bench", run_ttl_seconds=300))
    settings = Settings()
    store = RunStore(Limits.from_settings(settings))
    uuids = [device.uuid for device in backend.gpus()]
    for worker in range(settings.max_workers):
        devices = [
            {
                "replica": replica,
                "device": f"/device:GPU:{replica}",
                "uuid": uuids[replica % len(uuids)],
                "memory_current_bytes": 1e9 + replica,
                "memory_peak_bytes": 2e9 + replica,
            }
            for replica in range(settings.max_replicas)
        ]
        body = snapshot_body(replicas=len(devices), replica_devices=devices)
        run = f"run-{worker // settings.max_workers_per_run:02d}"
        store.put(run, worker, TrainingSnapshot.model_validate(body))
    rejections = RejectionCounter(RejectionLog(logging.getLogger("bench")))
    training = TrainingMetrics(store, backend, rejections)

    def scrape(collector: Any) -> Callable[[], None]:
        def once() -> None:
            zlib.compress(renderer.render(collector.collect()), GZIP_LEVEL, wbits=31)

        return once

    def repush() -> None:
        for view in store.views():
            entry = view.entry
            snapshot = entry.snapshot.model_copy(update={"sequence": entry.snapshot.sequence + 1})
            store.put(entry.run, entry.worker, snapshot)

    result: dict[str, Any] = {"gpus": gpus, "caches": {}}
    scrape(gpu)()  # imports and first-call state, outside what is traced
    base._SERIES.clear()
    tracemalloc.start()
    gpu = GpuMetrics(backend, ExporterInfo("bench", run_ttl_seconds=300))
    scrape_gpu, scrape_training = scrape(gpu), scrape(training)
    for _ in range(5):
        scrape_gpu()
    result["gpu_caches_retained_kib"] = round(tracemalloc.get_traced_memory()[0] / 1024)
    tracemalloc.stop()
    for _ in range(20):
        scrape_gpu()
        scrape_training()
    for name, patch in gpu_patches().items():
        result["caches"][name] = compare(scrape_gpu, patch, scrapes)
    for name, patch in training_patches().items():
        result["caches"][name] = compare(scrape_training, patch, max(scrapes // 10, 10))

    from mirrorwatch.exporter.collectors import worker_lines

    def fresh_series(self: Any, entry: Any, previous: Any = None) -> None:
        original_init(self, entry, None)

    original_init = worker_lines.WorkerLines.__init__

    def after_push() -> None:
        repush()
        scrape_training()

    result["caches"]["push_series"] = compare(
        after_push,
        lambda: patched(worker_lines.WorkerLines, "__init__", fresh_series),
        max(scrapes // 20, 5),
    )
    backend.shutdown()
    return result


def batch_ms(scrape: Callable[[], None], n: int) -> float:
    started = time.thread_time()
    for _ in range(n):
        scrape()
    return (time.thread_time() - started) * 1000 / n


def compare(scrape: Callable[[], None], defeat: Patch, n: int) -> dict[str, Any]:
    cached, defeated = [], []
    for _ in range(ROUNDS):
        cached.append(batch_ms(scrape, n))
        with defeat():
            scrape()  # the first scrape after a change pays for it: not counted
            defeated.append(batch_ms(scrape, n))
        scrape()
    saved = statistics.median(d - c for c, d in zip(cached, defeated, strict=True))
    with_cache = statistics.median(cached)
    return {
        "scrapes_per_batch": n,
        "cpu_ms_per_scrape_with": round(with_cache, 3),
        "cpu_ms_per_scrape_without": round(statistics.median(defeated), 3),
        "saves_ms_per_scrape": round(saved, 3),
        "saves_share": round(saved / with_cache, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/writer.json"))
    parser.add_argument("--gpus", default="2,8,32", help="comma-separated GPU counts")
    parser.add_argument("--scrapes", type=int, default=200, help="per batch (GPU families)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.scrapes)))
        return
    load_before = os.getloadavg()
    rows = []
    for gpus in (int(n) for n in args.gpus.split(",")):
        command = [sys.executable, __file__, "--child", str(gpus), "--scrapes", str(args.scrapes)]
        env = environment(gpus)
        env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parent.parent)
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{gpus} GPUs: {done.stderr.strip().splitlines()[-1:]}")
        rows.append(json.loads(done.stdout))
    description = machine()
    description["load_average_before"] = [round(x, 2) for x in load_before]
    description["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result = {
        "benchmark": "what each cache of the exposition writer saves, CPU per scrape in process",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": description,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {"rounds": ROUNDS, "scrapes_per_batch": args.scrapes, "mode": "openmetrics+gzip"},
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        for name, cache in row["caches"].items():
            print(
                f"{row['gpus']:>2} GPUs {name:>16}: saves {cache['saves_ms_per_scrape']:.3f} ms"
                f" of {cache['cpu_ms_per_scrape_with']:.3f} ({cache['saves_share']:.0%})"
            )
        print(f"{row['gpus']:>2} GPUs GPU caches retain {row['gpu_caches_retained_kib']} KiB")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
