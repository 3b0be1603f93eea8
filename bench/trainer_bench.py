"""Trainer benchmark: the callback's cost per step, and a fit with it against one without.

Both inside real Keras fits under MirroredStrategy over two logical CPU devices. Hook time is
the callback's own ``on_train_batch_begin`` + ``on_train_batch_end`` of one step, timed around
each call (target <= 20 us); the pusher thread pushes to a loopback sink meanwhile. The two are
paired by epoch and batch index, not by call order, so the pairs stay right where Keras runs
batch ends on its thread pool (async dispatch; not on TensorFlow, whose ``IS_THREAD_SAFE`` is
False): there the end hook's time is spent off the training thread, and the result says where
the ends ran and what the training thread itself paid per step. The fit comparison
alternates with and without the callback on one already-traced model; CPU timings on this
shared machine vary by about +-20%, so the spread is reported with the ratio.

Measured twice: on Keras 3 in this process, and on tf_keras (``TF_USE_LEGACY_KERAS=1``, what
MultiWorkerMirroredStrategy trains on) in a child process, since a process chooses its Keras
once; the tf_keras figures are under ``tf_keras`` in the results.

    python bench/trainer_bench.py --out bench/results/trainer.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from tests.trainer.recorder import recording_exporter

TARGETS = {"hook_us_per_step_p50": 20.0}
BATCH = 64


def setup() -> Any:
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)


def model_and_data(strategy: Any) -> tuple[Any, Any]:
    import numpy as np

    from mirrorwatch.trainer.keras_api import keras

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)],
            name="bench",
        )
        model.compile(optimizer="sgd", loss="mse")
    generator = np.random.default_rng(0)
    x = generator.random((BATCH * 50, 32), dtype=np.float32)
    y = generator.random((BATCH * 50, 1), dtype=np.float32)
    return model, (x, y)


class TimedHooks:
    """Wraps a callback's per-step hooks and records how long each call took, in ns.

    Begins run on the training thread, in order; an index going back there starts an epoch.
    Ends may run on Keras's callback threads, concurrently and out of order, so each is keyed
    by (epoch, batch): Keras waits for every pending end before ``on_epoch_end``, so an end
    always runs while the epoch count is still its own.
    """

    def __init__(self, callback: Any) -> None:
        self.begin_ns: dict[tuple[int, int], int] = {}
        self.end_ns: dict[tuple[int, int], int] = {}
        self.end_threads: set[int] = set()
        self._epoch = 0
        self._last_begin = -1
        begin, end = callback.on_train_batch_begin, callback.on_train_batch_end

        def timed_begin(batch: int, logs: Any = None) -> None:
            started = time.perf_counter_ns()
            begin(batch, logs)
            elapsed = time.perf_counter_ns() - started
            if batch <= self._last_begin:
                self._epoch += 1
            self._last_begin = batch
            self.begin_ns[(self._epoch, batch)] = elapsed

        def timed_end(batch: int, logs: Any = None) -> None:
            started = time.perf_counter_ns()
            end(batch, logs)
            elapsed = time.perf_counter_ns() - started
            self.end_ns[(self._epoch, batch)] = elapsed
            self.end_threads.add(threading.get_ident())

        callback.on_train_batch_begin = timed_begin
        callback.on_train_batch_end = timed_end

    def per_step_ns(self) -> list[tuple[int, int]]:
        """(begin, end) of each step in order; the first step (tracing) left out."""
        keys = sorted(self.begin_ns.keys() & self.end_ns.keys())[1:]
        return [(self.begin_ns[key], self.end_ns[key]) for key in keys]

    @property
    def ends_on_training_thread(self) -> bool:
        return self.end_threads == {threading.main_thread().ident}


def timer_floor_ns(samples: int = 100_000) -> float:
    """What two perf_counter_ns() calls around nothing cost: subtracted from the hook time."""
    costs = []
    for _ in range(samples):
        started = time.perf_counter_ns()
        costs.append(time.perf_counter_ns() - started)
    return statistics.median(costs)


def timed_fit(strategy: Any, callback: Any, steps: int) -> tuple[list[float], list[float], bool]:
    """Per-step hook time in us (timer cost subtracted) of ``callback`` in a fit, sorted: both
    hooks, and what of it the training thread paid; and whether the ends ran on that thread."""
    model, (x, y) = model_and_data(strategy)
    timed = TimedHooks(callback)
    epochs = max(1, steps // 50)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[callback])
    floor = timer_floor_ns()  # per timed call
    synchronous = timed.ends_on_training_thread
    pairs = [(max(0.0, b - floor), max(0.0, e - floor)) for b, e in timed.per_step_ns()]
    both = sorted((b + e) / 1000 for b, e in pairs)
    training_thread = sorted((b + e if synchronous else b) / 1000 for b, e in pairs)
    return both, training_thread, synchronous


def hook_cost(strategy: Any, url: str, steps: int) -> dict[str, Any]:
    from mirrorwatch.trainer import MirrorwatchCallback
    from mirrorwatch.trainer.keras_api import keras

    callback = MirrorwatchCallback(url=url, run="bench", global_batch_size=BATCH, interval=0.5)
    per_step, training_thread, synchronous = timed_fit(strategy, callback, steps)
    # The same two calls into a callback that does nothing: Python's cost of calling any
    # hook right after a step, when TensorFlow has left the CPU caches cold. Async-safe like
    # the callback, so Keras dispatches both fits' batch ends the same way.
    empty_callback = keras.callbacks.Callback()
    empty_callback.async_safe = True
    empty, _, _ = timed_fit(strategy, empty_callback, steps)
    return {
        "steps": len(per_step),
        "batch_end_dispatch": "synchronous" if synchronous else "async",
        "training_thread_p50": round(statistics.median(training_thread), 2),
        "p50": round(statistics.median(per_step), 2),
        "p90": round(per_step[int(len(per_step) * 0.9) - 1], 2),
        "p99": round(per_step[int(len(per_step) * 0.99) - 1], 2),
        "mean": round(statistics.fmean(per_step), 2),
        "empty_callback_p50": round(statistics.median(empty), 2),
        "pushes": callback._pusher.sequence,
    }


def fit_overhead(strategy: Any, url: str, steps: int, repetitions: int) -> dict[str, Any]:
    from mirrorwatch.trainer import MirrorwatchCallback

    model, (x, y) = model_and_data(strategy)
    epochs = max(1, steps // 50)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)  # trace once, outside the timing
    without: list[float] = []
    with_callback: list[float] = []
    for _ in range(repetitions):
        for times, callbacks in ((without, []), (with_callback, None)):
            if callbacks is None:
                callbacks = [MirrorwatchCallback(url=url, run="bench-fit", global_batch_size=BATCH)]
            started = time.perf_counter()
            model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=callbacks)
            times.append(time.perf_counter() - started)
    ratios = [w / b for w, b in zip(with_callback, without, strict=True)]
    return {
        "steps": epochs * 50,
        "repetitions": repetitions,
        "without_seconds": [round(t, 4) for t in without],
        "with_seconds": [round(t, 4) for t in with_callback],
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_min": round(min(ratios), 4),
        "ratio_max": round(max(ratios), 4),
    }


def measure(steps: int, repetitions: int) -> dict[str, Any]:
    """Both measures on this process's Keras."""
    from mirrorwatch.trainer.keras_api import keras

    strategy = setup()
    with recording_exporter() as sink:
        hooks = hook_cost(strategy, sink.url, steps)
        fit = fit_overhead(strategy, sink.url, steps, repetitions)
    return {
        "keras": f"{keras.__name__} {keras.__version__}",
        "hook_us_per_step": hooks,
        "fit_with_vs_without_callback": fit,
    }


