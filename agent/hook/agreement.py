"""Operator controls agreed across the ranks of a job, for the framework adapters.

Every rank has its own Reporter, and each would read the control file at its own
moment: rank 0 could scale its learning rate a step before rank 1 (the replicas of a
data-parallel model then drift apart for good), or save a checkpoint that rank 1 never
joins (a collective inside the save waits forever). So rank 0 alone decides: at a step
every rank reaches (`agree`, a collective), it applies the control lines that arrived,
takes the one-shot requests and broadcasts the result; every rank acts on the broadcast.
Only rank 0's Reporter then acknowledges, once the effect happened (see
`agent.hook.control.OpenLine`): the other ranks are created with `control=False`.

torch is imported only when a process group is up; a single process agrees with itself.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, NamedTuple, Optional

from agent.hook.reporter import Reporter


class Agreed(NamedTuple):
    """What every rank does from now on: the LR factor and the one-shot requests."""

    lr_scale: float
    checkpoint_now: bool
    eval_now: bool


def _group() -> Optional[Any]:
    """torch.distributed when a process group of more than one rank is up."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def decides(dist: Optional[Any] = None) -> bool:
    """Whether this process is the one that reads and acknowledges controls (rank 0)."""
    dist = dist if dist is not None else _group()
    return dist is None or dist.get_rank() == 0


def agree(rep: Optional[Reporter], step: Any, *, device: Any = None,
          refuse: Optional[Mapping[str, str]] = None) -> Agreed:
    """The controls in force from `step` on, the same on every rank.

    A collective: every rank calls it at the same step. Rank 0 applies the control lines
    its Reporter `rep` read (at `step`) and takes the one-shot requests; those named in
    `refuse` (name -> why) are acknowledged as refused there instead, and not broadcast.
    `device`: where the broadcast tensor lives (the rank's GPU under NCCL; by default
    the current CUDA device for NCCL, the CPU otherwise).
    """
    dist = _group()
    values = [1.0, 0.0, 0.0]
    if decides(dist) and rep is not None:
        rep.poll_control(step)
        values[0] = rep.lr_scale
        for i, name in ((1, "checkpoint_now"), (2, "eval_now")):
            if rep.take_request(name):
                if refuse and name in refuse:
                    rep.refuse_request(name, refuse[name], step)
                else:
                    values[i] = 1.0
    if dist is not None:
        import torch

        if device is None:
            device = "cpu"
            if dist.get_backend() == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
        shared = torch.tensor(values, dtype=torch.float64, device=device)
        dist.broadcast(shared, src=0)
        values = shared.tolist()
    return Agreed(float(values[0]), values[1] > 0, values[2] > 0)


def barrier() -> None:
    """Wait until every rank got here (no-op for a single process): before a checkpoint
    is marked complete, every rank's part of it must be on disk."""
    dist = _group()
    if dist is not None:
        dist.barrier()
