"""A Lightning job the cockpit sees and steers: copy this file and put your model in.

Run it on one process, or on several under torchrun (CPU/gloo here; on GPUs Lightning
picks NCCL):

    python examples/lightning_train.py --max-steps 200
    torchrun --standalone --nproc-per-node 2 examples/lightning_train.py --max-steps 200

or under the cockpit's agent with a job spec whose `script` is this file (its `args`
the options). What it takes to be seen and steered is two lines, marked `cockpit:`
below:

1. `CockpitCallback()` in the Trainer's callbacks: every optimizer step, evaluation and
   checkpoint is reported (rank 0 writes the run's records; every rank its steps), and the
   operator's controls are carried out: `lr_scale` (the LR every step uses, scheduler
   kept), `checkpoint_now` (`c`), `eval_now` (`e`), and `pause`, which is a checkpoint
   then a stop.
2. `ckpt_path=os.environ.get("COCKPIT_RESUME_FROM")` in `trainer.fit`: when the agent
   restarts the job (a resume after a pause, a recovery after a crash) it names the
   checkpoint to continue from there; Lightning restores the model, optimizer,
   scheduler and loop position, and the callback reports the `resumed` step.

Where it writes: `COCKPIT_RUN_DIR` / `COCKPIT_JOB` (set by the agent; else ./runs/JOB),
and checkpoints into `COCKPIT_CHECKPOINT_DIR` (set by the agent; else
./checkpoints): a `ModelCheckpoint` without a `dirpath` is pointed there by the callback.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from agent.hook.lightning import CockpitCallback


class Regression(LightningModule):
    """A tiny model: learn y = sum(x) with one linear layer."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def validation_step(self, batch: list, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)
        self.log("val_loss", loss, sync_dist=True)  # the callback's eval loss key

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        # Any scheduler works with lr_scale, stepping per step or per epoch.
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": "step"}}  # fmt: skip


def dataset(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    return TensorDataset(x, x.sum(-1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--save-every", type=int, default=50, help="checkpoint every N steps")
    parser.add_argument("--val-every", type=int, default=50, help="validate every N steps")
    args = parser.parse_args()

    torch.manual_seed(0)
    # torchrun says how many ranks run on this node and in all.
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = Trainer(
        accelerator="auto",
        devices=local,
        num_nodes=max(1, world // local),
        strategy="ddp" if world > 1 else "auto",
        max_steps=args.max_steps,
        val_check_interval=args.val_every,
        check_val_every_n_epoch=None,
        logger=False,
        enable_progress_bar=False,
        default_root_dir=".",
        callbacks=[
            ModelCheckpoint(every_n_train_steps=args.save_every, save_top_k=-1),
            CockpitCallback(),  # cockpit: report, and obey the operator's controls
        ],
    )
    trainer.fit(
        Regression(),
        DataLoader(dataset(4096, 0), batch_size=args.batch_size, shuffle=True),
        DataLoader(dataset(256, 1), batch_size=args.batch_size),
        ckpt_path=os.environ.get("COCKPIT_RESUME_FROM"),  # cockpit: resume where told
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
