"""mirrorwatch-doctor: the pre-flight check of a two-GPU MirroredStrategy host.

Exit 0 when no check fails, 1 when one does, 2 on bad usage or when it cannot start (one line
naming the flag or file). ``--simulate`` reads a simulated host instead of NVML.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mirrorwatch.alerts.thresholds import ThresholdsError, load_thresholds
from mirrorwatch.contract.plain_errors import Parser, UsageError, above, at_least, usage_line
from mirrorwatch.doctor import host as hosts
from mirrorwatch.doctor.gpu_checks import HostView, gpu_checks
from mirrorwatch.doctor.model import Check, Outcome
from mirrorwatch.doctor.model_timing import TimingError, time_model
from mirrorwatch.doctor.output import as_json, checklist
from mirrorwatch.doctor.probes import (
    CPU_SETTINGS,
    ProbeSettings,
    on_cpus,
    prepare_devices,
    run_probes,
)
from mirrorwatch.doctor.speedup import Speedup
from mirrorwatch.doctor.tf_checks import SIMULATED, skipped_tf_checks, tf_checks
from mirrorwatch.doctor.tf_facts import read_tf_facts
from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.simulate.scenario import ScenarioError
from mirrorwatch.trainer.cli import MODELS

PROG = "mirrorwatch-doctor"
_MODEL_STEPS = 5
PROBE_SECONDS = 60.0
# What the probes after the model's timing take beside the matmul (copies, the all-reduce): the
# model's timing leaves them this, so the whole probe keeps to its cap.
_PROBES_RESERVE_SECONDS = 10.0


def progress(line: str) -> None:
    """A probe's progress, on stderr (stdout carries the checklist or JSON)."""
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Will two GPUs give 2x? Checks before the run.")
    p.add_argument("--simulate", metavar="SCENARIO", help="read a simulated host, not NVML")
    p.add_argument("--gpus", type=at_least(1), help="GPUs of the simulated host")
    p.add_argument(
        "--probe", action="store_true", help="also run the checks under load (--probe-seconds)"
    )
    p.add_argument(
        "--probe-seconds",
        type=above(0.0),
        default=PROBE_SECONDS,
        help=f"the probe's cap: it stops there with what it has (default {PROBE_SECONDS:.0f})",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--model", choices=MODELS, help="expected speed-up for this model")
    size.add_argument("--gradient-bytes", type=at_least(1), help="or for this gradient size")
    p.add_argument(
        "--step-seconds",
        type=above(0.0),
        help="one replica's step compute time, with --gradient-bytes",
    )
    p.add_argument("--batch-size", type=at_least(1), default=64, help="per replica, --model")
    p.add_argument(
        "--matmul-seconds", type=above(0.0), help="matmul probe length (default 20 on GPUs)"
    )
    p.add_argument(
        "--split-gpu", action="store_true", help="on a one-GPU host, probe it split in two"
    )
    p.add_argument("--exporter", metavar="URL", help="a running exporter, for recent XIDs")
    p.add_argument("--json", action="store_true", help="print JSON instead of the checklist")
    return p


def _validated(args: argparse.Namespace) -> None:
    if (args.model or args.gradient_bytes) and not args.probe:
        raise UsageError("--model and --gradient-bytes need --probe (they time an all-reduce)")
    if args.step_seconds is not None and args.gradient_bytes is None:
        raise UsageError("--step-seconds goes with --gradient-bytes")
    if args.gpus is not None and args.simulate is None:
        raise UsageError("--gpus goes with --simulate")


def _host_view(backend: GpuBackend, args: argparse.Namespace) -> HostView:
    process = hosts.process_cpus()
    simulated = backend.kind == "simulated"
    if simulated:
        # The process runs, unpinned, on the simulated host: every CPU its GPUs are near.
        configs = [gpu.config() for gpu in backend.gpus()]
        allowed = frozenset().union(*(c.local_cpus or () for c in configs if c is not None))
    else:
        allowed = process.allowed
    view = HostView(
        allowed, load_thresholds(), own_pid=os.getpid(), process=process, simulated=simulated
    )
    if args.exporter is None:
        return view
    try:
        return replace(view, xids=hosts.exporter_xids(args.exporter))
    except (OSError, ValueError) as error:
        return replace(view, xids_unavailable=f"exporter {args.exporter} unreachable: {error}")


def _probe(
    args: argparse.Namespace, backend: GpuBackend, tf: Any, names: Sequence[str]
) -> tuple[list[Check], dict[str, object] | None]:
    started = time.monotonic()
    deadline = started + args.probe_seconds
    settings = CPU_SETTINGS if on_cpus(names) else ProbeSettings()
    if args.matmul_seconds is not None:
        settings = replace(settings, matmul_seconds=args.matmul_seconds)
    devices = f"{len(names)} {'CPU' if on_cpus(names) else 'GPU'} devices"
    first = f"{args.model}'s step, then " if args.model else ""
    progress(
        f"probing {devices}: {first}copies, an all-reduce and a {settings.matmul_seconds:g} s "
        f"matmul; at most about {args.probe_seconds:g} s (--probe-seconds), then it stops "
        "with what it has"
    )
    step_seconds = args.step_seconds
    gradient_bytes = args.gradient_bytes
    partial = ""
    checks: list[Check] = []
    if args.model:
        budget = args.probe_seconds - settings.matmul_seconds - _PROBES_RESERVE_SECONDS
        try:
            timing = time_model(
                args.model,
                args.batch_size,
                _MODEL_STEPS,
                split_gpu=args.split_gpu,
                budget_seconds=max(budget, 0.0),
                progress=progress,
            )
        except TimingError as error:
            checks.append(Check("probe", "fail", str(error), "the model trains", ""))
        else:
            gradient_bytes, step_seconds = timing.gradient_bytes, timing.step_seconds
            partial = timing.partial
    if gradient_bytes:
        # The all-reduce of the gradients themselves: small ones are latency-bound.
        settings = replace(settings, allreduce_bytes=gradient_bytes)
    results = run_probes(tf, names, backend, settings, progress, deadline)
    checks += results.checks
    progress(f"probed in {time.monotonic() - started:.0f} s")
    speedup = None
    if gradient_bytes and results.allreduce_seconds_per_byte is not None:
        speedup = Speedup(
            replicas=len(names),
            gradient_bytes=gradient_bytes,
            step_seconds=step_seconds,
            allreduce_seconds=results.allreduce_seconds_per_byte * gradient_bytes,
            partial=partial,
        ).as_json()
    return checks, speedup


def _tensorflow() -> Any:
    """TensorFlow, or None in the base install."""
    try:
        import tensorflow
    except ImportError:
        return None
    return tensorflow


def diagnose(args: argparse.Namespace) -> Outcome:
    """Every check the flags ask for, in order: GPUs, TensorFlow, then the probes."""
    backend = hosts.open_backend(args.simulate, args.gpus)
    try:
        view = _host_view(backend, args)
        checks = gpu_checks(backend, view)
        names: list[str] = []
        if args.probe:
            progress("--probe: starting TensorFlow (it takes seconds, more on a busy machine)")
        tf = _tensorflow() if args.probe else None
        if tf is not None:
            names = prepare_devices(tf, args.split_gpu)
        if backend.kind == "simulated":
            checks += skipped_tf_checks(SIMULATED)
        else:
            gpus = backend.gpus()
            checks += tf_checks(
                read_tf_facts(),
                nvml_gpus=len(gpus) if backend.status().up else None,
                configs=[g.config() for g in gpus if g.alive()],
                driver_version=backend.driver_version(),
                driver_cuda=backend.cuda_driver_version(),
            )
        speedup = None
        if args.probe and tf is None:
            checks.append(Check("probe", "skip", "skipped: no TensorFlow", "TensorFlow installed"))
        elif args.probe:
            probed, speedup = _probe(args, backend, tf, names)
            checks += probed
        return Outcome(checks, speedup)
    finally:
        backend.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    # The checks carry every reason; the exporter's own warnings (NVML retries) would only
    # repeat them on stderr, and the doctor never retries. Restored on return: main() also
    # runs inside other programs (make demo, tests), whose exporter logs must stay as they were.
    exporter_log = logging.getLogger("mirrorwatch.exporter")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        return _run(argv)
    finally:
        exporter_log.setLevel(level)


def _run(argv: Sequence[str] | None) -> int:
    # TensorFlow's C++ start-up chatter on stderr (CPU features, absl) is not a finding.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        args = parser().parse_args(argv)
        _validated(args)
        outcome = diagnose(args)
    except (UsageError, ScenarioError, ThresholdsError) as error:
        print(usage_line(PROG, error), file=sys.stderr)
        return 2
    if args.json:
        print(as_json(outcome))
    else:
        print(checklist(outcome, colour=sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    return outcome.exit_code
