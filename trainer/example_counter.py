"""Counts the examples of every batch a Keras fit trains on, as the batch was, on the device.

Keras tells callbacks the batch index, never the batch's size, and the last batch of an epoch
is usually short (1,000 examples at batch 128: seven of 128 and one of 104). So the count is
taken where the batch is: ``model.train_step`` is wrapped to add the batch's leading dimension
to a variable before training on it, and the train function is rebuilt around the wrapper
(Keras 3 binds ``train_step`` when it makes the function, ``TFTrainer._make_function``; tf_keras
looks it up when it traces it). The variable is synchronised on read and summed
(``VariableSynchronization.ON_READ``, ``VariableAggregation.SUM``, as Keras metrics' totals
are): each replica adds its own part of the global batch, inside every step of an execution
of ``steps_per_execution`` steps, and the total is this worker's examples. It is read on the
pusher thread, replica by replica (``experimental_local_results``), so neither the training
thread waits for the device nor a read starts a collective across the workers of a cluster.

TensorFlow only (tf_keras, or Keras 3 on its TensorFlow backend); elsewhere :meth:`install`
says no and the snapshot falls back to steps times the global batch.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("mirrorwatch.trainer")


class ExampleCounter:
    """This worker's training examples since the session began, counted inside the steps."""

    def __init__(self) -> None:
        self._variable: Any = None
        self._strategy: Any = None
        self._train_function: Any = None  # the train function built around the wrapper
        self._traced = threading.Event()  # the wrapper is in the graph that trains
        self._lock = threading.Lock()

    def install(self, model: Any, keras_backend: str) -> bool:
        """Wrap ``model``'s ``train_step`` and rebuild its train function (on train begin,
        before the first step traces it); False where this Keras cannot be counted so."""
        if keras_backend != "tensorflow":
            return False
        if self._train_function is not None and model.train_function is self._train_function:
            return True  # the same model fit again: the function already counts
        import tensorflow as tf

        strategy = model.distribute_strategy
        with self._lock:
            if self._variable is None or strategy is not self._strategy:
                with strategy.scope():
                    self._variable = tf.Variable(
                        self._total(),
                        dtype=tf.int64,
                        trainable=False,
                        name="mirrorwatch_examples",
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM,
                    )
                self._strategy = strategy
            variable = self._variable
        # The model's own train_step, not an earlier counter's wrapper around it.
        step = getattr(model.train_step, "mirrorwatch_wraps", model.train_step)
        traced = self._traced

        def counted_train_step(data: Any) -> Any:
            try:
                first = tf.nest.flatten(data)[0]
                variable.assign_add(tf.cast(tf.shape(first)[0], tf.int64))
                traced.set()
            except Exception as error:  # a batch of a shape not foreseen: steps still count
                log.warning("mirrorwatch: cannot count the examples of a batch: %r", error)
            return step(data)

        counted_train_step.mirrorwatch_wraps = step  # type: ignore[attr-defined]
        model.train_step = counted_train_step
        made = model.make_train_function(force=True)
        self._train_function = model.train_function if made is None else made
        return True

    def read(self) -> int | None:
        """Examples counted so far, or None until a step has run with the wrapper in place."""
        if not self._traced.is_set():
            return None
        with self._lock:
            return self._total()

    def _total(self) -> int:
        variable, strategy = self._variable, self._strategy
        if variable is None:
            return 0
        return sum(int(part.numpy()) for part in strategy.experimental_local_results(variable))
