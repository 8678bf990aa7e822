"""A Hugging Face Trainer job the cockpit sees and steers: copy this file, put your model in.

Run it on one process, or on several under torchrun (CPU/gloo here; on GPUs NCCL):

    python examples/hf_train.py --max-steps 200
    torchrun --standalone --nproc-per-node 2 examples/hf_train.py --max-steps 200

or under the cockpit's agent with a job spec whose `script` is this file. What it takes
to be seen and steered is three things, marked `cockpit:` below:

1. `CockpitCallback()` in the Trainer's callbacks: every logging interval, evaluation and
   checkpoint is reported, and the operator's controls are carried out: `lr_scale` (the
   LR every optimizer step uses, the schedule kept), `checkpoint_now` (`c`), `eval_now`
   (`e`), and `pause`, which is a checkpoint then a stop. Each is acknowledged once done.
2. `output_dir=os.environ.get("COCKPIT_CHECKPOINT_DIR", ...)`: the Trainer saves its
   `checkpoint-N/` folders where the agent looks for them (the callback marks each one
   complete once saved, so a torn one is never resumed from).
3. `trainer.train(resume_from_checkpoint=resume_checkpoint())`: when the agent restarts
   the job (a resume after a pause, a recovery after a crash) it names the checkpoint
   folder in `COCKPIT_RESUME_FROM`; the Trainer restores model, optimizer, scheduler, RNG
   and data position from it, and the callback reports the `resumed` step. On a fresh
   start it is None.

The model is a tiny GPT-2 built from a config (nothing is downloaded) trained on random
token windows: replace `model` and the datasets with yours.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import transformers
from torch.utils.data import Dataset

from agent.hook import resume_checkpoint
from agent.hook.hf import CockpitCallback

VOCAB, SEQ = 128, 32


class RandomTokens(Dataset):
    """Token windows that are their own labels (the model shifts them itself)."""

    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--logging-steps", type=int, default=5)
    p.add_argument("--eval-steps", type=int, default=100)
    p.add_argument("--save-steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=VOCAB,
                                     n_positions=SEQ, bos_token_id=0, eos_token_id=0)
    args = transformers.TrainingArguments(
        output_dir=os.environ.get("COCKPIT_CHECKPOINT_DIR", "checkpoints"),  # cockpit: 2
        max_steps=opts.max_steps, learning_rate=opts.lr, seed=opts.seed,
        per_device_train_batch_size=opts.batch_size, per_device_eval_batch_size=opts.batch_size,
        logging_steps=opts.logging_steps, eval_strategy="steps", eval_steps=opts.eval_steps,
        save_steps=opts.save_steps, save_total_limit=3, ddp_find_unused_parameters=False,
        use_cpu=not torch.cuda.is_available(), report_to=[], disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=RandomTokens(4096, opts.seed), eval_dataset=RandomTokens(64, 1),
        callbacks=[CockpitCallback()],  # cockpit: 1
    )
    trainer.train(resume_from_checkpoint=resume_checkpoint())  # cockpit: 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
