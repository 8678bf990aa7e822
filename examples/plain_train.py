"""A plain PyTorch training loop that the cockpit can watch and steer: the whole recipe.

    python examples/plain_train.py --steps 300                 # alone: records to ./runs/
    cockpit run -- python examples/plain_train.py --steps 1000 --sleep 0.02   # watched
    torchrun --standalone --nproc-per-node 2 examples/plain_train.py   # two ranks (gloo)

A tiny MLP learns a fixed random function. Everything a trainer needs to be seen and
controlled is here, each in a few lines: steps with loss and LR, evaluations,
checkpoints with their completion marker, the operator's controls (LR scale, checkpoint
now, evaluate now -- a pause is a checkpoint now followed by a stop) and resuming from
the checkpoint the agent names. The batch of a step is a function of (seed, rank, step),
so a resumed run trains on exactly what the interrupted one would have.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from agent.hook import Reporter, mark_checkpoint_complete, resume_checkpoint
from agent.hook.agreement import agree


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per step, to watch it")
    p.add_argument("--resume", default=None,
                   help="checkpoint to resume from (default: $COCKPIT_RESUME_FROM, which "
                        "the agent sets when it restarts the job from a checkpoint)")
    return p.parse_args()


def batch(seed: int, rank: int, step: int, size: int, teacher: nn.Module):
    """Inputs and targets of `step` on `rank`: a pure function, hence exact resumes."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + step)
    x = torch.randn(size, 16, generator=g)
    with torch.no_grad():
        return x, teacher(x)


def main() -> int:
    args = parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)  # the same teacher and initial weights on every rank
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    def schedule(step: int) -> float:  # warm-up, then cosine decay to 10 %
        if step < args.warmup:
            return (step + 1) / args.warmup
        done = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)

    # Run dir and job come from the agent's environment (else ./runs/JOB). Rank 0 alone
    # reads the operator's controls; `agree` hands them to every rank at the same step.
    rep = Reporter(control=rank == 0)
    ckpt_dir = Path(os.environ.get("COCKPIT_CHECKPOINT_DIR") or Path(rep.run_dir) / "checkpoints")
    step = 0
    resume = args.resume or resume_checkpoint()
    if resume:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = int(state["step"])
        if rank == 0:
            rep.resumed(step, path=resume)  # the cockpit's ↻ marker and recovery record
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if rank == 0:
        rep.declare(total_steps=args.steps, total_samples=args.steps * args.batch * world,
                    config=vars(args), seed=args.seed, world_size=world)

    def evaluate(at: int) -> None:
        x, y = batch(args.seed, 10_000 + rank, 0, 512, teacher)  # fixed validation set
        with torch.no_grad():
            loss = nn.functional.mse_loss(model(x), y)
        if world > 1:
            dist.all_reduce(loss)
            loss /= world
        if rank == 0:
            rep.eval(at, loss=loss.item())  # also acknowledges an `eval_now`

    def save(at: int) -> None:
        if rank == 0:  # the replicas are identical: rank 0 writes the whole state
            started = time.perf_counter()
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            path = ckpt_dir / f"step-{at:08d}.pt"
            tmp = path.with_name(f".{path.name}.tmp")
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "step": at}, tmp)
            os.replace(tmp, path)
            # Only a checkpoint with its marker counts: the agent resumes from it.
            mark_checkpoint_complete(path, at)
            rep.checkpoint_saved(str(path), at, time.perf_counter() - started)
            for old in sorted(ckpt_dir.glob("step-*.pt"))[:-3]:  # keep the newest 3
                old.unlink()

    while step < args.steps:
        step += 1
        controls = agree(rep, step)  # every rank: the operator's LR scale and requests
        x, y = batch(args.seed, rank, step, args.batch, teacher)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        # The operator's scale multiplies the schedule's LR for this update only, so the
        # scheduler keeps its own values (and a checkpoint holds them unscaled).
        scheduled = [g["lr"] for g in opt.param_groups]
        for g, lr in zip(opt.param_groups, scheduled, strict=True):
            g["lr"] = lr * controls.lr_scale
        opt.step()
        lr_used = opt.param_groups[0]["lr"]
        for g, lr in zip(opt.param_groups, scheduled, strict=True):
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        sched.step()
        rep.step(step, loss=loss.detach(), lr=lr_used, samples=len(x))
        rep.controls_in_effect(step)  # this step trained with the scale: acknowledge it
        if controls.eval_now or step % args.eval_every == 0 or step == args.steps:
            evaluate(step)
        if controls.checkpoint_now or step % args.checkpoint_every == 0 or (
                step == args.steps):
            save(step)  # a `checkpoint_now` is acknowledged by rep.checkpoint_saved
        if args.sleep:
            time.sleep(args.sleep)
    rep.close()
    if world > 1:
        # Together (no rank tears down while rank 0 still saves), and with the DDP model
        # gone, so that the group's threads are joined here and not at interpreter exit.
        del ddp
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
