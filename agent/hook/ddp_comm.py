"""How long a DDP rank's gradient all-reduces waited, measured by a communication hook.

DDP overlaps its gradient all-reduce with the backward pass, so a training loop that
times `loss.backward()` as compute counts a rank's wait for the other ranks as its own
work. With one slow rank every rank then looks equally busy, and the straggler rule
(`cockpit.analysis.stalls`: one rank's own work much longer while the others wait in
communication) cannot tell which rank holds the others up. This hook measures the wait:

    comm = CommWait().register(ddp_model)       # once, after wrapping the model
    ...
    started = time.perf_counter()
    loss = ddp_model(x, y); loss.backward(); opt.step()
    comm.report(rep, time.perf_counter() - started)   # compute and comm of this step

It replaces DDP's built-in all-reduce with the same one -- each bucket's gradients
multiplied by 1/world size, then summed across the ranks -- so the gradients are bit
for bit those of plain DDP (a resumed run still repeats the uninterrupted one exactly).
The time is host-side: the hook notes when it starts a bucket's all-reduce and the
future's callback when it completes; the wait of a step is the time at least one bucket
was in flight (overlapping buckets counted once). Nothing reads a device value or
synchronises a device. A fast rank waits about as long as the slow one works longer;
the slow rank finds the others ready and waits next to nothing.

With NCCL (gradients on a GPU) a collective's future completes as soon as the all-reduce
is queued on the GPU stream, so host time cannot see the wait without synchronising the
device: there the hook all-reduces exactly the same and times nothing, and `take` and
`report` say so (None; `report` then counts the whole block as compute, as before).

torch is imported only when a hook is registered.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from agent.hook.reporter import Reporter

_perf = time.perf_counter


class CommWait:
    """The DDP communication hook and the wait it measured since the last `take`.

    One instance per DDP model. Callbacks run on the process group's threads, the
    training loop calls `take`: a lock guards the count of buckets in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._since = 0.0
        self._waited = 0.0
        self._timed: Optional[bool] = None  # None: no bucket yet; False: device buckets
        self._world = 1
        self._group: Any = None

    def register(self, ddp_model: Any) -> CommWait:
        """Install the hook on a `DistributedDataParallel` model (before its first
        forward pass, as DDP requires); returns self."""
        import torch.distributed as dist

        self._group = getattr(ddp_model, "process_group", None)
        self._world = dist.get_world_size(self._group)
        ddp_model.register_comm_hook(self, _allreduce_mean)
        return self

    def take(self) -> Optional[float]:
        """Seconds the all-reduces waited since the previous call; None when the hook
        cannot time them (device buckets) or has run no all-reduce yet."""
        with self._lock:
            if not self._timed:
                return None
            waited = self._waited
            if self._in_flight:  # still in flight: the rest counts for the next call
                now = _perf()
                waited += now - self._since
                self._since = now
            self._waited = 0.0
            return waited

    def report(self, rep: Reporter, seconds: float) -> None:
        """Attribute a block of `seconds` that ran the forward and backward passes to
        the current step: its all-reduce wait as `comm`, the rest as `compute`."""
        waited = self.take()
        if waited is None:
            rep.phase_time("compute", seconds)
            return
        waited = min(waited, seconds)  # waits can only have happened inside the block
        rep.phase_time("comm", waited)
        rep.phase_time("compute", seconds - waited)

    def _started(self, on_host: bool) -> None:
        with self._lock:
            if self._timed is None or self._timed:
                self._timed = on_host
            if self._in_flight == 0:
                self._since = _perf()
            self._in_flight += 1

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._waited += _perf() - self._since


def _allreduce_mean(state, bucket):  # type: (CommWait, Any) -> Any
    """DDP's own all-reduce, timed. DDP without a hook multiplies each gradient by
    1/world size as it copies it into the bucket, then sums: done here in that order
    (a division, or the mean taken after the sum, rounds differently at 3 ranks).

    The types are a comment: DDP refuses a hook whose `bucket` or return annotation is
    not the torch class itself, and this module does not import torch to name it."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    buffer.mul_(1.0 / state._world)
    state._started(buffer.device.type == "cpu")
    try:
        future = dist.all_reduce(buffer, group=state._group, async_op=True).get_future()
    except BaseException:
        state._done()
        raise

    def finished(done: Any) -> Any:
        try:
            return done.value()[0]
        finally:
            state._done()

    return future.then(finished)
