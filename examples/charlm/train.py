"""Train the char-level LM, single-process or under torchrun, reporting to the cockpit.

    python examples/charlm/train.py --max-steps 300
    torchrun --standalone --nproc-per-node 2 examples/charlm/train.py --job demo --max-steps 100

The same line with `--resume auto` added continues from the newest intact checkpoint.

What it shows a trainer doing well: every hyper-parameter from TOML, an explicit seed,
a validation split fixed before training, shuffling at read time, warm-up + cosine LR,
gradient clipping, optional AMP, periodic evaluation, atomic checksummed checkpoints and
resuming bit for bit from the newest intact one (random generator states included) --
and the `agent.hook.Reporter` calls that let the cockpit see progress, effect and
efficiency and adjust the run (LR scale, checkpoint or evaluate now), with DDP's
all-reduce timed by a communication hook (`agent.hook.ddp_comm.CommWait`) so that a
rank's wait for a slower one is reported as communication, not as its own work.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from agent.hook import Reporter  # noqa: E402
from agent.hook.ddp_comm import CommWait  # noqa: E402
from examples.charlm import checkpoint  # noqa: E402
from examples.charlm.config import ConfigError, load_config  # noqa: E402
from examples.charlm.data import (  # noqa: E402
    DataConfig,
    DataError,
    TokenShards,
    WindowSampler,
    prepare,
    seed_for,
    validation_starts,
)
from examples.charlm.model import CharLM, ModelConfig  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=None, help="TOML file (default: config.toml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, e.g. --set optim.lr=1e-3 (repeatable)")  # fmt: skip
    p.add_argument("--max-steps", type=int, default=None, help="same as --set train.max_steps=N")
    p.add_argument("--resume", default="none", metavar="none|auto|PATH",
                   help="auto: newest intact checkpoint of the job, if any")  # fmt: skip
    p.add_argument("--run-dir", default=None, help="run dir (default: run.dir, $COCKPIT_RUN_DIR)")
    p.add_argument("--job", default=None, help="job id (default: $COCKPIT_JOB, run.job)")
    return p.parse_args(argv)


def lr_at(step: int, cfg: dict[str, Any]) -> float:
    """Linear warm-up to optim.lr, then cosine decay to optim.min_lr at train.max_steps."""
    o = cfg["optim"]
    warmup, total = o["warmup_steps"], cfg["train"]["max_steps"]
    if step <= warmup:
        return o["lr"] * step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=5, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class Dist:
    """Rank facts and the few collectives the loop needs (no-ops in a single process)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", local) if cuda else torch.device("cpu")
        self.control_group = None  # None: the default group
        if self.world > 1:
            if cuda:
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend="nccl" if cuda else "gloo")
            # Controls are agreed on a CPU group: no device sync in the training loop.
            self.control_group = dist.new_group(backend="gloo") if cuda else None

    def broadcast_controls(self, values: list[float]) -> list[float]:
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.broadcast(t, src=0, group=self.control_group)
        return t.tolist()

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's `value`, in rank order, on rank 0 (None on the others)."""
        if self.world == 1:
            return [value]
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(value, out, dst=0, group=self.control_group)
        return out

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def close(self) -> None:
        """End the ranks' groups together and while the interpreter is whole.

        The barrier keeps a rank from tearing its group down while another is still in
        its last collective or saving the last checkpoint. The caller drops its DDP
        model first, so that `destroy_process_group` frees the groups here, joining
        their threads, rather than at interpreter exit, where a thread still holding a
        Python object can abort the process after the run has finished."""
        if self.world > 1:
            dist.barrier(group=self.control_group)
            dist.destroy_process_group()


