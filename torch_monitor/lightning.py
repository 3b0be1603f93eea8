"""A Lightning callback on the same monitor: ``Trainer(callbacks=[MirrorwatchLightning()])``.

It needs ``lightning`` (not a dependency of mirrorwatch: ``pip install lightning``). The
monitor is built when fitting starts, after Lightning's strategy has set up the process group
and wrapped the model (``on_fit_start``), so a DDP run's ranks share rank 0's run id and the
all-reduces of ``trainer.strategy.model`` are timed. A step is an optimizer step: under
gradient accumulation the examples of the accumulated batches are reported with the step
that used them (``trainer.global_step`` growing), a short last batch with its own examples.

The global batch size, unless given, is the examples of one optimizer step over all ranks:
the first batch's examples x ``trainer.world_size`` x ``trainer.accumulate_grad_batches``.
The epoch is ``trainer.current_epoch`` (from 0). Time that is not training is in no step's
duration: the monitor is paused when validation starts (the sanity check included), at a
checkpoint and at the end of an epoch, and every step is timed from the start of its first
batch after a pause (Lightning's ``on_train_batch_start``), the fit's first step too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import torch

from mirrorwatch.torch.monitor import MirrorwatchMonitor


def batch_examples(batch: Any) -> int:
    """Examples in a batch: the length of its first tensor (``(x, y)``, ``{"x": ...}``, ``x``)."""
    while True:
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() else 1
        if isinstance(batch, Mapping) and batch:
            batch = next(iter(batch.values()))
        elif isinstance(batch, Sequence) and not isinstance(batch, str) and batch:
            batch = batch[0]
        else:
            return 0


class MirrorwatchLightning(pl.Callback):
    """Reports a Lightning fit through :class:`~mirrorwatch.torch.MirrorwatchMonitor`.

    Args: those of the monitor (``url``, ``run``, ``token``, ``global_batch_size``,
    ``interval``, ``worker``), passed to it as they are.

    Example:

    ```python
    trainer = pl.Trainer(strategy="ddp", devices=2, accumulate_grad_batches=3,
                         callbacks=[MirrorwatchLightning(run="resnet50")])
    trainer.fit(model, train_loader, val_loader)
    ```
    """

    def __init__(self, **monitor_args: Any) -> None:
        super().__init__()
        self._monitor_args = monitor_args
        self.monitor: MirrorwatchMonitor | None = None
        self._examples = 0
        self._global_step = 0
        self._paused = True  # until the first batch starts: the fit's set-up is no step

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.monitor = MirrorwatchMonitor(**self._monitor_args)
        model = trainer.strategy.model
        self.monitor.attach(model if isinstance(model, torch.nn.Module) else pl_module)
        self._global_step = trainer.global_step
        self._examples = 0
        self._paused = True  # the first batch's start resumes: every step is timed

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._paused and self.monitor is not None:
            self._paused = False
            self.monitor.resume()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: torch.Tensor | Mapping[str, Any] | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        monitor = self.monitor
        if monitor is None:
            return
        try:
            examples = batch_examples(batch)
        except Exception as error:  # a batch of a shape not foreseen: steps still count
            monitor.warn_once("the Lightning batch", error)
            examples = 0
        self._examples += examples
        if monitor.global_batch_size is None and examples > 0:
            per_step = examples * trainer.world_size * trainer.accumulate_grad_batches
            monitor.set_global_batch_size(per_step)
        if trainer.global_step == self._global_step:
            return  # gradients accumulate: the optimizer has not stepped yet
        self._global_step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        monitor.step(self._examples, loss, epoch=trainer.current_epoch)
        self._examples = 0

    # -- time that is not training ---------------------------------------------------------

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()  # the sanity check runs the validation loop too

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._pause()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pause()

    def _pause(self) -> None:
        if self.monitor is not None and not self._paused:
            self._paused = True
            self.monitor.pause()

    # -- the end ---------------------------------------------------------------------------

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.close()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self.monitor is not None:
            self.monitor.close()
