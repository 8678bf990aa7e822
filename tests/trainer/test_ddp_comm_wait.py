"""`agent.hook.ddp_comm.CommWait`: DDP's all-reduce, the same numbers, its wait timed.

The bookkeeping (overlapping buckets counted once, a wait still running carried to the
next step, device buckets not timed) runs on a clock the test moves; the gradients and
the waits of a real job come from three gloo ranks under torchrun, one of them slow.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.hook import ddp_comm
from agent.hook.ddp_comm import CommWait
from tests.harness.torchrun import ROOT

WORKER = Path(__file__).with_name("ddp_comm_worker.py")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(ddp_comm, "_perf", c)
    return c


def test_overlapping_buckets_count_once_and_a_running_wait_carries_over(clock) -> None:
    wait = CommWait()
    assert wait.take() is None  # no all-reduce yet: nothing was timed
    wait._started(True)  # bucket 1 from 100
    clock.now = 101.0
    wait._started(True)  # bucket 2 from 101, while 1 is in flight
    clock.now = 102.0
    wait._done()
    clock.now = 104.0
    wait._done()  # the last in flight: 100..104
    clock.now = 110.0
    wait._started(True)  # a second span, still running when the step ends
    clock.now = 111.5
    assert wait.take() == pytest.approx(4.0 + 1.5)
    clock.now = 112.0
    wait._done()
    assert wait.take() == pytest.approx(0.5)  # its rest, in the next step
    assert wait.take() == 0.0  # a step without all-reduces waited for none


def test_device_buckets_are_all_reduced_but_not_timed(clock) -> None:
    """With NCCL the future completes once the collective is queued: host time says
    nothing of the wait, so none is reported rather than a false near-zero."""
    wait = CommWait()
    wait._started(False)
    clock.now = 105.0
    wait._done()
    assert wait.take() is None


class Phases:
    """What `Reporter.phase_time` was given."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def phase_time(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds


def test_report_splits_the_block_into_comm_and_compute(clock) -> None:
    wait = CommWait()
    rep = Phases()
    wait.report(rep, 2.0)  # a duck-typed Reporter
    assert rep.times == {"compute": 2.0}  # nothing timed: all of it is compute, as before
    wait._started(True)
    clock.now = 100.75
    wait._done()
    wait.report(rep, 1.0)
    assert rep.times == pytest.approx({"compute": 2.25, "comm": 0.75})


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_same_gradients_as_plain_ddp_and_the_fast_ranks_wait_for_the_slow_one(
        tmp_path: Path) -> None:
    """Three ranks (1/3 rounds, so the order of scaling and summing shows), several
    buckets; rank 1 starts its step late: ranks 0 and 2 wait for it in the all-reduce,
    rank 1 finds them ready."""
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", "3", str(WORKER), str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(3)]
    for r, got in enumerate(ranks):
        assert got["before"] is None
        mismatched = [i for i, (a, b) in enumerate(zip(got["plain"], got["hooked"],
                                                       strict=True)) if not torch.equal(a, b)]
        assert not mismatched, f"rank {r}: gradients {mismatched} differ from plain DDP's"
        assert got["again"] == 0.0  # all of the wait was taken by the first call
    slow = ranks[1]["waited"]
    assert all(ranks[r]["waited"] > slow for r in (0, 2)), [g["waited"] for g in ranks]
