"""The Keras callback that reports a training run's own view to the mirrorwatch exporter."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections import deque
from typing import Any

import keras

from mirrorwatch.exporter.ingest.schema import (
    Replica,
    Scaling,
    StepDurations,
    TrainingSnapshot,
)
from mirrorwatch.trainer import devices, tf_devices
from mirrorwatch.trainer.meter import StepMeter, finite_loss
from mirrorwatch.trainer.pusher import RUN_PATTERN, Endpoint, Pusher

log = logging.getLogger("mirrorwatch.trainer")

DEFAULT_URL = "http://127.0.0.1:9848"
FINAL_PUSH_DEADLINE_SECONDS = 2.0
MEMORY_SAMPLE_SECONDS = 5.0
THROUGHPUT_WINDOW_SECONDS = 30.0
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def _worker_from_tf_config() -> int:
    try:
        index = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)
        return int(index)
    except (ValueError, TypeError, AttributeError):
        return 0


def _short_text(value: object) -> str | None:
    text = _PRINTABLE.sub("", str(value))[:128].strip()
    return text or None


class MirrorwatchCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """Reports training throughput, step times and replica-to-GPU mapping to mirrorwatch.

    Its hooks only count: each step costs two ``time.perf_counter()`` calls and a few additions
    under a lock (no device sync, no model variable reads). The hooks are async-safe
    (``async_safe = True``): where Keras dispatches batch-end callbacks to worker threads, it
    goes on doing so with this callback in the list instead of falling back to a synchronous
    log conversion every step, and the counts stay exact (see
    :class:`~mirrorwatch.trainer.meter.StepMeter`). A daemon thread PUTs the run's
    full cumulative state to the exporter every ``interval`` seconds, with a short timeout and
    backoff when the exporter is away; at the end of training it sends a last snapshot marked
    inactive, waiting at most two seconds. Telemetry never raises into training: trouble is
    logged once on the ``mirrorwatch.trainer`` logger and counted in
    ``telemetry_dropped_total``.

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
        global_batch_size: Examples per step over all replicas. When omitted, taken from
            Keras's callback parameters where Keras provides it; otherwise example counts and
            examples/s are not reported (steps still are).
        interval: Seconds between pushes.
        worker: This worker's index, 0 to 1023. Defaults to the task index in ``TF_CONFIG``,
            else 0.

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
        self.url = url or os.environ.get("MIRRORWATCH_URL") or DEFAULT_URL
        self.run = run or os.environ.get("MIRRORWATCH_RUN") or f"run-{uuid.uuid4().hex[:12]}"
        self.worker = _worker_from_tf_config() if worker is None else int(worker)
        if not RUN_PATTERN.match(self.run):
            raise ValueError(f"run must be 1 to 64 characters of [A-Za-z0-9_.-], got {self.run!r}")
        if not 0 <= self.worker <= 1023:
            raise ValueError(f"worker must be 0..1023, got {self.worker}")
        if global_batch_size is not None and global_batch_size < 1:
            raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
        if not interval > 0:
            raise ValueError(f"interval must be positive seconds, got {interval}")
        self.interval = float(interval)
        self.global_batch_size = global_batch_size
        self.session = uuid.uuid4().hex
        token = token or os.environ.get("MIRRORWATCH_INGEST_TOKEN") or None
        self._endpoint = Endpoint.parse(self.url, self.run, self.worker, token)
        self._meter = StepMeter()
        self._pusher = Pusher(self._endpoint, self._build_body, self.interval, self._find_gpus)
        self._warned: set[str] = set()
        self._warned_lock = threading.Lock()  # batch-end hooks may run on Keras's workers
        # What the job is; set on the training thread at train begin, read by the pusher.
        self._model_name: str | None = None
        self._strategy_name: str | None = None
        self._devices: list[str] = []
        self._batch_size: int | None = global_batch_size
        self._replicas: list[devices.ReplicaDevice] = []
        self._memory: dict[int, tuple[float, float]] = {}
        self._memory_sampled = float("-inf")
        self._throughput_samples: deque[tuple[float, int, float]] = deque()
        self._examples_per_second: float | None = None
        self._scaling_baseline: float | None = None
        self._pusher_lock = threading.Lock()

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
        reading = self._meter.read()
        if self._batch_size is None or reading.measured_seconds <= 0:
            return None
        return reading.measured_steps * self._batch_size / reading.measured_seconds

    def set_scaling_baseline(self, examples_per_second: float) -> None:
        """Throughput of the same job on one replica: the snapshots then carry the speedup."""
        self._scaling_baseline = float(examples_per_second)

    # -- Keras hooks: the training thread, but for batch ends under async dispatch --------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._meter.begin_training()
            strategy = self.model.distribute_strategy
            self._strategy_name = _short_text(type(strategy).__name__.lstrip("_"))
            self._model_name = _short_text(self.model.name)
            self._devices = tf_devices.replica_devices(strategy)
            if self._batch_size is None:
                inferred = (self.params or {}).get("batch_size")
                if isinstance(inferred, int) and inferred > 0:
                    self._batch_size = inferred
            with self._pusher_lock:
                self._pusher.start()
        except Exception as error:
            self._warn_once("on_train_begin", error)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._meter.begin_epoch(epoch + 1)
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
            self._meter.end_step(batch, now, None if loss is None else finite_loss(loss))
        except Exception as error:
            self._warn_once("on_train_batch_end", error)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._meter.pause()

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self._meter.pause()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        try:
            with self._pusher_lock:
                finished = self._pusher.stop(FINAL_PUSH_DEADLINE_SECONDS)
            if not finished:
                log.warning(
                    "mirrorwatch: the final snapshot did not reach %s within %.0f s",
                    self.url,
                    FINAL_PUSH_DEADLINE_SECONDS,
                )
        except Exception as error:
            self._warn_once("on_train_end", error)

    def _warn_once(self, hook: str, error: BaseException) -> None:
        with self._warned_lock:
            if hook in self._warned:
                return
            self._warned.add(hook)
        log.warning("mirrorwatch: telemetry error in %s, training goes on: %r", hook, error)

    # -- the pusher thread ----------------------------------------------------------------

    def _find_gpus(self) -> None:
        """Map replicas to GPUs: once per training, off the training thread."""
        overrides = devices.bus_ids_from_env(os.environ.get(devices.REPLICA_PCI_BUS_IDS_ENV))
        self._replicas = devices.match_replicas(self._devices, {}, None, overrides)
        descriptions, per_physical = tf_devices.gpu_descriptions()
        by_index = devices.gpu_bus_ids(descriptions, per_physical)
        replicas = devices.match_replicas(self._devices, by_index, None, overrides)
        bus_ids = [replica.pci_bus_id for replica in replicas if replica.pci_bus_id]
        uuids = tf_devices.nvml_uuids(bus_ids)
        self._replicas = devices.match_replicas(self._devices, by_index, uuids.get, overrides)

    def _sample_memory(self) -> None:
        now = time.monotonic()
        if now - self._memory_sampled < MEMORY_SAMPLE_SECONDS:
            return
        self._memory_sampled = now
        for replica in self._replicas:
            kind_index = devices.device_kind_and_index(replica.device)
            if kind_index is None or kind_index[0] != "GPU":
                continue  # TensorFlow reports zeros for CPUs: absent, not 0
            sample = tf_devices.memory_bytes(f"GPU:{kind_index[1]}")
            if sample is not None:
                self._memory[replica.replica] = sample

    def _windowed_examples_per_second(self, measured_steps: int, measured_seconds: float) -> None:
        if self._batch_size is None:
            return
        samples = self._throughput_samples
        now = time.monotonic()
        while samples and now - samples[0][0] > THROUGHPUT_WINDOW_SECONDS:
            samples.popleft()
        if samples:
            _, steps_then, seconds_then = samples[0]
        else:
            steps_then, seconds_then = 0, 0.0
        if measured_seconds - seconds_then > 0 and measured_steps > steps_then:
            rate = (measured_steps - steps_then) * self._batch_size
            self._examples_per_second = rate / (measured_seconds - seconds_then)
        samples.append((now, measured_steps, measured_seconds))

    def _scaling(self) -> Scaling | None:
        baseline = self._scaling_baseline
        throughput = self.steady_examples_per_second()
        replicas = max(1, len(self._devices))
        if not baseline or not throughput:
            return None
        speedup = throughput / baseline
        if not (0 < speedup <= 1024 and 0 < speedup / replicas <= 2):
            return None
        return Scaling(
            speedup=speedup,
            efficiency_ratio=speedup / replicas,
            baseline_examples_per_second=baseline,
            examples_per_second=throughput,
        )

    def _build_body(self, active: bool, sequence: int, dropped: int) -> bytes:
        self._sample_memory()
        reading = self._meter.read()
        self._windowed_examples_per_second(reading.measured_steps, reading.measured_seconds)
        batch_size = self._batch_size
        replicas = [
            Replica(
                replica=replica.replica,
                device=replica.device[:256],
                uuid=replica.uuid,
                pci_bus_id=replica.pci_bus_id,
                memory_current_bytes=self._memory.get(replica.replica, (None, None))[0],
                memory_peak_bytes=self._memory.get(replica.replica, (None, None))[1],
            )
            for replica in self._replicas
        ]
        snapshot = TrainingSnapshot(
            schema=1,
            session=self.session,
            sequence=sequence,
            active=active,
            model=self._model_name,
            strategy=self._strategy_name,
            replicas=max(1, len(self._devices)),
            global_batch_size=batch_size,
            steps_total=reading.steps_total,
            examples_total=None if batch_size is None else reading.steps_total * batch_size,
            step_duration_seconds=StepDurations(
                bucket_counts=list(reading.bucket_counts),
                count=reading.duration_count,
                sum_seconds=reading.duration_sum_seconds,
            ),
            examples_per_second=self._examples_per_second,
            epoch=reading.epoch,
            loss=reading.loss,
            replica_devices=replicas,
            scaling=self._scaling(),
            telemetry_dropped_total=dropped,
        )
        return snapshot.model_dump_json(by_alias=True, exclude_none=True).encode()
