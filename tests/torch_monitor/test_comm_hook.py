"""The CUDA side of the all-reduce timer, by the rules of torch's CUDA events.

No GPU here: the events are stand-ins that keep ``torch.cuda.Event``'s contract
(aten/src/ATen/cuda/CUDAEvent.h): ``query()`` is True once the device has passed the event,
and ``elapsed_time(other)`` is the milliseconds between two completed events and raises
(``cudaErrorNotReady``) while either is still pending.
"""

from __future__ import annotations

from typing import cast

import pytest
import torch

from mirrorwatch.telemetry.comm import CommMeter
from mirrorwatch.torch.comm_hook import EventSpan


class FakeEvent:
    def __init__(self, at_seconds: float, done: bool = True) -> None:
        self.at = at_seconds
        self.done = done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: FakeEvent) -> float:
        if not (self.done and other.done):
            raise RuntimeError("CUDA error: device not ready")
        return (other.at - self.at) * 1e3


def span(origin: FakeEvent, start: FakeEvent, end: FakeEvent) -> EventSpan:
    return EventSpan(
        cast(torch.cuda.Event, origin), cast(torch.cuda.Event, start), cast(torch.cuda.Event, end)
    )


def test_an_event_span_is_placed_on_the_devices_timeline_by_its_origin() -> None:
    origin = FakeEvent(100.0)
    assert span(origin, FakeEvent(100.5), FakeEvent(100.52)).times() == pytest.approx((0.5, 0.52))


def test_an_event_span_the_device_has_not_reached_is_not_known_yet_and_never_raises() -> None:
    end = FakeEvent(2.0, done=False)
    pending = span(FakeEvent(0.0), FakeEvent(1.0), end)
    assert pending.times() is None
    end.done = True
    assert pending.times() == pytest.approx((1.0, 2.0))


def test_buckets_of_one_step_on_the_device_count_as_their_union() -> None:
    meter, origin = CommMeter(), FakeEvent(0.0)
    meter.end_step()  # the session's first step: never in the histogram
    meter.add(span(origin, FakeEvent(1.000), FakeEvent(1.006)))
    meter.add(span(origin, FakeEvent(1.004), FakeEvent(1.010)))
    meter.end_step()
    reading = meter.read()
    assert reading.count == 1
    assert reading.sum_seconds == pytest.approx(0.010)
