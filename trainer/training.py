"""mirrorwatch-train's training: the strategies, checkpoints and resume, the scaling benchmark."""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from mirrorwatch.telemetry.meter import StepMeter
from mirrorwatch.trainer.callback import MirrorwatchCallback
from mirrorwatch.trainer.keras_api import keras
from mirrorwatch.trainer.models import Job, build_model, dataset


class NoGpuError(RuntimeError):
    """GPUs were asked for and TensorFlow sees none; the message says what to check."""


def mirrored_strategy(cpu_replicas: int, devices: str = "auto") -> tuple[Any, list[str]]:
    """MirroredStrategy over the visible GPUs, or over ``cpu_replicas`` logical CPU devices.

    ``devices``: ``gpu`` raises NoGpuError rather than train on CPUs when TensorFlow sees no GPU
    (a TensorFlow built without CUDA, or a CUDA/cuDNN it cannot load, looks exactly like that);
    ``cpu`` ignores any GPU; ``auto`` takes the GPUs when there are any.
    """
    gpus = tf.config.list_physical_devices("GPU") if devices != "cpu" else []
    if devices == "gpu" and not gpus:
        raise NoGpuError(_no_gpu_reason())
    if gpus:
        for gpu in gpus:
            # Already initialised or split into logical devices: keep it as configured.
            with contextlib.suppress(RuntimeError, ValueError):
                tf.config.experimental.set_memory_growth(gpu, True)
        names = [device.name for device in tf.config.list_logical_devices("GPU")]
    else:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * cpu_replicas
        )
        names = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(names), names


def multi_worker_strategy(devices: str = "auto") -> tuple[Any, list[str]]:
    """MultiWorkerMirroredStrategy over the cluster in ``TF_CONFIG``; this worker's devices.

    Call it before anything else starts TensorFlow's runtime: the strategy starts this task's
    gRPC server and configures collective ops on the eager context. Each worker mirrors over
    its own GPUs, or over one CPU where it has none (TensorFlow's ``CollectiveAllReduceExtended``
    takes no logical CPU devices). Training waits until every worker of the cluster is up.
    """
    if devices == "gpu" and not tf.config.list_physical_devices("GPU"):
        raise NoGpuError(_no_gpu_reason())
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if devices == "cpu":
        # No accelerators asked of the resolver: the collectives then run on the CPU.
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            resolver.cluster_spec(),
            task_type=resolver.task_type,
            task_id=resolver.task_id,
            num_accelerators={"GPU": 0},
            rpc_layer=resolver.rpc_layer or "grpc",
        )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    return strategy, [str(device) for device in strategy.extended.worker_devices]


def shared_run_id(strategy: Any) -> str:
    """A fresh run id, the same on every worker: the first replica's random pick, broadcast.

    One all-reduce over the cluster before training (a sum to which only replica 0 adds),
    so the workers' telemetry is of one run without anyone having to name it.
    """
    pick = secrets.randbits(48)

    def contribute() -> Any:
        first = tf.distribute.get_replica_context().replica_id_in_sync_group == 0
        return tf.where(first, tf.constant(pick, tf.int64), tf.constant(0, tf.int64))

    @tf.function  # type: ignore[untyped-decorator]  # tensorflow is untyped
    def broadcast() -> Any:  # in a graph, as MultiWorkerMirroredStrategy wants its collectives
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(contribute), axis=None)

    return f"run-{int(broadcast().numpy()):012x}"


def _no_gpu_reason() -> str:
    if not tf.test.is_built_with_cuda():
        return (
            f"TensorFlow {tf.__version__} sees no GPU: this build has no CUDA support "
            "(install tensorflow[and-cuda], not tensorflow-cpu)"
        )
    return (
        f"TensorFlow {tf.__version__} sees no GPU although it is built with CUDA: check the "
        "NVIDIA driver (nvidia-smi), CUDA_VISIBLE_DEVICES, the container's GPU reservation, "
        "and TensorFlow's log for a CUDA or cuDNN library it could not load"
    )


def use_mixed_precision(on_gpu: bool) -> None:
    # float16 needs a GPU to be fast; CPUs with AVX512-BF16/AMX do bfloat16.
    keras.mixed_precision.set_global_policy("mixed_float16" if on_gpu else "mixed_bfloat16")