def measure_on_tf_keras(steps: int, repetitions: int) -> dict[str, Any]:
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"}
    args = [sys.executable, __file__, "--child", f"--steps={steps}", f"--repetitions={repetitions}"]
    child = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise SystemExit(f"the tf_keras measure failed:\n{child.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(child.stdout)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/trainer.json"))
    parser.add_argument("--steps", type=int, default=500, help="steps per timed fit")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # the tf_keras half, for the parent
        print(json.dumps(measure(args.steps, args.repetitions)))
        return
    os.environ.pop("TF_USE_LEGACY_KERAS", None)  # this process measures Keras 3

    import tensorflow as tf

    keras_3 = measure(args.steps, args.repetitions)
    tf_keras = measure_on_tf_keras(args.steps, args.repetitions)
    hooks, fit = keras_3["hook_us_per_step"], keras_3["fit_with_vs_without_callback"]
    legacy_hooks = tf_keras["hook_us_per_step"]
    legacy_fit = tf_keras["fit_with_vs_without_callback"]
    target = TARGETS["hook_us_per_step_p50"]
    result = {
        "benchmark": "trainer",
        "machine": {**machine(), "tensorflow": tf.__version__},
        "setup": "MirroredStrategy over 2 logical CPU devices, Dense 32-64-1, global batch 64",
        "targets": TARGETS,
        "keras": keras_3["keras"],
        "hook_us_per_step": hooks,
        "fit_with_vs_without_callback": fit,
        "tf_keras": tf_keras,
        "met": {
            "hook_us_per_step_p50": hooks["p50"] <= target,
            "tf_keras_hook_us_per_step_p50": legacy_hooks["p50"] <= target,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    rows = [
        ("hook us/step p50", "p50", "<= 20"),
        ("hook us/step p99", "p99", ""),
        ("hook us/step mean", "mean", ""),
        ("batch ends dispatched", "batch_end_dispatch", ""),
        ("training thread us/step p50", "training_thread_p50", ""),
        ("empty callback us/step p50 (floor)", "empty_callback_p50", ""),
    ]
    print(f"{'measure':<40}{'Keras 3':>16}{'tf_keras':>16}{'target':>10}")
    for label, key, goal in rows:
        print(f"{label:<40}{hooks[key]:>16}{legacy_hooks[key]:>16}{goal:>10}")
    median = "fit time with/without, median"
    print(f"{median:<40}{fit['ratio_median']:>16}{legacy_fit['ratio_median']:>16}{'':>10}")
    spreads = [f"{f['ratio_min']}..{f['ratio_max']}" for f in (fit, legacy_fit)]
    print(f"{'fit time with/without, min..max':<40}{spreads[0]:>16}{spreads[1]:>16}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
