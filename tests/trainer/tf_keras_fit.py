"""A fit on tf_keras with MirrorwatchCallback: ``python -m tests.trainer.tf_keras_fit URL``.

Run with ``TF_USE_LEGACY_KERAS=1`` in a process of its own (Keras is chosen once a process),
the tiny job of tests/trainer/training.py under MirroredStrategy over two logical CPUs, once
without and once with the callback, pushing to URL. Prints what the test checks, as JSON.
"""

from __future__ import annotations

import json
import sys
import time

from tests.trainer.training import fit, tiny_model

BATCH = 16
EPOCHS = 3
EXAMPLES = 60  # 16, 16, 16 and a short 12 an epoch


def main(url: str) -> None:
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    strategy = tf.distribute.MirroredStrategy(
        [device.name for device in tf.config.list_logical_devices("CPU")]
    )
    from mirrorwatch.trainer import MirrorwatchCallback
    from mirrorwatch.trainer.keras_api import keras

    plain = fit(tiny_model(strategy), epochs=EPOCHS, batch_size=BATCH, examples=EXAMPLES)
    callback = MirrorwatchCallback(url=url, run="tf-keras", global_batch_size=BATCH, interval=0.05)
    started = time.perf_counter()
    instrumented = fit(
        tiny_model(strategy), [callback], epochs=EPOCHS, batch_size=BATCH, examples=EXAMPLES
    )
    json.dump(
        {
            "keras": keras.__name__,
            "callback_bases": [f"{c.__module__}.{c.__name__}" for c in MirrorwatchCallback.__mro__],
            "keras_3_imported": "keras.src" in sys.modules,
            "plain": plain,
            "instrumented": instrumented,
            "steps": EPOCHS * -(-EXAMPLES // BATCH),
            "examples": EPOCHS * EXAMPLES,
            "fit_seconds": time.perf_counter() - started,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1])