def evaluate(model: CharLM, shards: TokenShards, starts: torch.Tensor, batch: int,
             d: Dist, autocast: Any) -> float:  # fmt: skip
    """Mean validation loss over the fixed windows, averaged across all ranks."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=d.device)
    with torch.no_grad():
        for i in range(0, len(starts), batch):
            x, y = shards.batch(starts[i : i + batch])
            with autocast():
                loss = model(x.to(d.device), y.to(d.device))
            total[0] += loss.double() * len(x)
            total[1] += len(x)
    model.train()
    total = d.sum(total)
    return (total[0] / total[1]).item()


PACE_MAX = 60.0  # s: train.pace is a rest between steps, not a way to stop training


def run(cfg: dict[str, Any], args: argparse.Namespace) -> int:
    d = Dist()
    t, m, o = cfg["train"], cfg["model"], cfg["optim"]
    if not 0 <= t["pace"] <= PACE_MAX:
        raise ConfigError(f"train.pace must be 0 to {PACE_MAX:g} seconds, got {t['pace']!r}")
    if d.device.type == "cpu":
        torch.set_num_threads(t["threads"])
    if t["deterministic"] and d.device.type == "cuda":
        # cuBLAS reads this when it first starts, which is at the first matrix product.
        # Not thrown on a CPU: the CPU kernels this model runs, on a fixed number of
        # threads, give the same bits anyway (tests/trainer/test_charlm_exact_resume.py),
        # and the switch imports torch's compiler settings: most of a second of CPU for
        # every rank at its start.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)

    def say(msg: str) -> None:
        if d.rank == 0:
            print(f"[charlm] {msg}", flush=True)

    index = prepare(
        DataConfig(Path(cfg["data"]["dir"]), cfg["data"]["source"], cfg["data"]["max_bytes"],
                   cfg["data"]["shard_bytes"], cfg["data"]["val_per_mille"]),
        log=say,
    )  # fmt: skip
    data_dir = Path(cfg["data"]["dir"])
    train_shards = TokenShards(data_dir, index, "train", m["block_size"])
    val_shards = TokenShards(data_dir, index, "val", m["block_size"])
    sampler = WindowSampler(train_shards, t["batch_size"], cfg["seed"], d.rank, d.world)
    val_starts = validation_starts(val_shards, cfg["eval"]["windows"], d.rank, d.world)

    rep = Reporter(
        run_dir=args.run_dir or cfg["run"]["dir"] or None,
        job=args.job or os.environ.get("COCKPIT_JOB") or cfg["run"]["job"],
        world_size=d.world,
        control=d.rank == 0,  # rank 0 reads operator controls and broadcasts them
        control_every=cfg["control"]["every"],  # where the ranks agree on them
    )
    ckpt_dir = Path(rep.run_dir) / cfg["checkpoint"]["dir"]

    torch.manual_seed(cfg["seed"])  # identical initial weights on every rank
    try:
        model_cfg = ModelConfig(index["vocab_size"], m["block_size"], m["n_layer"],
                                m["n_head"], m["d_model"], m["dropout"])  # fmt: skip
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    model = CharLM(model_cfg).to(d.device)
    # From here on each rank draws from generators of its own (dropout masks differ
    # between ranks), seeded by (seed, rank); a checkpoint keeps their states.
    torch.manual_seed(seed_for(cfg["seed"], d.rank, "torch"))
    random.seed(seed_for(cfg["seed"], d.rank, "python"))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]),
    )  # fmt: skip

    amp = cfg["amp"]
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16}
    if amp["dtype"] not in dtypes:
        raise ConfigError(f"amp.dtype must be bfloat16 or float16, got {amp['dtype']!r}")
    if amp["enabled"] and amp["dtype"] == "float16" and d.device.type != "cuda":
        raise ConfigError("amp.dtype float16 needs a CUDA device; use bfloat16 on CPU")

    def autocast() -> Any:
        if not amp["enabled"]:
            return contextlib.nullcontext()
        return torch.autocast(device_type=d.device.type, dtype=dtypes[amp["dtype"]])

    fp16 = amp["enabled"] and amp["dtype"] == "float16"
    scaler = torch.amp.GradScaler("cuda") if fp16 else None

    step, rng = 0, None
    if args.resume != "none":
        step, rng = resume(args.resume, ckpt_dir, model, opt, scaler, index, rep, d, say)
    ddp = DistributedDataParallel(model) if d.world > 1 else model
    # DDP overlaps its gradient all-reduce with the backward pass: this hook (the same
    # all-reduce, timed) tells the wait for the other ranks apart from this rank's work.
    comm = CommWait().register(ddp) if d.world > 1 else None

    max_steps = t["max_steps"]
    tokens_per_step = t["batch_size"] * m["block_size"]
    if d.rank == 0:
        # The config as run: job and run dir are the ones in effect (the agent's
        # environment or the command line), not the file's defaults.
        cfg["run"].update(job=rep.job, dir=str(rep.run_dir))
        rep.declare(
            # No total_epochs: training ends at max_steps, most often inside an epoch,
            # and a whole number would promise an epoch the run never finishes.
            total_steps=max_steps,
            total_samples=max_steps * t["batch_size"] * d.world,
            total_tokens=max_steps * tokens_per_step * d.world,
            stages=["train"],
            config=cfg,
            seed=cfg["seed"],
            data_version=index["data_version"],
            git_commit=git_commit(),
            flops_per_step=model.flops_per_token() * tokens_per_step * d.world,
            world_size=d.world,
            tags=["example", "charlm"],
        )
    rep.stage("train")
    say(f"{sum(p.numel() for p in model.parameters())} parameters, {d.world} rank(s) on "
        f"{d.device.type}, steps {step + 1}..{max_steps}")  # fmt: skip
    if step >= max_steps:
        say(f"already at step {step} >= train.max_steps={max_steps}; nothing to do")

    def run_eval(at_step: int) -> None:
        val = evaluate(model, val_shards, val_starts, t["batch_size"], d, autocast)
        if d.rank == 0:
            rep.eval(at_step, loss=val)
            say(f"step {at_step}: validation loss {val:.4f}")

    if cfg["eval"]["at_start"] and step < max_steps:
        run_eval(step)
    # A restarted job keeps the operator's LR scale (restored by rank 0's Reporter).
    lr_scale = d.broadcast_controls([rep.lr_scale, 0.0, 0.0])[0]
    if rng is not None:
        # Last, after everything above that might draw: the next draw is the one the
        # interrupted run would have made at step + 1.
        checkpoint.restore_rng(rng, d.device)
    last_print = time.perf_counter()
    every = cfg["control"]["every"]
    fault = cfg["fault"]
    while step < max_steps:
        if t["pace"] > 0:
            time.sleep(t["pace"])  # train.pace: a rest between steps, in no phase
        step += 1
        with rep.phase("data"):
            if fault["data_sleep"] > 0:
                time.sleep(fault["data_sleep"])  # a slow data loader (fault.data_sleep)
            if step == fault["bad_shard_at"] and d.rank == fault["kill_rank"]:
                path, low, high = train_shards.where(sampler.starts(step))
                raise DataError(f"invalid record in shard {path}: windows {low}-{high} fail "
                                "their check (fault.bad_shard_at)")
            x, y = sampler.batch(step)
            x, y = x.to(d.device, non_blocking=True), y.to(d.device, non_blocking=True)
        lr = lr_at(step, cfg) * lr_scale
        for group in opt.param_groups:
            group["lr"] = lr
        computing = time.perf_counter()
        if d.rank == fault["slow_rank"] and fault["slow_by"] > 0 and (
                step >= fault["slow_from"]):
            time.sleep(fault["slow_by"])  # a straggler (fault.slow_rank)
        if step == fault["oom_at"] and d.rank == fault["kill_rank"]:
            raise simulated_oom(len(x), m["block_size"])
        with autocast():
            loss = ddp(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        # The block's wall time: its all-reduce wait as `comm`, the rest as `compute`.
        if comm is not None:
            comm.report(rep, time.perf_counter() - computing)
        else:
            rep.phase_time("compute", time.perf_counter() - computing)
        # GradScaler keeps its scale only as a private tensor; a copy is read later by
        # the Reporter's flusher, so reporting it never syncs the device.
        scale = scaler._scale.detach().clone() if scaler is not None else None
        rep.step(step, loss=loss.detach(), lr=lr, samples=len(x), tokens=x.numel(),
                 grad_norm=grad_norm, loss_scale=scale, epoch=sampler.epoch(step))  # fmt: skip

        want_ckpt = want_eval = False
        if step % every == 0 or step == max_steps:
            with rep.phase("comm"):
                mine = [rep.lr_scale, 0.0, 0.0]
                if d.rank == 0:
                    mine[1] = float(rep.take_request("checkpoint_now"))
                    mine[2] = float(rep.take_request("eval_now"))
                lr_scale, ckpt_flag, eval_flag = d.broadcast_controls(mine)
            want_ckpt, want_eval = ckpt_flag > 0, eval_flag > 0

        if step % cfg["eval"]["every"] == 0 or step == max_steps or want_eval:
            run_eval(step)
        # Every rank takes part (its generator states go into rank 0's file); the
        # condition is the same on all of them, `want_ckpt` having been broadcast.
        if step % cfg["checkpoint"]["every"] == 0 or step == max_steps or want_ckpt:
            with rep.phase("checkpoint"):
                rngs = d.gather(checkpoint.capture_rng(d.device))
                if d.rank == 0:
                    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                             "scaler": scaler.state_dict() if scaler is not None else {},
                             "rng": {"world_size": d.world, "ranks": rngs},
                             "step": step, "seed": cfg["seed"], "config": cfg,
                             "data_version": index["data_version"]}  # fmt: skip
                    saved = checkpoint.save(ckpt_dir, step, state, cfg["checkpoint"]["keep"])
            if d.rank == 0:
                rep.checkpoint_saved(str(saved.path), step, saved.seconds, saved.bytes)
        if step % t["log_every"] == 0:
            now = time.perf_counter()
            say(f"step {step}/{max_steps} loss {loss.item():.4f} lr {lr:.2e} "
                f"{(now - last_print) / t['log_every'] * 1000:.1f} ms/step")  # fmt: skip
            last_print = now
        fault = cfg["fault"]
        if step == fault["kill_at"] > 0 and d.rank == fault["kill_rank"] and (
                args.resume == "none"):
            # The rehearsal of a crash: no flush, no goodbye, as the OOM killer ends a
            # rank. The restart resumes from a checkpoint, so it does not come again.
            print(f"[charlm] rank {d.rank}: killing itself at step {step} (fault.kill_at)",
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    rep.close()
    del ddp, comm  # the last holders of the process group besides torch's own map
    d.close()
    return 0


def simulated_oom(windows: int, block_size: int) -> torch.OutOfMemoryError:
    """The error an allocation past the device's memory raises (`fault.oom_at`), made
    here so the traceback's raising line reads as a real one's, without the error's name."""
    return torch.OutOfMemoryError(
        f"out of memory: tried to allocate the activations of {windows} windows of "
        f"{block_size} characters (fault.oom_at)")


