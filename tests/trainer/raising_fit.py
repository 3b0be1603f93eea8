"""A Keras fit that raises after 5 steps: ``python -m tests.trainer.raising_fit URL RUN``.

Keras calls no ``on_train_end`` when an exception goes through ``fit``, so only the callback's
push at process exit can say that the run stopped; the pushes are an hour apart. The tiny job
of tests/trainer/training.py, with a callback after MirrorwatchCallback that raises at the end
of the fifth step, as a NaN check or a broken input pipeline would.
"""

from __future__ import annotations

import sys
from typing import Any

from tests.trainer.training import fit, tiny_model

STEPS = 5
BATCH = 16


def main(url: str, run: str) -> None:
    from mirrorwatch.trainer import MirrorwatchCallback
    from mirrorwatch.trainer.keras_api import keras

    class Diverge(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
        steps = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps += 1
            if self.steps == STEPS:  # the second epoch's first batch: 4 batches an epoch
                raise FloatingPointError(f"loss is nan at step {STEPS}")

    callback = MirrorwatchCallback(url=url, run=run, global_batch_size=BATCH, interval=3600)
    fit(tiny_model(), [callback, Diverge()], epochs=3, batch_size=BATCH)


if __name__ == "__main__":
    main(*sys.argv[1:3])
