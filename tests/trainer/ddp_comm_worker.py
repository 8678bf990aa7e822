"""One rank of `test_ddp_comm_wait`: plain DDP and DDP with `CommWait` on the same
gradients, and the wait each rank measured when one of them is made slow. Run by
torchrun; writes `rank<N>.pt` into the folder given as its argument."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.hook.ddp_comm import CommWait  # noqa: E402

SLOW_RANK = 1
SLOW_BY = 0.5


def grads(hook: CommWait | None) -> list[torch.Tensor]:
    torch.manual_seed(0)  # the same weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(37, 53), torch.nn.GELU(),
                                torch.nn.Linear(53, 11))  # fmt: skip
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    if hook is not None:
        hook.register(ddp)
    torch.manual_seed(100 + dist.get_rank())  # other data on each rank
    ddp(torch.randn(64, 37) * 3).pow(2).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hook = CommWait()
    before = hook.take()  # no all-reduce yet
    plain, hooked = grads(None), grads(hook)
    hook.take()
    # A straggler: every rank's backward waits in its all-reduces for the slow one.
    torch.manual_seed(7)
    ddp = DistributedDataParallel(torch.nn.Linear(37, 11))  # (its set-up is a collective)
    timed = CommWait().register(ddp)
    if rank == SLOW_RANK:
        time.sleep(SLOW_BY)
    ddp(torch.randn(8, 37)).sum().backward()
    waited, again = timed.take(), timed.take()
    torch.save({"before": before, "plain": plain, "hooked": hooked, "waited": waited,
                "again": again}, Path(sys.argv[1]) / f"rank{rank}.pt")  # fmt: skip
    # Tear down in order: the models and hooks that hold the group go first, and no rank
    # shuts the group down while a peer still works in it. (Once, on a loaded machine,
    # rank 0 aborted at exit, "terminate called without an active exception", after
    # leaving all three DDP wrappers and both hooks to the interpreter's exit.)
    del ddp, timed, hook
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
