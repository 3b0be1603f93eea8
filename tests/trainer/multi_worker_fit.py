"""One worker of a MultiWorkerMirroredStrategy fit: `python -m tests.trainer.multi_worker_fit URL`.

Run with ``TF_USE_LEGACY_KERAS=1`` and this worker's ``TF_CONFIG`` (Keras 3 cannot fit under the
strategy: keras-team/keras#20585): the tiny job of tests/trainer/training.py for STEPS
synchronous steps with MirrorwatchCallback pushing to URL. Prints the fit's loss as JSON.
"""

from __future__ import annotations

import json
import sys

from tests.trainer.training import FEATURES, tiny_model

BATCH = 16
STEPS = 20


def main(url: str) -> None:
    import tensorflow as tf

    # The strategy first: it starts this task's server before anything else uses TensorFlow.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    from mirrorwatch.trainer import MirrorwatchCallback

    examples = tf.random.stateless_uniform((8 * BATCH, FEATURES), seed=(1, 2))
    targets = tf.random.stateless_uniform((8 * BATCH, 1), seed=(1, 3))
    data = tf.data.Dataset.from_tensor_slices((examples, targets)).repeat().batch(BATCH)
    model = tiny_model(strategy)
    callback = MirrorwatchCallback(url=url, run="multi-worker", global_batch_size=BATCH)
    history = model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[callback])
    json.dump({"loss": history.history["loss"][-1], "worker": callback.worker}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