def train(
    job: Job,
    strategy: Any,
    global_batch_size: int,
    steps: int,
    epochs: int,
    callback: MirrorwatchCallback,
    verbose: Any,
    checkpoint_dir: str | None,
    checkpoint_every: int,
) -> Any:
    """Fit ``epochs`` epochs of ``steps`` steps; back up every N steps and resume, if asked.

    A resumed run restores the weights and optimizer state of the last backup and goes on at
    the batch after it, on the batch of data it would have had: across crashes the run trains
    ``epochs * steps`` steps. Returns the last fit's history.
    """
    with strategy.scope():
        model = build_model(job)
    if checkpoint_dir is None:
        return model.fit(
            dataset(job, global_batch_size), epochs=epochs, steps_per_epoch=steps,
            callbacks=[callback], verbose=verbose,
            shuffle=False,  # tf.data: the dataset decides; this silences Keras's reminder
        )  # fmt: skip
    from mirrorwatch.trainer import resume  # Keras 3 only: the CLI keeps tf_keras runs out

    checkpoints = resume.Checkpoints(checkpoint_dir, checkpoint_every)
    with strategy.scope():
        position = checkpoints.restore(model)
    if position is not None:
        print(
            f"mirrorwatch-train: resumed from checkpoint at step {position.step} "
            f"(epoch {position.epoch + 1}, batch {position.batches})",
            flush=True,
        )
    fits = resume.plan(position, epochs, steps)
    progress = [] if verbose == 0 else [resume.Progress(epochs)]  # "Epoch 2/3" in every fit
    history = None
    for index, fit in enumerate(fits):
        first, last = index == 0, index == len(fits) - 1
        each = [resume.OneTraining(one, first, last) for one in (callback, checkpoints)]
        history = model.fit(
            dataset(job, global_batch_size, skip=fit.skip),
            initial_epoch=fit.initial_epoch,
            epochs=fit.epochs,
            steps_per_epoch=fit.steps_per_epoch,
            callbacks=each + progress,
            verbose=verbose,
            shuffle=False,
        )
    step = int(model.optimizer.iterations.numpy())
    print(f"mirrorwatch-train: finished at step {step}", flush=True)
    return history


class _Throughput(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """The callback's own step meter, without telemetry: the 1-replica baseline."""

    def __init__(self) -> None:
        super().__init__()
        self.meter = StepMeter()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.meter.begin_step(time.perf_counter())

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.meter.end_step(batch, time.perf_counter(), None)

    def steps_per_second(self) -> float:
        reading = self.meter.read()
        if reading.measured_seconds <= 0:
            raise RuntimeError("the scaling benchmark measured no steps")
        return reading.measured_steps / reading.measured_seconds


@dataclass(frozen=True)
class ScalingResult:
    replicas: int
    baseline_batch_size: int
    global_batch_size: int
    baseline_examples_per_second: float
    examples_per_second: float

    @property
    def speedup(self) -> float:
        return self.examples_per_second / self.baseline_examples_per_second

    @property
    def efficiency(self) -> float:
        return self.speedup / self.replicas

    def table(self) -> str:
        rows = [
            ("replicas", "global batch", "examples/s", "speedup", "efficiency"),
            ("1", str(self.baseline_batch_size), f"{self.baseline_examples_per_second:.1f}",
             "1.00", "1.00"),
            (str(self.replicas), str(self.global_batch_size), f"{self.examples_per_second:.1f}",
             f"{self.speedup:.2f}", f"{self.efficiency:.2f}"),
        ]  # fmt: skip
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        return "\n".join(
            "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
            for row in rows
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "replicas": self.replicas,
            "baseline_examples_per_second": round(self.baseline_examples_per_second, 3),
            "examples_per_second": round(self.examples_per_second, 3),
            "speedup": round(self.speedup, 4),
            "efficiency_ratio": round(self.efficiency, 4),
        }


def single_replica_throughput(
    job: Job, devices: list[str], per_replica_batch: int, steps: int, verbose: Any
) -> float:
    """Examples per second of the model on ``devices[0]`` alone, at the per-replica batch.

    The baseline that speed-up and scaling efficiency are measured against: weak scaling,
    so each replica of the real run gets this same batch. The first (tracing) step is left out.
    """
    meter = _Throughput()
    with tf.distribute.MirroredStrategy(devices[:1]).scope():
        single = build_model(job)
    single.fit(
        dataset(job, per_replica_batch), epochs=1, steps_per_epoch=steps, callbacks=[meter],
        verbose=verbose, shuffle=False,
    )  # fmt: skip
    return meter.steps_per_second() * per_replica_batch


def scaling_benchmark(
    job: Job,
    strategy: Any,
    devices: list[str],
    global_batch_size: int,
    steps: int,
    callback: MirrorwatchCallback,
    verbose: Any,
) -> ScalingResult:
    """The same model for ``steps`` steps on one replica, then on all (the same batch each).

    Weak scaling, as data-parallel training is judged: every replica gets the per-replica
    batch both times, so ideal speedup equals the replica count. The first (tracing) step of
    each phase is left out of its throughput. The instrumented run publishes the result.
    """
    per_replica = global_batch_size // len(devices)
    print(f"mirrorwatch-train: scaling benchmark, {steps} steps on 1 replica", flush=True)
    baseline_examples = single_replica_throughput(job, devices, per_replica, steps, verbose)
    callback.set_scaling_baseline(baseline_examples)
    print(
        f"mirrorwatch-train: scaling benchmark, {steps} steps on {len(devices)} replicas",
        flush=True,
    )
    with strategy.scope():
        model = build_model(job)
    model.fit(
        dataset(job, global_batch_size), epochs=1, steps_per_epoch=steps,
        callbacks=[callback], verbose=verbose, shuffle=False,
    )  # fmt: skip
    # The callback's own measure: the table shows what the exporter was sent.
    examples = callback.steady_examples_per_second()
    if examples is None:
        raise RuntimeError("the scaling benchmark measured no steps")
    return ScalingResult(
        replicas=len(devices),
        baseline_batch_size=per_replica,
        global_batch_size=global_batch_size,
        baseline_examples_per_second=baseline_examples,
        examples_per_second=examples,
    )
