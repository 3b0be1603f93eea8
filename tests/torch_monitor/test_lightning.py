"""The Lightning callback: a real Lightning fit on CPU reports its optimizer steps and examples."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from mirrorwatch.torch.lightning import MirrorwatchLightning, batch_examples
from tests.trainer.recorder import recording_exporter

EXAMPLES = 64
BATCH = 8


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(callback: MirrorwatchLightning, accumulate: int = 1) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(EXAMPLES, 4), torch.randn(EXAMPLES, 1))
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(Regression(), DataLoader(data, batch_size=BATCH))


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_lightning_fit_reports_its_optimizer_steps_and_every_example(accumulate: int) -> None:
    with recording_exporter() as exporter:
        fit(MirrorwatchLightning(url=exporter.url, run="lightning", interval=0.2), accumulate)
    final = exporter.snapshots[-1]
    assert final.active is False
    assert final.steps_total == 2 * EXAMPLES // BATCH // accumulate
    assert final.examples_total == 2 * EXAMPLES
    assert (final.global_batch_size, final.epoch) == (BATCH * accumulate, 1)
    assert final.step_duration_seconds.count == final.steps_total  # each from its batch start
    assert final.loss is not None
    assert final.model == "Regression"


def test_examples_are_the_first_tensors_length_whatever_the_batch_is() -> None:
    x = torch.zeros(5, 3)
    assert batch_examples((x, torch.zeros(5))) == 5
    assert batch_examples({"image": x, "label": torch.zeros(5)}) == 5
    assert batch_examples([[x]]) == 5
    assert batch_examples("text") == 0
