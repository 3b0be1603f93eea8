"""Doctor benchmark: how long mirrorwatch-doctor's checks without load take, besides TF's import.

Measured four ways, within one run:
- the GPU checks on the simulated host (``--simulate healthy``, in this process), repeated;
- the GPU checks through the NVML backend over the tests' fake pynvml (two GPUs): the project's
  own cost per NVML reading, without a driver's;
- in a child process, ``import tensorflow`` alone, then TensorFlow's facts and checks after it,
  then every check without load as ``mirrorwatch-doctor`` runs them (``diagnose``: NVML, which
  here has no driver, and this CPU-only TensorFlow), TensorFlow already imported;
- the whole ``mirrorwatch-doctor --json`` as a process, as a user runs it, for context.

Target: the checks without load under 5 s besides the TensorFlow import.

    python bench/doctor_bench.py --out bench/results/doctor.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from mirrorwatch.alerts.thresholds import load_thresholds
from mirrorwatch.doctor.cli import diagnose, parser
from mirrorwatch.doctor.gpu_checks import HostView, gpu_checks
from mirrorwatch.exporter.nvml import NvmlBackend
from tests.doctor.fake_preflight import FakePreflight, FakePreflightNvml
from tests.exporter.fake_pynvml import FakeGpu

TARGET_SECONDS = 5.0
DOCTOR = os.path.join(os.path.dirname(sys.executable), "mirrorwatch-doctor")


def timed(work: Callable[[], object], repetitions: int) -> dict[str, float]:
    seconds = []
    for _ in range(repetitions):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return {
        "p50": round(statistics.median(seconds), 4),
        "max": round(max(seconds), 4),
        "repetitions": repetitions,
    }


def simulated() -> None:
    diagnose(parser().parse_args(["--simulate", "healthy"]))


def fake_nvml() -> None:
    gpus = [FakeGpu(uuid=f"GPU-{i}", pci_bus_id=f"00000000:{0x17 + i:02x}:00.0") for i in (0, 1)]
    backend = NvmlBackend(
        nvml=FakePreflightNvml(gpus, [FakePreflight(), FakePreflight()]), background=False
    )
    backend.start()
    try:
        gpu_checks(backend, HostView(frozenset(os.sched_getaffinity(0)), load_thresholds()))
    finally:
        backend.shutdown()


def child() -> dict[str, float]:
    """Run in a fresh process: TensorFlow's import, then its facts and checks."""
    start = time.perf_counter()
    import tensorflow  # noqa: F401 - the import is what is measured

    imported = time.perf_counter()
    from mirrorwatch.doctor.tf_checks import tf_checks
    from mirrorwatch.doctor.tf_facts import read_tf_facts

    tf_checks(read_tf_facts(), nvml_gpus=None, configs=[], driver_version=None, driver_cuda=None)
    checked = time.perf_counter()
    diagnose(parser().parse_args([]))
    done = time.perf_counter()
    return {
        "import_s": round(imported - start, 3),
        "checks_s": round(checked - imported, 3),
        "diagnose_s": round(done - checked, 3),
    }


def in_child() -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--child"], capture_output=True, text=True, check=True
    )
    answer: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def whole_cli() -> float:
    start = time.perf_counter()
    subprocess.run([DOCTOR, "--json"], capture_output=True, text=True, check=False)
    return round(time.perf_counter() - start, 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench/results/doctor.json"))
    p.add_argument("--repetitions", type=int, default=20)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child()))
        return
    simulated()  # imports and caches (scenario files, thresholds) outside the timings
    on_simulated = timed(simulated, args.repetitions)
    on_fake_nvml = timed(fake_nvml, args.repetitions)
    tensorflow = in_child()
    cli_s = whole_cli()
    besides_import = tensorflow["diagnose_s"]
    result: dict[str, Any] = {
        "benchmark": "doctor",
        "machine": machine(),
        "targets": {"checks_without_load_besides_tf_import_s": TARGET_SECONDS},
        "gpu_checks_simulated_s": on_simulated,
        "gpu_checks_fake_nvml_s": on_fake_nvml,
        "tensorflow": tensorflow,
        "checks_without_load_besides_tf_import_s": besides_import,
        "cli_wall_s": cli_s,
        "met": {
            "checks_without_load_besides_tf_import_s": besides_import < TARGET_SECONDS,
            "gpu_checks_simulated_s": on_simulated["p50"] < TARGET_SECONDS,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'measure':<52}{'seconds':>10}")
    rows = [
        ("GPU checks, simulated host, p50", on_simulated["p50"]),
        ("GPU checks, NVML backend on fake pynvml, p50", on_fake_nvml["p50"]),
        ("import tensorflow (child process)", tensorflow["import_s"]),
        ("TensorFlow facts and checks after the import", tensorflow["checks_s"]),
        (f"every check without load, TF imported (target < {TARGET_SECONDS:g})", besides_import),
        ("mirrorwatch-doctor --json, whole process", cli_s),
    ]
    for label, seconds in rows:
        print(f"{label:<52}{seconds:>10}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
