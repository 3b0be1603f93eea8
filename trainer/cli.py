"""mirrorwatch-train: a MirroredStrategy training run, always instrumented with the callback.

Synthetic data by default (nothing is downloaded). Without GPUs it trains on ``--cpu-replicas``
logical CPU devices, so the whole pipeline can be shown on any machine; ``--devices gpu`` refuses
to start instead, where training on CPUs would be a silent mistake (the GPU host's trainer).
``--multi-worker`` trains one worker of a MultiWorkerMirroredStrategy cluster (``TF_CONFIG``,
or ``--cluster`` and ``--task-index``) on tf_keras.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from mirrorwatch.contract.plain_errors import Parser, UsageError, above, at_least, usage_line
from mirrorwatch.contract.vocabulary import RUN_RULE, Address, is_run_id
from mirrorwatch.telemetry.pusher import DEFAULT_URL

PROG = "mirrorwatch-train"
MODELS = ("cnn", "resnet50", "transformer")  # see mirrorwatch.trainer.models
DEVICES = ("auto", "gpu", "cpu")  # see mirrorwatch.trainer.training.mirrored_strategy

MULTI_WORKER_ONLY = ("--cluster", "--task-index")
KERAS_20585 = (
    "Keras 3 cannot fit under MultiWorkerMirroredStrategy "
    "(https://github.com/keras-team/keras/issues/20585): it trains on tf_keras"
)
KERAS_19246 = (
    "--steps-per-execution must be 1 under MirroredStrategy: larger values fail in this Keras "
    "(https://github.com/keras-team/keras/issues/19246)"
)


def _exporter_url(text: str) -> str:
    """http(s)://HOST:PORT[/path], or HOST:PORT for http; the URL as the callback takes it."""
    expected = f"expected the exporter's URL such as {DEFAULT_URL}, got {text!r}"
    if "://" not in text:
        try:
            return Address.parse(text).url
        except ValueError:
            raise argparse.ArgumentTypeError(expected) from None
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"port out of range 1..65535 in {text!r}") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or (port is not None and port < 1)
    ):
        raise argparse.ArgumentTypeError(expected)
    return text


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        description="Train a model under MirroredStrategy with mirrorwatch telemetry.",
    )
    p.add_argument("--model", choices=MODELS, default="cnn", help="what to train (default cnn)")
    p.add_argument(
        "--batch-size",
        type=at_least(1),
        default=64,
        metavar="N",
        help="global batch size, split evenly over the replicas (default 64)",
    )
    p.add_argument(
        "--steps", type=at_least(1), default=100, metavar="N", help="steps per epoch (default 100)"
    )
    p.add_argument(
        "--epochs", type=at_least(1), default=1, metavar="N", help="epochs to train (default 1)"
    )
    p.add_argument(
        "--cpu-replicas",
        type=at_least(1),
        default=2,
        help="logical CPU devices to mirror over when there is no GPU (default 2)",
    )
    p.add_argument(
        "--devices",
        choices=DEVICES,
        default="auto",
        help="gpu: the GPUs or exit 2; cpu: --cpu-replicas CPUs; auto (default): GPUs if any",
    )
    p.add_argument(
        "--steps-per-execution", type=at_least(1), default=1, help=f"(default 1) {KERAS_19246}"
    )
    p.add_argument("--mixed-precision", action="store_true", help="float16 (bfloat16 on CPU)")
    p.add_argument("--image-size", type=at_least(1), help="image side (224 resnet50, else 32)")
    p.add_argument("--data", help="an image directory (a folder per class) or TFRecord file(s)")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the synthetic data and shuffling (default 0)",
    )
    p.add_argument("--checkpoint-dir", help="back up here and resume from here after a crash")
    p.add_argument(
        "--checkpoint-every", type=at_least(1), default=1000, help="steps (default 1000)"
    )
    p.add_argument(
        "--scaling-benchmark",
        action="store_true",
        help="train --steps steps on 1 replica, then on all; report speedup and efficiency",
    )
    p.add_argument(
        "--baseline-steps",
        type=at_least(0),
        default=0,
        metavar="N",
        help="first train N steps on 1 replica, so that telemetry carries the speed-up and "
        "scaling efficiency of the run (default 0: no baseline; at least 3 when given)",
    )
    p.add_argument(
        "--multi-worker",
        action="store_true",
        help="train as one worker of a MultiWorkerMirroredStrategy cluster, on tf_keras "
        "(the cluster from $TF_CONFIG, or from --cluster and --task-index)",
    )
    p.add_argument(
        "--cluster", help="with --multi-worker: every worker's HOST:PORT, comma-separated"
    )
    p.add_argument(
        "--task-index", type=at_least(0), help="with --cluster: this worker's place in it, from 0"
    )
    p.add_argument(
        "--url",
        type=_exporter_url,
        help=f"exporter URL, http://HOST:PORT (default $MIRRORWATCH_URL or {DEFAULT_URL})",
    )
    p.add_argument("--run", help="run id (default $MIRRORWATCH_RUN or a fresh id)")
    p.add_argument("--token-file", help="file with the ingest token ($MIRRORWATCH_INGEST_TOKEN)")
    p.add_argument(
        "--interval",
        type=above(0.0),
        default=5.0,
        metavar="S",
        help="seconds between telemetry pushes to the exporter (default 5)",
    )
    p.add_argument(
        "--verbose",
        choices=("auto", "0", "1", "2"),
        default="auto",
        help="Keras progress output: 0 none, 1 a progress bar, 2 a line per epoch; auto "
        "(default): Keras's choice, 1 here",
    )
    return p


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is None:
        return os.environ.get("MIRRORWATCH_INGEST_TOKEN") or None
    try:
        with open(args.token_file, encoding="utf-8") as file:
            token = file.read().strip()
    except OSError as error:
        raise UsageError(f"--token-file: cannot read {args.token_file}: {error.strerror}") from None
    if not token:
        raise UsageError(f"--token-file: {args.token_file} is empty")
    return token


