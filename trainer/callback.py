"""The Keras callback that reports a training run's own view to the mirrorwatch exporter.

Only the hooks live here: they count and say what the job is. The meter, the snapshot built off
the training thread and the pusher are mirrorwatch.telemetry's, shared with the torch monitor.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import numpy as np

from mirrorwatch.telemetry.client import FINAL_PUSH_DEADLINE_SECONDS, Telemetry, settings
from mirrorwatch.telemetry.meter import finite_loss
from mirrorwatch.trainer import tf_devices
from mirrorwatch.trainer.example_counter import ExampleCounter
from mirrorwatch.trainer.keras_api import keras

log = logging.getLogger("mirrorwatch.trainer")

__all__ = ["FINAL_PUSH_DEADLINE_SECONDS", "MirrorwatchCallback", "worker_from_tf_config"]


def worker_from_tf_config(tf_config: str | None) -> int:
    """This task's worker number from a ``TF_CONFIG`` value, 0 without one.

    The task index, numbered as TensorFlow numbers the workers of a cluster
    (``multi_worker_util.id_in_cluster``): a ``chief`` is 0 and comes first, so where the
    cluster has one, ``worker`` task i is i + 1. Every worker of the run gets its own number.
    """
    try:
        config = json.loads(tf_config or "{}")
        task = config.get("task") or {}
        index = int(task.get("index", 0))
        if task.get("type") == "chief":
            return 0
        if task.get("type") == "worker":
            return index + len((config.get("cluster") or {}).get("chief") or [])
        return index
    except (ValueError, TypeError, AttributeError):
        return 0


def gradient_bytes(model: Any) -> int:
    """The bytes of ``model``'s trainable weights: what one replica's gradients all-reduce each
    step. Keras 3 names a weight's dtype ("float32"); tf_keras gives a tf.DType (its ``size``)."""
    total = 0
    for weight in model.trainable_weights:
        size = getattr(weight.dtype, "size", None)
        itemsize = size if isinstance(size, int) else np.dtype(str(weight.dtype)).itemsize
        total += int(np.prod(tuple(weight.shape))) * itemsize
    return total


class MirrorwatchCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """Reports training throughput, step times and replica-to-GPU mapping to mirrorwatch.

    Its hooks only count: each step costs two ``time.perf_counter()`` calls and a few additions
    under a lock (no device sync, no model variable reads). The hooks are async-safe
    (``async_safe = True``): where Keras dispatches batch-end callbacks to worker threads, it
    goes on doing so with this callback in the list instead of falling back to a synchronous
    log conversion every step, and the counts stay exact (see
    :class:`~mirrorwatch.telemetry.meter.StepMeter`). A daemon thread PUTs the run's
    full cumulative state to the exporter every ``interval`` seconds, with a short timeout and
    backoff when the exporter is away; at the end of training it sends a last snapshot marked
    inactive, waiting at most one second in all, and so does the process's exit where training
    did not end (an exception through ``fit``, for which Keras calls no ``on_train_end``).
    Telemetry never raises into training: trouble is logged once on the ``mirrorwatch.trainer``
    logger and counted in ``telemetry_dropped_total``.

    Examples are those of each batch as it was, a short last batch its own: counted inside the
    train step (:class:`~mirrorwatch.trainer.example_counter.ExampleCounter`), under
    ``steps_per_execution`` and distribution strategies too. ``epoch`` is the index (from 0)
    of the epoch in progress, or of the last one after the fit.

    Each replica is mapped to its physical GPU by PCI bus id (from TensorFlow's device
    description) and, where pynvml and NVML are available, to the GPU's UUID, so the exporter
    can join the run to its GPUs. CPU replicas standing in for GPUs in demos can be given bus
    ids in replica order with ``MIRRORWATCH_REPLICA_PCI_BUS_IDS=0000:1b:00.0,0000:3b:00.0``.

    Args:
        url: The exporter's base URL, e.g. ``http://gpu-host-7:9848``. Defaults to the
            ``MIRRORWATCH_URL`` environment variable, else ``http://127.0.0.1:9848``.
        run: The run id, 1 to 64 characters of ``[A-Za-z0-9_.-]``; the same for every worker
            of one training job. Defaults to ``MIRRORWATCH_RUN``, else a fresh random id.
        token: Bearer token of the exporter's ingest API. Defaults to
            ``MIRRORWATCH_INGEST_TOKEN``; none is needed for an exporter on the same host.
        global_batch_size: Examples per step over all replicas, reported as the run's global
            batch size. When omitted, taken from Keras's callback parameters where Keras
            provides it; examples and examples/s are counted either way.
        interval: Seconds between pushes.
        worker: This worker's index, 0 to 1023. Defaults to the task index in ``TF_CONFIG``
            (numbered as TensorFlow numbers the cluster's workers: a ``chief`` first), else 0.

    It subclasses the Keras that TensorFlow's ``tf.keras`` is in this process: tf_keras where
    ``TF_USE_LEGACY_KERAS=1`` (which ``MultiWorkerMirroredStrategy`` needs), else Keras 3
    (:mod:`mirrorwatch.trainer.keras_api`). Under ``MultiWorkerMirroredStrategy`` each worker
    reports the run's steps and its own share of the examples (docs/api.md, "Multi-worker
    runs"), so the workers' reports add up to the run without counting anything twice.

    Example:

    ```python
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(
        dataset.batch(256),
        epochs=10,
        callbacks=[MirrorwatchCallback(run="resnet50-lr0.1", global_batch_size=256)],
    )
    ```
    """

    # Keras 3 (``CallbackList._configure_async_dispatch``) dispatches batch-end hooks to a
    # thread pool only when every callback that overrides one says it is safe there. This one
    # is: the meter takes batch-end calls concurrently and out of order. (Keras never does so
    # on the TensorFlow backend, whose ``IS_THREAD_SAFE`` is False; it does on JAX and torch.)
    async_safe = True

    def __init__(
        self,
        url: str | None = None,
        run: str | None = None,
        token: str | None = None,
        global_batch_size: int | None = None,
        interval: float = 5.0,
        worker: int | None = None,
    ) -> None:
        super().__init__()
        if worker is None:
            worker = worker_from_tf_config(os.environ.get("TF_CONFIG"))
        config = settings(url, run, token, global_batch_size, interval, int(worker))
        self.url, self.run, self.worker = config.url, config.run, config.worker
        self.interval, self.global_batch_size = config.interval, config.global_batch_size
        self._telemetry = Telemetry(config, tf_devices, log)
        self.session = self._telemetry.session
        self._meter = self._telemetry.meter
        self._snapshots = self._telemetry.snapshots
        self._pusher = self._telemetry.pusher
        self._loss_replicas = 1  # replicas whose losses the framework adds up in batch logs
        self._examples = ExampleCounter()
        # The epoch's last batch index, where Keras knows it: Keras 3 reports a short last
        # execution of steps_per_execution as a full one (EpochIterator._enumerate_iterator).
        self._last_batch: int | None = None

    # -- what users read ------------------------------------------------------------------

    @property
    def telemetry_dropped_total(self) -> int:
        """Pushes given up on so far: exporter unreachable, too slow, or rejecting them."""
        return self._pusher.dropped_total

    @property
    def steps_total(self) -> int:
        """Training steps counted since this callback's session began."""
        return self._meter.read().steps_total

    def steady_examples_per_second(self) -> float | None:
        """Examples/s over all measured steps (first step, evaluation excluded), if known."""
        return self._snapshots.steady_examples_per_second()

    def set_scaling_baseline(self, examples_per_second: float) -> None:
        """Throughput of the same job on one replica: the snapshots then carry the speedup."""
        self._snapshots.set_scaling_baseline(examples_per_second)

    # -- Keras hooks: the training thread, but for batch ends under async dispatch --------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._meter.begin_training()
            steps = (self.params or {}).get("steps")
            self._last_batch = steps - 1 if type(steps) is int and steps > 0 else None
            strategy = self.model.distribute_strategy
            if getattr(self.model, "distribute_reduction_method", None) in (None, "auto", "sum"):
                self._loss_replicas = tf_devices.batch_log_replicas(strategy, keras.__name__)
            self._snapshots.describe_job(
                model=self.model.name,
                strategy=tf_devices.strategy_name(strategy),
                replica_devices=tf_devices.replica_devices(strategy),
                batch_size=(self.params or {}).get("batch_size"),
                replicas_in_sync=tf_devices.replicas_in_sync(strategy),
            )
            self._snapshots.set_gradient_bytes(gradient_bytes(self.model))
        except Exception as error:
            self._warn_once("on_train_begin", error)
        try:
            if self._examples.install(self.model, keras.backend.backend()):
                self._snapshots.count_examples_with(self._examples.read)
        except Exception as error:  # examples are then steps x the global batch
            self._warn_once("counting examples", error)
        try:
            self._telemetry.start()
        except Exception as error:
            self._warn_once("on_train_begin", error)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._meter.begin_epoch(epoch)  # from 0, as Keras numbers it
        except Exception as error:
            self._warn_once("on_epoch_begin", error)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._meter.begin_step(time.perf_counter(), batch)
        except Exception as error:
            self._warn_once("on_train_batch_begin", error)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # Keras has turned the logs into Python numbers: the step is done on the device.
        now = time.perf_counter()
        try:
            loss = logs.get("loss") if logs else None
            if loss is not None:
                loss = finite_loss(loss)
                if loss is not None and self._loss_replicas > 1:
                    loss /= self._loss_replicas  # tf_keras summed it over the cluster
            last = self._last_batch
            self._meter.end_step(batch if last is None else min(batch, last), now, loss)
        except Exception as error:
            self._warn_once("on_train_batch_end", error)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._meter.pause()

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self._meter.pause()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._telemetry.stop()
        except Exception as error:
            self._warn_once("on_train_end", error)

    def _warn_once(self, hook: str, error: BaseException) -> None:
        self._telemetry.warn_once(hook, error)
