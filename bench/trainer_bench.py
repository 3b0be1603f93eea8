"""Trainer benchmark: the callback's cost per step, and a fit with it against one without.

Both inside real Keras fits under MirroredStrategy over two logical CPU devices. Hook time is
the callback's own ``on_train_batch_begin`` + ``on_train_batch_end``, timed around each call
(target <= 20 us); the pusher thread pushes to a loopback sink meanwhile. The fit comparison
alternates with and without the callback on one already-traced model; CPU timings on this
shared machine vary by about +-20%, so the spread is reported with the ratio.

    python bench/trainer_bench.py --out bench/results/trainer.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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
    import keras
    import numpy as np

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
    """Wraps a callback's per-step hooks and records how long each step's pair took, in ns."""

    def __init__(self, callback: Any) -> None:
        self.per_step_ns: list[int] = []
        self._begin_ns = 0
        begin, end = callback.on_train_batch_begin, callback.on_train_batch_end

        def timed_begin(batch: int, logs: Any = None) -> None:
            started = time.perf_counter_ns()
            begin(batch, logs)
            self._begin_ns = time.perf_counter_ns() - started

        def timed_end(batch: int, logs: Any = None) -> None:
            started = time.perf_counter_ns()
            end(batch, logs)
            self.per_step_ns.append(self._begin_ns + time.perf_counter_ns() - started)

        callback.on_train_batch_begin = timed_begin
        callback.on_train_batch_end = timed_end


def timer_floor_ns(samples: int = 100_000) -> float:
    """What two perf_counter_ns() calls around nothing cost: subtracted from the hook time."""
    costs = []
    for _ in range(samples):
        started = time.perf_counter_ns()
        costs.append(time.perf_counter_ns() - started)
    return statistics.median(costs)


def timed_fit(strategy: Any, callback: Any, steps: int) -> list[float]:
    """Per-step hook time in us (timer cost subtracted) of ``callback`` in a fit."""
    model, (x, y) = model_and_data(strategy)
    timed = TimedHooks(callback)
    epochs = max(1, steps // 50)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[callback])
    floor = 2 * timer_floor_ns()  # two timed calls per step
    return sorted(max(0.0, ns - floor) / 1000 for ns in timed.per_step_ns[1:])


def hook_cost(strategy: Any, url: str, steps: int) -> dict[str, Any]:
    import keras

    from mirrorwatch.trainer import MirrorwatchCallback

    callback = MirrorwatchCallback(url=url, run="bench", global_batch_size=BATCH, interval=0.5)
    per_step = timed_fit(strategy, callback, steps)
    # The same two calls into a callback that does nothing: Python's cost of calling any
    # hook right after a step, when TensorFlow has left the CPU caches cold.
    empty = timed_fit(strategy, keras.callbacks.Callback(), steps)
    return {
        "steps": len(per_step),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/trainer.json"))
    parser.add_argument("--steps", type=int, default=500, help="steps per timed fit")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()

    import tensorflow as tf

    strategy = setup()
    with recording_exporter() as sink:
        hooks = hook_cost(strategy, sink.url, args.steps)
        fit = fit_overhead(strategy, sink.url, args.steps, args.repetitions)
    result = {
        "benchmark": "trainer",
        "machine": {**machine(), "tensorflow": tf.__version__},
        "setup": "MirroredStrategy over 2 logical CPU devices, Dense 32-64-1, global batch 64",
        "targets": TARGETS,
        "hook_us_per_step": hooks,
        "fit_with_vs_without_callback": fit,
        "met": {"hook_us_per_step_p50": hooks["p50"] <= TARGETS["hook_us_per_step_p50"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"{'measure':<40}{'value':>12}{'target':>10}")
    print(f"{'hook us/step p50':<40}{hooks['p50']:>12}{'<= 20':>10}")
    print(f"{'hook us/step p99':<40}{hooks['p99']:>12}{'':>10}")
    print(f"{'hook us/step mean':<40}{hooks['mean']:>12}{'':>10}")
    print(f"{'empty callback us/step p50 (floor)':<40}{hooks['empty_callback_p50']:>12}{'':>10}")
    print(f"{'fit time with/without, median':<40}{fit['ratio_median']:>12}{'':>10}")
    spread = f"{fit['ratio_min']}..{fit['ratio_max']}"
    print(f"{'fit time with/without, min..max':<40}{spread:>12}{'':>10}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