def resume(spec: str, ckpt_dir: Path, model: CharLM, opt: torch.optim.Optimizer,
           scaler: Any, index: dict, rep: Reporter, d: Dist, say: Any,
           ) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    """Load the requested checkpoint into model/optimizer/scaler.

    Returns its step (0: none found) and this rank's random generator states, which the
    caller restores right before the first step (None: the checkpoint has none for this
    rank, and the run continues reproducibly, from the per-rank seeds, but not bit for
    bit -- said in the log).
    """

    def skipped(msg: str) -> None:
        say(msg)
        if d.rank == 0:
            rep.event("checkpoint_skipped", msg)

    if spec == "auto":
        found = checkpoint.load_latest(ckpt_dir, skipped)
        if found is None:
            say(f"no intact checkpoint in {ckpt_dir}; starting from step 0")
            return 0, None
        path, state = found
    else:
        path = Path(spec)
        state = checkpoint.load(path)
    try:  # a file another program saved loads as whatever it holds: a list, a bare dict
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        step = int(state["step"])
    except (KeyError, RuntimeError, ValueError, TypeError, AttributeError) as exc:
        what = f"it holds no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise checkpoint.CheckpointError(
            f"checkpoint {path} does not fit this model/config: {what}"
        ) from None
    if state.get("data_version") != index["data_version"]:
        say(f"note: checkpoint {path.name} was trained on data_version "
            f"{str(state.get('data_version'))[:12]}, now {index['data_version'][:12]}")  # fmt: skip
    rng = _rank_rng(state.get("rng"), d)
    if rng is None:
        say(f"note: checkpoint {path.name} holds no random generator states for "
            f"{d.world} rank(s); the run goes on from per-rank seeds, not bit for bit")  # fmt: skip
    say(f"resumed from {path} (step {step})")
    if d.rank == 0:
        rep.event("resumed", f"resumed from {path.name} at step {step}", step=step,
                  path=str(path))  # fmt: skip
    return step, rng


