"""A Lightning DDP fit on CPU (gloo), as users write one: ``python -m
tests.torch_monitor.lightning_ddp_fit URL RUN CHECKPOINT_DIR``.

Lightning's ``ddp`` strategy starts rank 1 by running this same command again
(``_SubprocessScriptLauncher``), so each rank is a process of its own with MirrorwatchLightning
pushing to URL. EXAMPLES examples, BATCH a batch per device, ACCUMULATE batches an optimizer
step, EPOCHS epochs: each rank trains on half the examples (Lightning's DistributedSampler) in
batches of 8 and a short last one of 2. Validation, the sanity check and each checkpoint take
PAUSE_SECONDS longer than any step here, so a step that held one would show.
"""

from __future__ import annotations

import sys
import time

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from mirrorwatch.torch.lightning import MirrorwatchLightning

EXAMPLES = 100
BATCH = 8
ACCUMULATE = 3
EPOCHS = 2
RANKS = 2
PAUSE_SECONDS = 1.2
CHECKPOINT_EVERY_STEPS = 2


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        time.sleep(PAUSE_SECONDS)

    def on_save_checkpoint(self, checkpoint: dict[str, object]) -> None:
        time.sleep(PAUSE_SECONDS)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(url: str, run: str, checkpoints: str) -> None:
    # MIRRORWATCH_REPLICA_PCI_BUS_IDS (from the test) holds one id per rank: LOCAL_RANK picks.
    torch.set_num_threads(1)  # two ranks on a shared machine
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(EXAMPLES, 4), torch.randn(EXAMPLES, 1))
    trainer = pl.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=RANKS,
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATE,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        callbacks=[
            MirrorwatchLightning(url=url, run=run, interval=0.5),
            pl.callbacks.ModelCheckpoint(
                dirpath=checkpoints, every_n_train_steps=CHECKPOINT_EVERY_STEPS
            ),
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Regression(), DataLoader(data, batch_size=BATCH), DataLoader(data, batch_size=BATCH)
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
