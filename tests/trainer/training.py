"""A tiny deterministic Keras job, so tests can compare fits with and without telemetry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

FEATURES = 8
EXAMPLES = 64


def data(seed: int = 0, examples: int = EXAMPLES) -> tuple[Any, Any]:
    generator = np.random.default_rng(seed)
    x = generator.random((examples, FEATURES), dtype=np.float32)
    y = generator.random((examples, 1), dtype=np.float32)
    return x, y


def tiny_model(
    strategy: Any | None = None, steps_per_execution: int = 1, jit_compile: bool | None = None
) -> Any:
    """Always the same weights: seeded before it is built. ``jit_compile``: XLA on or off, as
    given; None leaves it to the Keras in use (tf_keras and Keras 3 default differently)."""
    from mirrorwatch.trainer.keras_api import keras

    keras.utils.set_random_seed(1)

    def build() -> Any:
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1),
            ],
            name="tiny",
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.05),
            loss="mse",
            steps_per_execution=steps_per_execution,
            **({} if jit_compile is None else {"jit_compile": jit_compile}),
        )
        return model

    if strategy is None:
        return build()
    with strategy.scope():
        return build()


def fit(
    model: Any,
    callbacks: Sequence[Any] = (),
    epochs: int = 2,
    batch_size: int = 16,
    examples: int = EXAMPLES,
    **kwargs: Any,
) -> list[float]:
    """The per-epoch losses of a fit over the fixed data, in order (no shuffling)."""
    x, y = data(examples=examples)
    history = model.fit(
        x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0,
        callbacks=list(callbacks), **kwargs,
    )  # fmt: skip
    return [float(loss) for loss in history.history["loss"]]