def _rank_rng(saved: Any, d: Dist) -> dict[str, Any] | None:
    """This rank's generator states from a checkpoint's `rng`, if saved at this world size.

    With another number of ranks the states do not map onto the ranks (nor does the data
    each rank reads), so none is used.
    """
    if not isinstance(saved, dict) or saved.get("world_size") != d.world:
        return None
    ranks = saved.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != d.world or not isinstance(
            ranks[d.rank], dict):
        return None
    return ranks[d.rank]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # `--set` comes last so it wins over `--max-steps`: a fork or an operator's override
    # is appended after the job's own arguments and must take effect.
    overrides = [] if args.max_steps is None else [f"train.max_steps={args.max_steps}"]
    overrides += args.set
    try:
        cfg = load_config(args.config, overrides)
        return run(cfg, args)
    except (ConfigError, DataError, checkpoint.CheckpointError) as exc:
        # Under torchrun, the rank first, as torch prefixes a rank's traceback: which rank
        # failed is what a supervisor reading the job's output needs to name.
        rank = os.environ.get("RANK")
        prefix = f"[rank{rank}]: " if rank is not None and rank.isdigit() else ""
        print(f"{prefix}charlm: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    # A rank that dies of a signal (SIGSEGV, SIGABRT …) prints every thread's Python
    # stack to stderr, which the job's output keeps: torchrun alone names only the signal.
    faulthandler.enable()
    code = main()
    if code == 0:
        # The run is over and closed: its reporter flushed, its process group ended
        # (`Dist.close`), its checkpoints written. The interpreter's own teardown then
        # destroys what torch still holds, whose C++ threads, rarely, abort the process
        # there ("terminate called without an active exception", SIGABRT: seen once in
        # some hundreds of two-rank runs, after the last step), and torchrun reports the
        # finished job as failed. Nothing is left to tear down that the job needs.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit(code)
