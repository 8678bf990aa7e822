from __future__ import annotations

import pytest

from cockpit.analysis.efficiency import EVEN_WITHIN, FAR_BEHIND, compute_efficiency, lag_verdict
from cockpit.analysis.ranks import StepSample, step_wall_times, summarize_ranks
from cockpit.analysis.stalls import (
    CONTENTION,
    DATA_STARVED,
    STRAGGLER,
    HostPressure,
    detect_stall,
)


def _steps(n: int = 10, *, slow_rank: int | None = None, data: float = 0.05) -> list[StepSample]:
    """4 ranks on 2 hosts, 1 s steps; a slow rank works 0.8 s while others wait 0.6 s."""
    rows = []
    for step in range(n):
        for rank in range(4):
            comm = 0.1
            if slow_rank is not None:
                comm = 0.05 if rank == slow_rank else 0.6
            rows.append(StepSample(
                rank=rank, host="a" if rank < 2 else "b", step=step, step_time=1.0,
                data_time=data, compute_time=1.0 - comm - data, comm_time=comm,
                samples=32, tokens=32 * 512, ts=float(step),
            ))
    return rows


def test_throughput_shares_and_mfu() -> None:
    eff = compute_efficiency(
        _steps(), [90.0, 80.0, None], flops_per_step=4e14, peak_flops=1e15, n_gpus=4
    )
    assert eff.gpu_busy == pytest.approx(85.0)
    assert eff.samples_per_s == pytest.approx(4 * 32)
    assert eff.tokens_per_s == pytest.approx(4 * 32 * 512)
    assert eff.steps_per_s == pytest.approx(1.0)
    assert eff.data_wait_pct == pytest.approx(5.0)
    assert eff.comm_pct == pytest.approx(10.0)
    assert eff.mfu == pytest.approx(0.1)
    assert eff.step_time_spread == pytest.approx(0.0)


def test_mfu_unknown_without_flops_and_nothing_without_steps() -> None:
    assert compute_efficiency(_steps()).mfu is None
    empty = compute_efficiency([], [50.0])
    assert empty.gpu_busy == 50.0 and empty.samples_per_s is None


def test_straggler_named_by_own_work_not_wall_time() -> None:
    eff = compute_efficiency(_steps(slow_rank=3))
    assert eff.slowest[0].rank == 3 and eff.slowest[0].host == "b"
    assert eff.step_time_spread == pytest.approx((0.95 - 0.4) / 0.4)
    assert [r.rank for r in eff.slowest] == [3]  # the others are even: none named


def test_even_ranks_have_no_slowest_to_name() -> None:
    """Ranks that work alike (within 2 %) have no straggler: the first few of them are
    not named as the slowest, and a job of one rank has none either."""
    assert compute_efficiency(_steps()).slowest == ()
    lone = [s for s in _steps() if s.rank == 0]
    assert compute_efficiency(lone).slowest == ()
    nudged = [s._replace(compute_time=s.compute_time * 1.01) if s.rank == 2 else s
              for s in _steps()]
    assert compute_efficiency(nudged).slowest == ()


def test_summaries_and_wall_times() -> None:
    ranks = summarize_ranks(_steps(n=3))
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    assert ranks[0].last_step == 2 and ranks[0].data_share == pytest.approx(0.05)
    assert step_wall_times(_steps(n=3)) == [1.0, 1.0, 1.0]


def test_no_stall_when_steps_are_regular_or_job_paused() -> None:
    ranks = summarize_ranks(_steps())
    assert not detect_stall(since_last_step=2.0, recent_wall_times=[1.0] * 10,
                            ranks=ranks).stalled
    assert not detect_stall(since_last_step=900.0, recent_wall_times=[1.0] * 10,
                            ranks=ranks, active=False).stalled


def test_no_progress_stall_blames_the_rank_that_fell_behind() -> None:
    rows = [r for r in _steps() if not (r.rank == 2 and r.step == 9)]
    v = detect_stall(since_last_step=600.0, recent_wall_times=[1.0] * 10,
                     ranks=summarize_ranks(rows))
    assert v.stalled and v.kind == "no progress"
    assert v.cause == STRAGGLER and v.where["rank"] == 2
    assert "step 8" in (v.detail or "")


def test_stall_blames_contention_on_a_pressured_host_with_idle_gpus() -> None:
    hosts = [HostPressure("a", cpu=40.0, gpu_util=95.0),
             HostPressure("b", cpu=99.0, mem_frac=0.97, gpu_util=10.0)]
    v = detect_stall(since_last_step=600.0, recent_wall_times=[1.0] * 10,
                     ranks=summarize_ranks(_steps()), hosts=hosts)
    assert v.cause == CONTENTION and v.where == {"host": "b"}
    assert "CPU 99%" in (v.detail or "") and "memory 97%" in (v.detail or "")


def test_slowdown_blames_data_when_loading_dominates() -> None:
    v = detect_stall(since_last_step=3.0, recent_wall_times=[1.0] * 10 + [3.0] * 5,
                     ranks=summarize_ranks(_steps(data=0.5)))
    assert v.stalled and v.kind == "slowdown" and v.cause == DATA_STARVED