def _cluster_tf_config(cluster: str, task_index: int | None) -> str:
    """The ``TF_CONFIG`` of worker ``task_index`` of the ``--cluster`` workers."""
    workers = [address.strip() for address in cluster.split(",")]
    for address in workers:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--cluster: {address!r} is not HOST:PORT")
    if len(set(workers)) < len(workers):
        raise UsageError("--cluster: a worker is listed twice")
    if task_index is None:
        raise UsageError("--task-index is required with --cluster")
    if task_index >= len(workers):
        raise UsageError(
            f"--task-index {task_index} is not one of the {len(workers)} workers of --cluster"
        )
    return json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": task_index}}
    )


def _check_tf_config(tf_config: str | None) -> None:
    """What MultiWorkerMirroredStrategy needs of ``TF_CONFIG``, said before TensorFlow starts."""
    if not tf_config:
        raise UsageError(
            "--multi-worker needs TF_CONFIG in the environment, or --cluster and --task-index"
        )
    try:
        config = json.loads(tf_config)
        cluster, task = config["cluster"], config["task"]
        members = cluster[task["type"]]
        index = int(task["index"])
    except (ValueError, TypeError, KeyError) as error:
        raise UsageError(
            f"--multi-worker: TF_CONFIG is not a cluster and task of it: {error!r}"
        ) from None
    if not isinstance(members, list) or not 0 <= index < len(members):
        raise UsageError(
            f"--multi-worker: TF_CONFIG's task {task['type']}:{index} is not in its cluster"
        )


def _use_tf_keras(args: argparse.Namespace) -> None:
    """Make this process's Keras tf_keras, as TensorFlow chooses it (TF_USE_LEGACY_KERAS)."""
    from mirrorwatch.trainer import keras_api

    value = os.environ.get(keras_api.LEGACY_KERAS_ENV)
    if value is not None and not keras_api.uses_tf_keras():
        raise UsageError(
            f"--multi-worker: {KERAS_20585}; unset {keras_api.LEGACY_KERAS_ENV}={value}"
        )
    if not keras_api.tf_keras_installed():
        raise UsageError(f"--multi-worker: {KERAS_20585}, which is not installed: pip install "
              "'mirrorwatch[trainer]'")  # fmt: skip
    os.environ[keras_api.LEGACY_KERAS_ENV] = "1"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _train(argv)
    except UsageError as error:
        print(usage_line(PROG, error), file=sys.stderr)
        return 2


