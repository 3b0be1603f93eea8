"""The PyTorch front end: a training loop calls ``step()``; the shared telemetry does the rest.

Only counting happens here, on the training thread; the snapshot, the loss and the all-reduce
times are read by the pusher thread (mirrorwatch.telemetry), as for the Keras callback.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
from time import perf_counter
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
    it (and the epoch, from 0); :meth:`close` at the end (or use the monitor as a context
    manager): a process that ends without it sends its final snapshot at exit. ``step`` costs one
    clock read and an append, with no lock: the pusher thread counts the steps (the same meter
    as the Keras callback's); no device synchronisation, no network. A loss given as a tensor
    is kept only for the step after each push asks for one, as it is, and read (``float()``)
    on the pusher thread: a snapshot carries the loss of the first step after the push before
    it, at most one interval old. A daemon thread PUTs the worker's cumulative state every
    ``interval`` seconds; telemetry never raises into training: trouble is logged once on the
    ``mirrorwatch.torch`` logger and counted in ``telemetry_dropped_total``.

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
        for epoch in range(epochs):
            for x, y in loader:
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                monitor.step(len(x), loss, epoch=epoch)
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
        self._timing_comm = False  # a DDP model is attached: step() closes its all-reduces
        self._telemetry = Telemetry(config, devices, log, loss=self._read_loss, comm=None)
        self.session = self._telemetry.session
        self._meter = self._telemetry.meter
        self._world = distributed.world_size()
        self._step_done = self._meter.step_done  # bound once: step() is on the training loop
        # The loss slot (see step and _read_loss): step() fills it while _loss_wanted is set.
        self._loss: object = None
        self._loss_wanted = True
        self._loss_value: float | None = None
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
            self._telemetry.snapshots.set_gradient_bytes(
                sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
            )
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                state = HookState(model.process_group, self._comm, self._telemetry.warn_once)
                model.register_comm_hook(state, timed_allreduce)
                self._telemetry.snapshots.attach_comm(self._comm)
                self._timing_comm = True
        except Exception as error:
            self._telemetry.warn_once("attach", error)
        return model

    def step(self, examples: int, loss: object = None, epoch: int | None = None) -> None:
        """One optimizer step is done: ``examples`` trained on in it by this process, and its
        ``loss`` (a float or a tensor, read later on the pusher thread) if given, in epoch
        ``epoch`` (from 0) if given: the epoch stays what the last step said it was.

        The loss is kept only when the pusher thread has asked for one (once per push): a
        snapshot's loss is that of the first step after the push before it, at most one
        interval old. Between those steps no reference is held, so each step's tensor (and its
        autograd graph) is freed where the loop drops it, as it would be without the monitor.
        """
        now = perf_counter()
        try:
            if epoch is not None and (type(epoch) is not int or epoch < 0):
                epoch = self._epoch_number(epoch)
            self._step_done(
                now, examples if type(examples) is int else operator.index(examples), epoch
            )
            if self._loss_wanted and loss is not None:
                # This order, with _read_loss's, hands the slot over without a lock: the pusher
                # takes it only when it holds a loss, this thread only when it is asked for one.
                self._loss_wanted = False
                self._loss = loss
            if self._timing_comm:
                self._comm.end_step()
        except Exception as error:
            self._telemetry.warn_once("step", error)

    def pause(self) -> None:
        """Something that is not training starts (evaluation, a checkpoint): until
        :meth:`resume` or the next step, its time goes into no step's duration."""
        try:
            self._meter.pause()
        except Exception as error:
            self._telemetry.warn_once("pause", error)

    def resume(self) -> None:
        """Training goes on after :meth:`pause`: the next step is timed from now (without it,
        the first step after a pause is counted but not timed)."""
        try:
            self._meter.resume(perf_counter())
        except Exception as error:
            self._telemetry.warn_once("resume", error)

    def set_global_batch_size(self, size: int) -> None:
        """The global batch size, where it is known only once training runs (Lightning)."""
        try:
            if not operator.index(size) >= 1:
                raise ValueError(f"global_batch_size must be positive, got {size}")
            self._telemetry.snapshots.set_global_batch_size(int(size))
            self.global_batch_size = int(size)
        except Exception as error:
            self._telemetry.warn_once("set_global_batch_size", error)

    def close(self) -> None:
        """Send the final snapshot (marked inactive), waiting at most one second. Idempotent.
        A process that ends without it sends the final snapshot at exit."""
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

    def _epoch_number(self, epoch: object) -> int | None:
        """``epoch`` as the schema's epoch (an integer from 0), else None, said once: the step
        still counts."""
        try:
            number = operator.index(epoch)  # type: ignore[arg-type]  # TypeError: no integer
            if number < 0:
                raise ValueError(f"epoch must be a number from 0, got {number}")
        except (TypeError, ValueError) as error:
            self._telemetry.warn_once("step's epoch", error)
            return None
        return int(number)

    # -- the pusher thread ----------------------------------------------------------------

    def _read_loss(self) -> float | None:
        """The loss of the first step since the last read, as a float, and a request for the
        next one; the last value while no step has answered. A tensor is read here, once, off
        the training thread (``float()`` waits for the step that made it, on this thread only).
        """
        kept = self._loss
        if kept is not None:
            self._loss = None  # the tensor (and its graph) goes now, on this thread
            try:
                self._loss_value = _as_float(kept)
            finally:
                self._loss_wanted = True  # last: step() fills the slot only once it is empty
        return self._loss_value

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
