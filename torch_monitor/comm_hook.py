"""A DDP communication hook: the default all-reduce, timed into the monitor's CommMeter.

DDP calls the hook once per gradient bucket, as the bucket's gradients are ready during the
backward pass, and waits for the future it returns before backward ends
(torch/nn/parallel/distributed.py ``register_comm_hook``), so every all-reduce of a step has
finished, and been added to the meter, before the monitor's ``step()`` closes that step.

The all-reduce itself is torch's default hook (``default_hooks.allreduce_hook``: divide by the
group size, all-reduce, take the result), so training computes exactly what it did without the
monitor. How it is timed depends on where the bucket lives:

- CPU tensors (gloo): the future completes when the all-reduce has (gloo's work runs on the host),
  so the host clock at the call and in the future's callback brackets it.
- CUDA tensors (NCCL): the future completes once the work is queued, before the device has run
  it (CUDA-aware futures, torch/futures ``Future.then``), so host clocks would time the queueing.
  Instead a CUDA event is recorded on the current stream at the call and another in the
  callback, whose stream waits for the all-reduce; the pusher thread reads the time between
  them once the device has passed both (``Event.query``), never waiting for it.
"""

# No ``from __future__ import annotations`` here: DDP compares the hook's annotations with
# dist.GradBucket and torch.futures.Future[torch.Tensor] themselves (``_check_comm_hook`` in
# torch/nn/parallel/distributed.py), and refuses a hook whose annotations are strings.
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket  # torch.distributed re-exports it untyped
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from mirrorwatch.telemetry.comm import CommMeter, WallSpan

Warn = Callable[[str, BaseException], None]


@dataclass(frozen=True)
class EventSpan:
    """An all-reduce bracketed by two CUDA events, placed on the device's timeline by an
    origin event recorded once before them."""

    origin: torch.cuda.Event
    start: torch.cuda.Event
    end: torch.cuda.Event

    def times(self) -> tuple[float, float] | None:
        if not (self.origin.query() and self.start.query() and self.end.query()):
            return None  # the device has not got there yet: a later read
        # elapsed_time: milliseconds between two completed events (cudaEventElapsedTime).
        return self.origin.elapsed_time(self.start) / 1e3, self.origin.elapsed_time(self.end) / 1e3


@dataclass
class HookState:
    """What the hook needs: the group to all-reduce over, where times go, how to complain."""

    process_group: dist.ProcessGroup | None
    meter: CommMeter
    warn: Warn
    _origins: dict[int, torch.cuda.Event] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def origin(self, device: int) -> torch.cuda.Event:
        with self._lock:
            event = self._origins.get(device)
            if event is None:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                self._origins[device] = event
            return event


def timed_allreduce(state: HookState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's default all-reduce of ``bucket``, timed; timing trouble never stops it."""
    started: float | torch.cuda.Event | None = None
    origin: torch.cuda.Event | None = None
    try:
        buffer = bucket.buffer()
        if buffer.is_cuda:
            origin = state.origin(buffer.device.index or 0)
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            started = event
        else:
            started = time.perf_counter()
    except Exception as error:
        state.warn("the all-reduce timer", error)
    future = default_hooks.allreduce_hook(state.process_group, bucket)  # type: ignore[arg-type]
    if started is None:
        return future

    def finished(done: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        try:
            if isinstance(started, float):
                state.meter.add(WallSpan(started, time.perf_counter()))
            elif origin is not None:
                end = torch.cuda.Event(enable_timing=True)
                end.record()  # on the callback's stream, which waits for the all-reduce
                state.meter.add(EventSpan(origin, started, end))
        except Exception as error:
            state.warn("the all-reduce timer", error)
        return done.value()

    return future.then(finished)