def _train(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.steps_per_execution > 1:
        raise UsageError(KERAS_19246)
    for flag in MULTI_WORKER_ONLY:
        if getattr(args, flag[2:].replace("-", "_")) is not None and not args.multi_worker:
            raise UsageError(f"{flag} needs --multi-worker")
    if args.task_index is not None and args.cluster is None:
        raise UsageError("--task-index needs --cluster (or TF_CONFIG alone)")
    if args.multi_worker:
        for flag, given in (
            ("--checkpoint-dir", args.checkpoint_dir),
            ("--scaling-benchmark", args.scaling_benchmark),
            ("--baseline-steps", args.baseline_steps),
        ):
            if given:
                raise UsageError(f"{flag} is not available with --multi-worker yet")
        if args.cluster is not None:
            os.environ["TF_CONFIG"] = _cluster_tf_config(args.cluster, args.task_index)
        _check_tf_config(os.environ.get("TF_CONFIG"))
        _use_tf_keras(args)
    elif args.checkpoint_dir is not None:
        from mirrorwatch.trainer import keras_api

        if keras_api.uses_tf_keras():
            raise UsageError(
                f"--checkpoint-dir resumes on Keras 3 only: unset {keras_api.LEGACY_KERAS_ENV}"
            )
    if args.scaling_benchmark and args.steps < 3:
        raise UsageError(
            "--steps must be at least 3 with --scaling-benchmark (the first step is tracing)"
        )
    if 0 < args.baseline_steps < 3:
        raise UsageError("--baseline-steps must be 0 or at least 3 (the first step is tracing)")
    if args.baseline_steps and args.scaling_benchmark:
        raise UsageError("--baseline-steps: --scaling-benchmark measures its own baseline")
    if args.url is None and os.environ.get("MIRRORWATCH_URL"):
        try:
            _exporter_url(os.environ["MIRRORWATCH_URL"])
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"MIRRORWATCH_URL: {error}") from None
    if args.data is not None and not os.path.exists(args.data):
        raise UsageError(f"--data: no such file or directory: {args.data}")
    token = _token(args)
    if args.run is not None and not is_run_id(args.run):
        raise UsageError(f"--run must be {RUN_RULE}, got {args.run!r}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from mirrorwatch.trainer import training

    try:
        if args.multi_worker:
            strategy, devices = training.multi_worker_strategy(args.devices)
        else:
            strategy, devices = training.mirrored_strategy(args.cpu_replicas, args.devices)
    except training.NoGpuError as error:
        raise UsageError(f"--devices gpu: {error}") from None
    in_sync = int(strategy.num_replicas_in_sync)
    if args.batch_size % in_sync:
        raise UsageError(
            f"--batch-size {args.batch_size} must be a multiple of the {in_sync} replicas"
        )
    if args.mixed_precision:
        training.use_mixed_precision(on_gpu="GPU" in devices[0])
    from mirrorwatch.trainer.callback import MirrorwatchCallback
    from mirrorwatch.trainer.models import Job, classes_in, default_image_size

    job = Job(
        model=args.model,
        image_size=args.image_size or default_image_size(args.model),
        data=args.data,
        seed=args.seed,
        classes=classes_in(args.data),
    )
    run = args.run
    if args.multi_worker and not (run or os.environ.get("MIRRORWATCH_RUN")):
        run = training.shared_run_id(strategy)  # every worker's telemetry is of one run
    callback = MirrorwatchCallback(
        url=args.url,
        run=run,
        token=token,
        global_batch_size=args.batch_size,
        interval=args.interval,
    )
    verbose: Any = args.verbose if args.verbose == "auto" else int(args.verbose)
    of_run = f" of {in_sync} in the run, worker {callback.worker}" if args.multi_worker else ""
    print(
        f"mirrorwatch-train: {job.model} on {len(devices)} replicas{of_run} "
        f"({', '.join(devices)}), global batch {args.batch_size}; "
        f"run {callback.run} -> {callback.url}",
        flush=True,
    )
    if args.scaling_benchmark:
        result = training.scaling_benchmark(
            job, strategy, devices, args.batch_size, args.steps, callback, verbose
        )
        print(result.table(), flush=True)
        print(json.dumps(result.as_dict()), flush=True)
        return 0
    if args.baseline_steps:
        per_replica = args.batch_size // in_sync
        print(
            f"mirrorwatch-train: speed-up baseline, {args.baseline_steps} steps on 1 replica "
            f"({devices[0]}, batch {per_replica})",
            flush=True,
        )
        baseline = training.single_replica_throughput(
            job, devices, per_replica, args.baseline_steps, verbose
        )
        callback.set_scaling_baseline(baseline)
        print(f"mirrorwatch-train: baseline {baseline:.1f} examples/s on 1 replica", flush=True)
    training.train(
        job,
        strategy,
        args.batch_size,
        args.steps,
        args.epochs,
        callback,
        verbose,
        args.checkpoint_dir,
        args.checkpoint_every,
    )
    return 0
