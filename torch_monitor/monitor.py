"""The PyTorch front end: a training loop calls ``step()``; the shared telemetry does the rest.

Only counting happens here, on the training thread; the snapshot, the loss and the all-reduce
times are read by the pusher thread (mirrorwatch.telemetry), as for the Keras callback.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
import time
from types import TracebackType
from typing import Any, TypeVar

import torch

from mirrorwatch.telemetry.client import Telemetry, settings
from mirrorwatch.telemetry.comm import CommMeter
from mirrorwatch.telemetry.meter import finite_loss
from mirrorwatch.torch import devices, distributed
from mirrorwatch.torch.comm_hook import HookState, timed_allreduce

log = logging.getLogger("mirrorwatch.torch")

Model = TypeVar("Model", bound=torch.nn.Module)


class MirrorwatchMonitor:
    """Reports a PyTorch training loop's steps, examples, loss and all-reduce time to mirrorwatch.

    Call :meth:`step` after each optimizer step with the examples this process trained on in
    it; :meth:`close` at the end (or use the monitor as a context manager). ``step`` costs one
    clock read and a few additions under a lock: no device synchronisation, no network. A loss
    given as a tensor is kept as it is and read (``float()``) on the pusher thread, at most once
    per push. A daemon thread PUTs the worker's cumulative state every ``interval`` seconds;
    telemetry never raises into training: trouble is logged once on the ``mirrorwatch.torch``
    logger and counted in ``telemetry_dropped_total``.

    :meth:`attach` says what the model is: a ``DistributedDataParallel`` process reports its own
    device as its one replica and gets its all-reduces timed
    (``mirrorwatch_training_allreduce_seconds``); a ``DataParallel`` model reports its
    ``device_ids``. Each replica is joined to its GPU by NVML UUID (by PCI bus id, else the UUID
    CUDA reports) or bus id; CPU stand-ins take ``MIRRORWATCH_REPLICA_PCI_BUS_IDS``.

    Args:
        url: The exporter's base URL. Defaults to ``MIRRORWATCH_URL``, else
            ``http://127.0.0.1:9848``.
        run: The run id, 1 to 64 characters of ``[A-Za-z0-9_.-]``. Defaults to
            ``MIRRORWATCH_RUN``; else rank 0 makes up a fresh one and, in a process group, sends
            it to every rank (a collective: every rank builds its monitor).
        token: Bearer token of the exporter's ingest API. Defaults to
            ``MIRRORWATCH_INGEST_TOKEN``.
        global_batch_size: Examples per step over all processes, where known (reported as is).
        interval: Seconds between pushes.
        worker: This worker's number, 0 to 1023. Defaults to the ``torch.distributed`` rank,
            else ``RANK``, else 0.

    Example:

    ```python
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = DistributedDataParallel(net.cuda(), device_ids=[local_rank])
    with MirrorwatchMonitor(run="resnet50-ddp", global_batch_size=256) as monitor:
        monitor.attach(model)
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(len(x), loss)
    ```
    """

    def __init__(
        self,
        url: str | None = None,
        run: str | None = None,
        token: str | None = None,
        global_batch_size: int | None = None,
        interval: float = 5.0,
        worker: int | None = None,
    ) -> None:
        if worker is None:
            worker = distributed.rank()
        if not run:
            run = os.environ.get("MIRRORWATCH_RUN") or distributed.shared_run_id()
        config = settings(url, run, token, global_batch_size, interval, int(worker))
        self.url, self.run, self.worker = config.url, config.run, config.worker
        self.interval, self.global_batch_size = config.interval, config.global_batch_size
        self._comm = CommMeter()
        self._telemetry = Telemetry(config, devices, log, loss=self._read_loss, comm=None)
        self.session = self._telemetry.session
        self._meter = self._telemetry.meter
        self._world = distributed.world_size()
        self._batch = -1
        self._loss: object = None
        self._loss_read: tuple[object, float | None] = (None, None)
        self._closed = False
        self._close_lock = threading.Lock()
        self._describe(devices.Replicas(None, (devices.current_device(),), ""))
        self._meter.begin_training()
        self._telemetry.start()

    # -- what users call ------------------------------------------------------------------

    def attach(self, model: Model) -> Model:
        """Describe ``model``'s replicas and, for DistributedDataParallel, time its all-reduces
        with a communication hook wrapping the default one. Returns ``model``. Call it before
        the first backward pass (DDP takes hooks only then) and at most once per model."""
        try:
            replicas = devices.replicas_of(model)
            if replicas.degraded is not None:
                log.warning("mirrorwatch: %s", replicas.degraded)
            self._describe(replicas)
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                state = HookState(model.process_group, self._comm, self._telemetry.warn_once)
                model.register_comm_hook(state, timed_allreduce)
                self._telemetry.snapshots.attach_comm(self._comm)
        except Exception as error:
            self._telemetry.warn_once("attach", error)
        return model

    def step(self, examples: int, loss: object = None) -> None:
        """One optimizer step is done: ``examples`` trained on in it by this process, and its
        ``loss`` (a float or a tensor, read later on the pusher thread) if given."""
        now = time.perf_counter()
        try:
            self._batch += 1
            count = examples if type(examples) is int else operator.index(examples)
            self._meter.end_step(self._batch, now, None, count)
            if self._batch == 0:
                self._meter.begin_step(now)  # the steps after the first are timed from here
            if loss is not None:
                # Kept as it is (a detach would cost a new tensor each step). Replacing it frees
                # the previous step's autograd graph here instead of where the loop itself
                # drops its `loss`: moved, not added.
                self._loss = loss
            self._comm.end_step()
        except Exception as error:
            self._telemetry.warn_once("step", error)

    def close(self) -> None:
        """Send the final snapshot (marked inactive), waiting at most one second. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._telemetry.stop()
        except Exception as error:
            self._telemetry.warn_once("close", error)

    def __enter__(self) -> MirrorwatchMonitor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def warn_once(self, where: str, error: BaseException) -> None:
        """Log ``error`` once for ``where`` on the monitor's logger (for front ends on it)."""
        self._telemetry.warn_once(where, error)

    @property
    def telemetry_dropped_total(self) -> int:
        """Pushes given up on so far: exporter unreachable, too slow, or rejecting them."""
        return self._telemetry.pusher.dropped_total

    @property
    def steps_total(self) -> int:
        """Steps counted since this monitor's session began."""
        return self._meter.read().steps_total

    # -- the pusher thread ----------------------------------------------------------------

    def _read_loss(self) -> float | None:
        """The last step's loss as a float; a tensor is read once, here, off the training
        thread (``float()`` waits for the step that made it, on this thread only)."""
        current = self._loss
        seen, value = self._loss_read
        if current is seen:
            return value
        value = _as_float(current)
        self._loss_read = (current, value)
        return value

    def _describe(self, replicas: devices.Replicas) -> None:
        in_sync = self._world * len(replicas.devices) if self._world > 1 else None
        self._telemetry.snapshots.describe_job(
            model=replicas.model or None,
            strategy=replicas.strategy,
            replica_devices=replicas.devices,
            batch_size=None,
            replicas_in_sync=in_sync,
        )


def _as_float(loss: Any) -> float | None:
    if loss is None:
        return None
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            return None
        loss = loss.detach().float().item()
    return finite_loss(loss)
