"""MirrorwatchCallback under Keras 3's async dispatch of batch-end hooks, in real fits.

Keras runs batch-end hooks on a thread pool (``CallbackList._configure_async_dispatch``) only
when the backend's ``IS_THREAD_SAFE`` is True and every callback overriding one is
``async_safe``. TensorFlow's flag is False (keras-team/keras#20383, tensorflow#78338), so with
TensorFlow the hooks stay on the training thread: the first test pins that down, and will say
so if a Keras release changes it. The fit tests set the flag for one fit, so Keras's own
executor, flush points and concurrency drive the callback, as on JAX or PyTorch, under
MirroredStrategy over two logical CPUs.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

import keras
import numpy as np
import pytest

from mirrorwatch.trainer import MirrorwatchCallback
from tests.trainer.recorder import recording_exporter
from tests.trainer.training import FEATURES, tiny_model

pytestmark = pytest.mark.usefixtures("clean_env")
BATCH = 8
STEPS_PER_EPOCH = 12
EPOCHS = 3


class Probe(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """An async-safe callback that records where Keras ran batch ends, and their losses."""

    async_safe = True

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()
        self.losses: dict[tuple[int, int], float] = {}
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.threads.add(threading.get_ident())
        self.losses[(self.epoch, batch)] = logs["loss"]
        if batch % 2 == 0:  # hold even batches back: odd ones overtake them
            time.sleep(0.02)


@pytest.fixture
def callback_lists(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every CallbackList Keras builds in the test, once it has decided on async dispatch."""
    from keras.src.callbacks.callback_list import CallbackList

    built: list[Any] = []
    configure = CallbackList._configure_async_dispatch

    def recording(self: Any, callbacks: Any) -> None:
        configure(self, callbacks)
        built.append(self)

    monkeypatch.setattr(CallbackList, "_configure_async_dispatch", recording)
    return built


@pytest.fixture
def thread_safe_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keras believes the backend thread-safe: batch-end hooks go to its thread pool."""
    from keras.src import backend

    monkeypatch.setattr(backend, "IS_THREAD_SAFE", True)


def data(examples: int) -> tuple[Any, Any]:
    generator = np.random.default_rng(3)
    x = generator.random((examples, FEATURES), dtype=np.float32)
    y = generator.random((examples, 1), dtype=np.float32)
    return x, y


def spy_on_end_order(callback: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch indices in the order the callback's meter received them."""
    order: list[int] = []
    end_step = callback._meter.end_step

    def recording(batch: int, now: float, loss: float | None) -> None:
        order.append(batch)
        end_step(batch, now, loss)

    monkeypatch.setattr(callback._meter, "end_step", recording)
    return order


def test_tensorflow_backend_keeps_batch_end_hooks_on_the_training_thread(
    strategy: Any, callback_lists: list[Any]
) -> None:
    from keras.src.callbacks.callback_list import CallbackList

    probe = Probe()
    callback = MirrorwatchCallback(url="http://127.0.0.1:9", run="sync", interval=60)
    x, y = data(STEPS_PER_EPOCH * BATCH)
    tiny_model(strategy).fit(
        x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[probe, callback]
    )
    assert [c._async_train for c in callback_lists] == [False]
    assert probe.threads == {threading.main_thread().ident}
    assert callback.steps_total == STEPS_PER_EPOCH
    # What tells Keras the callback may go async, where the backend allows it.
    assert MirrorwatchCallback.async_safe is True
    assert not CallbackList([callback])._async_train  # TensorFlow: IS_THREAD_SAFE is False


@pytest.mark.usefixtures("thread_safe_backend")
def test_async_safe_callback_keeps_keras_dispatching_batch_ends_off_the_training_thread(
    callback_lists: list[Any],
) -> None:
    class Legacy(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    callback = MirrorwatchCallback(url="http://127.0.0.1:9", run="async")
    assert keras.callbacks.CallbackList([callback])._async_train
    assert not keras.callbacks.CallbackList([callback, Legacy()])._async_train


@pytest.mark.usefixtures("thread_safe_backend")
def test_async_dispatched_fit_reports_exact_totals(
    strategy: Any,
    callback_lists: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()  # first: it holds even batches back before the callback sees them
    x, y = data(STEPS_PER_EPOCH * BATCH)
    with recording_exporter() as exporter, caplog.at_level(logging.WARNING, "mirrorwatch"):
        callback = MirrorwatchCallback(
            url=exporter.url, run="async", global_batch_size=BATCH, interval=0.05
        )
        order = spy_on_end_order(callback, monkeypatch)
        started = time.perf_counter()
        tiny_model(strategy).fit(
            x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
            validation_data=data(4 * BATCH), callbacks=[probe, callback],
        )  # fmt: skip
        wall = time.perf_counter() - started
    assert not caplog.records
    # Keras really dispatched asynchronously, on several threads, and out of order.
    assert len(callback_lists) == 1
    assert callback_lists[0]._async_train
    assert threading.main_thread().ident not in probe.threads
    assert len(order) == EPOCHS * STEPS_PER_EPOCH
    assert any(later < earlier for earlier, later in itertools.pairwise(order))
    # ... and the numbers are exact.
    assert not exporter.invalid
    final = exporter.snapshots[-1]
    assert not final.active
    assert final.steps_total == EPOCHS * STEPS_PER_EPOCH
    assert final.examples_total == EPOCHS * STEPS_PER_EPOCH * BATCH
    assert final.epoch == EPOCHS - 1  # from 0
    assert final.loss == probe.losses[(EPOCHS, STEPS_PER_EPOCH - 1)]  # by batch, not arrival
    durations = final.step_duration_seconds
    assert 0 < durations.count <= final.steps_total
    assert 0 <= durations.sum_seconds <= wall
    assert list(durations.bucket_counts) == sorted(durations.bucket_counts)
    reading = callback._meter.read()
    assert 0 < reading.measured_seconds <= durations.sum_seconds
    assert final.examples_per_second is not None
    assert final.examples_per_second > 0
    steps = [snapshot.steps_total for snapshot in exporter.snapshots]
    assert steps == sorted(steps)
