"""Resuming mid-epoch: a killed run goes on at the batch after its last checkpoint.

Keras's BackupAndRestore restores the weights, the optimizer state and the epoch of the last
backup, but then runs that epoch from its first batch again. Here the restore happens before
training, and training is split into fits (:func:`plan`): the rest of the interrupted epoch,
then the epochs after it, each on a dataset positioned at the batch it continues from. Every
callback still sees one training (:class:`OneTraining`), and backups keep being written with
their true epoch and batch (:class:`Checkpoints`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import keras
from keras.src.utils import file_utils  # the paths BackupAndRestore itself reads and writes


@dataclass(frozen=True)
class Position:
    """Where a restored checkpoint was taken."""

    epoch: int  # 0-based epoch in progress
    batches: int  # batches of that epoch trained
    step: int  # the restored optimizer's iteration count


@dataclass(frozen=True)
class Fit:
    """One ``model.fit`` of a training split around a resumed epoch."""

    initial_epoch: int
    epochs: int
    steps_per_epoch: int
    skip: int  # batches of the (endless) dataset trained on before this fit


def plan(position: Position | None, epochs: int, steps: int) -> list[Fit]:
    """The fits that train what is left of ``epochs`` epochs of ``steps`` steps; at least one.

    Keras keeps one iterator over an endless dataset across epochs, so the batch trained at
    epoch ``e``, batch ``b`` is the dataset's batch ``e * steps + b``.
    """
    epoch, done = (0, 0) if position is None else (position.epoch, position.batches)
    fits = []
    if 0 < done < steps and epoch < epochs:
        fits.append(Fit(epoch, epoch + 1, steps - done, epoch * steps + done))
        epoch += 1
    elif done >= steps:  # the backup came at the epoch's last batch
        epoch += 1
    if epoch < epochs or not fits:  # nothing left: a fit of no epochs still ends the training
        fits.append(Fit(epoch, max(epoch, epochs), steps, epoch * steps))
    return fits


class Checkpoints(keras.callbacks.BackupAndRestore):  # type: ignore[misc]  # keras is untyped
    """BackupAndRestore every ``every`` steps, keeping the backup before too; resumes mid-epoch.

    Call :meth:`restore` before training instead of letting ``on_train_begin`` restore. The
    batch indices of a fit that finishes an epoch count from the resumed batch, and backups
    carry the epoch they were taken in (Keras leaves a resumed run's first epoch as 0).
    """

    def __init__(self, directory: str, every: int) -> None:
        super().__init__(directory, save_freq=every, double_checkpoint=True)
        self._resumed: Position | None = None
        self._offset = 0

    def restore(self, model: Any) -> Position | None:
        """Load the last backup into ``model`` (the one before if it is unreadable), if any."""
        self.set_model(model)
        super().on_train_begin()
        model._initial_epoch = None  # each fit is given its first epoch (see plan)
        if not file_utils.exists(self._training_metadata_path):
            return None
        with file_utils.File(self._training_metadata_path, "r") as file:
            metadata = json.loads(file.read())
        # Keras saves the 0-based index of the last batch trained.
        self._resumed = Position(
            epoch=int(metadata["epoch"]),
            batches=int(metadata["batch"]) + 1,
            step=int(model.optimizer.iterations.numpy()),
        )
        return self._resumed

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        pass  # restored already, once: a later fit must not go back to the last backup

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._current_epoch = epoch
        if self._resumed is not None and epoch == self._resumed.epoch:
            self._offset = self._resumed.batches
            self._last_batch_seen = self._offset - 1
        self._resumed = None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_train_batch_end(batch + self._offset, logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_epoch_end(epoch, logs)
        self._offset = 0


class OneTraining(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """Shows ``callback`` several fits as one training: ``begins`` and ``ends`` say which fit
    delivers its ``on_train_begin`` and ``on_train_end``; everything else is passed on."""

    def __init__(self, callback: Any, begins: bool, ends: bool) -> None:
        super().__init__()
        self.callback = callback
        self.begins = begins
        self.ends = ends
        # Keras dispatches batch ends to threads only if every callback says it is safe there.
        self.async_safe = bool(getattr(callback, "async_safe", False))

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        self.callback.set_params(params)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.begins:
            self.callback.on_train_begin(logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.ends:
            self.callback.on_train_end(logs)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_epoch_end(epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_train_batch_end(batch, logs)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_test_begin(logs)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_test_end(logs)

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_test_batch_begin(batch, logs)

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.callback.on_test_batch_end(batch, logs)


class Progress(keras.callbacks.ProgbarLogger):  # type: ignore[misc]  # keras is untyped
    """Keras's progress output, counting the epochs of the whole training, not of one fit."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.total_epochs = epochs

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        self.epochs = self.total_epochs