def test_slowdown_blames_straggler_sync() -> None:
    v = detect_stall(since_last_step=3.0, recent_wall_times=[1.0] * 10 + [3.0] * 5,
                     ranks=summarize_ranks(_steps(slow_rank=1)))
    assert v.cause == STRAGGLER and v.where["rank"] == 1


def test_unexplained_stall_says_so() -> None:
    v = detect_stall(since_last_step=600.0, recent_wall_times=[1.0] * 10,
                     ranks=summarize_ranks(_steps()))
    assert v.stalled and v.cause is None and "job log" in (v.detail or "")


def test_a_phase_timed_on_some_steps_is_a_share_of_every_step() -> None:
    """A rank that waits 0.5 s on one step in ten (a control broadcast) spends 5% of its
    time communicating, not the 50% of the steps that timed it."""
    rows = [StepSample(rank=rank, host="a", step=step, step_time=1.0, data_time=0.02,
                       compute_time=0.98 if step % 10 else 0.48,
                       comm_time=None if step % 10 else 0.5)
            for step in range(1, 21) for rank in range(2)]
    eff = compute_efficiency(rows)
    assert eff.comm_pct == pytest.approx(5.0)
    assert eff.data_wait_pct == pytest.approx(2.0)
    assert [r.comm_share for r in eff.ranks] == pytest.approx([0.05, 0.05])
    # A trainer that times no phase has no share to show.
    assert compute_efficiency([r._replace(comm_time=None) for r in rows]).comm_pct is None


def test_mfu_is_of_the_achieved_rate_slow_steps_included() -> None:
    """One step in ten takes 1.9 s (a checkpoint): the job does 10 steps in 10.9 s, and
    MFU counts the FLOPs of those 10 steps over that time, not over 10 median steps."""
    rows = [s._replace(step_time=1.9) if s.step % 10 == 9 else s for s in _steps(n=20)]
    eff = compute_efficiency(rows, flops_per_step=4e14, peak_flops=1e15, n_gpus=4)
    assert eff.steps_per_s == pytest.approx(10 / 10.9)
    assert eff.mfu == pytest.approx(0.1 * 10 / 10.9)
    assert eff.step_time_median == pytest.approx(1.0)


def _turned_slow(fast: int = 24, slow: int = 8) -> list[StepSample]:
    """Two ranks on one host, as DDP's timed all-reduce reports them: 0.2 s steps, then
    rank 1 works 1.1 s a step and finds rank 0 ready, rank 0 works 0.1 s and waits 1.0 s
    for it in the all-reduce."""
    rows = []
    for step in range(1, fast + slow + 1):
        for rank in range(2):
            if step <= fast:
                work, comm = 0.19, 0.01
            else:
                work, comm = (1.1, 0.0) if rank == 1 else (0.1, 1.0)
            rows.append(StepSample(rank=rank, host="local", step=step, step_time=work + comm,
                                   data_time=0.01, compute_time=work - 0.01, comm_time=comm))
    return rows


def test_a_measured_wait_names_the_straggler_on_a_pressed_host() -> None:
    """A few steps into the slowdown, on a host short of CPU: the slowdown's own steps
    name rank 1, and the host's pressure is said beside it rather than blamed instead."""
    rows = _turned_slow()
    hosts = [HostPressure("local", cpu=99.0, load_per_cpu=2.0)]
    walls = step_wall_times(rows)
    v = detect_stall(since_last_step=1.0, recent_wall_times=walls,
                     ranks=summarize_ranks(rows), hosts=hosts, steps=rows)
    assert v.stalled and v.kind == "slowdown"
    assert v.cause == STRAGGLER and v.where == {"host": "local", "rank": 1}
    assert "rank 1 on local works 11.0x longer" in (v.detail or "")
    assert "its host: CPU 99%, load 2.0/CPU" in (v.detail or "")
    # Over the whole window rank 1 still has the median of its fast steps: the cause
    # is then looked for where nothing tells the ranks apart, and the host is blamed.
    v = detect_stall(since_last_step=1.0, recent_wall_times=walls,
                     ranks=summarize_ranks(rows), hosts=hosts)
    assert v.cause == CONTENTION and v.where == {"host": "local"}
    # Without the measured wait (the all-reduce counted as compute: both ranks as busy)
    # the slowdown's own steps do not tell them apart either.
    untimed = [r._replace(compute_time=r.step_time, comm_time=None) for r in rows]
    v = detect_stall(since_last_step=1.0, recent_wall_times=walls,
                     ranks=summarize_ranks(untimed), hosts=hosts, steps=untimed)
    assert v.cause == CONTENTION and v.where == {"host": "local"}


def test_how_far_behind_a_rank_is_reads_even_behind_or_far() -> None:
    assert [lag_verdict(b) for b in (None, 0.0, EVEN_WITHIN, 0.05, FAR_BEHIND, 0.5)] == [
        "even", "even", "even", "behind", "far", "far"]
