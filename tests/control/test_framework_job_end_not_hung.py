"""A job at its end is never declared hung: after the trainer reported its declared
final step, or one of its ranks exited cleanly, the last evaluation, checkpoint and
teardown may take as long as a loaded host makes them; a restart would only redo the
end. Seen with the reference trainer on a busy host: hung after step 200 of 200.

The clock is fake throughout: the detector is given its `now`, and the managed job's
look at its attempt reads a patched `time.time`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent.daemon import ObservedJournal
from agent.job import managed
from agent.job.launch import LaunchSpec
from agent.job.recovery import HangDetector
from agent.journal.journal import Journal

TOTAL = 200


def _trained(det: HangDetector, first: int, last: int, start: float) -> float:
    """Steps first..last, one second apart from `start`; the last one's time."""
    for step in range(first, last + 1):
        assert det.observe(step, 1.0, start + step - first)
    return start + last - first


def test_the_final_step_ends_hang_watching_until_a_new_attempt() -> None:
    det = HangDetector(k=3.0, floor=10.0, startup=60.0)
    det.declare_total(TOTAL)
    det.reset(0.0)
    at = _trained(det, 1, TOTAL - 1, 1.0)
    # One step short of the end, silence is a hang as always.
    assert det.at_end() is None and det.hung(at + 10.0) and not det.hung(at + 9.9)
    det.observe(TOTAL, 1.0, at + 1.0)
    assert det.at_end() == "reported its final step 200 of 200"
    assert det.deadline() is None
    assert not det.hung(at + 1.0 + 10.0) and not det.hung(at + 1.0 + 86400.0)
    # A restart from a checkpoint at step 150: its steps are watched again.
    det.reset(5000.0)
    assert det.at_end() is None and det.hung(5060.0)  # the start-up limit
    at = _trained(det, 151, 160, 5001.0)
    assert det.total_steps == TOTAL and det.hung(at + 10.0)


def test_a_rank_that_exited_cleanly_ends_watching_for_this_attempt_only() -> None:
    det = HangDetector(k=3.0, floor=10.0, startup=60.0)  # no total declared
    det.reset(0.0)
    at = _trained(det, 1, 50, 1.0)
    assert det.hung(at + 10.0)
    det.end("rank 0 (pid 41) exited cleanly")
    det.end("rank 1 (pid 42) exited cleanly")  # the first reason is kept
    assert det.at_end() == "rank 0 (pid 41) exited cleanly" and not det.hung(at + 1000.0)
    det.reset(2000.0, new_attempt=False)  # a thaw does not undo the end
    assert not det.hung(2000.0 + 1000.0)
    det.reset(3000.0)  # a new attempt does
    assert det.at_end() is None and det.hung(3060.0)


@pytest.mark.parametrize("total", [0, -5, 2.5, True, "200", None])
def test_a_total_that_is_no_step_count_is_ignored(total: object) -> None:
    det = HangDetector(k=3.0, floor=10.0, startup=60.0)
    det.declare_total(total)
    det.reset(0.0)
    at = _trained(det, 1, 5, 1.0)
    assert det.total_steps is None and det.hung(at + 10.0)


def test_a_restarted_agent_keeps_the_total_and_the_end() -> None:
    det = HangDetector(k=3.0, floor=10.0, startup=60.0)
    det.declare_total(TOTAL)
    det.reset(0.0)
    det.end("rank 1 (pid 7) exited cleanly")
    again = HangDetector(k=3.0, floor=10.0, startup=60.0)
    again.restore(det.state())
    assert again.total_steps == TOTAL and again.at_end() == "rank 1 (pid 7) exited cleanly"
    again.restore({"total_steps": "many", "ended": 3})
    assert again.total_steps is None and again.ended is None


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Running:
    """The attempt's supervisor as the managed job's watcher sees it: still running."""

    def __init__(self, ranks: dict[int, int]) -> None:
        self.ranks = ranks
        self.running = True
        self.returncode = None

    def rank_pids(self) -> dict[int, int]:
        return dict(self.ranks)


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = _Clock(1000.0)
    monkeypatch.setattr(managed.time, "time", clock)
    spec = LaunchSpec({"name": "charlm", "python": sys.executable,
                       "script": str(tmp_path / "train.py"), "nproc_per_node": 2,
                       "run_dir": str(tmp_path / "run"), "hang": {"k": 3, "floor": 10}})
    journal = Journal(tmp_path / "state")
    made = managed.ManagedJob(spec, journal, {}, log=lambda msg: None)
    made.state = managed.RUNNING
    made.supervisor = _Running({101: 0, 102: 1})  # type: ignore[assignment]
    made.detector.reset(clock.now)
    hangs: list[float] = []
    monkeypatch.setattr(made, "_hang", lambda now, *rest: hangs.append(now))
    exits: dict[int, int] = {}
    monkeypatch.setattr(managed, "exit_status", lambda pid: exits.get(pid))
    yield made, clock, hangs, exits
    journal.close()


def _steps(made: managed.ManagedJob, clock: _Clock, first: int, last: int) -> None:
    for step in range(first, last + 1):
        clock.now += 1.0
        for rank in (0, 1):
            made.on_train({"step": step, "ts": clock.now, "rank": rank, "step_time": 1.0})


def test_the_job_is_not_restarted_after_its_declared_final_step(job) -> None:
    made, clock, hangs, _exits = job
    # The `run` record reaches the job the way the daemon passes journaled records on.
    observed = ObservedJournal(made.journal, lambda t, fields: made.on_run(dict(fields))
                               if t == "run" else None)  # fmt: skip
    observed.append_many([("run", {"job": "charlm", "rank": 0, "total_steps": TOTAL})])
    _steps(made, clock, 1, TOTAL)
    clock.now += 3600.0  # the final evaluation and checkpoint on a loaded host
    assert made._watch() is None and hangs == []
    assert made._next_look() == managed.WATCH


def test_a_silent_job_short_of_its_end_is_still_hung(job) -> None:
    made, clock, hangs, _exits = job
    made.on_run({"total_steps": TOTAL})
    _steps(made, clock, 1, TOTAL - 1)
    clock.now += 10.0
    made._watch()
    assert hangs == [clock.now]


def test_a_rank_that_exited_cleanly_is_the_jobs_end_not_a_hang(job) -> None:
    made, clock, hangs, exits = job
    _steps(made, clock, 1, 30)  # no total declared: a plain loop
    exits[101] = 0
    clock.now += 1.0
    assert made._watch() is None  # torchrun's own exit code will say how it ended
    clock.now += 3600.0
    assert made._watch() is None and hangs == []
    assert made.detector.at_end() == "rank 0 (pid 101) exited cleanly"


def test_a_rank_torchrun_reaped_between_two_looks_is_its_exit_to_wait_for_not_a_hang(
        job) -> None:
    """A rank killed on a loaded host: torchrun reaps it before the agent's look (no
    status left to read) and takes seconds to end the job; its peer, waiting on it in a
    collective, reports no step meanwhile. That silence is the death's, not a hang's:
    torchrun's exit says how the rank ended."""
    made, clock, hangs, exits = job
    _steps(made, clock, 1, 30)
    assert made._watch() is None and set(made._ranks) == {101, 102}
    clock.now += 9.0  # silent, short of the hang floor (10 s)
    assert made._watch() is None and hangs == []
    del made.supervisor.ranks[102]  # reaped: gone from torchrun's children and /proc
    exits[102] = -1
    clock.now += managed.RANKS_REFRESH  # past the floor; this look re-reads the workers
    assert made._watch() is None and hangs == []
    assert made._vanished_at is not None and "rank 1 (pid 102) exited" in made._vanished_at[2]
    clock.now += managed.CRASH_EXIT_WAIT - 0.5
    assert made._watch() is None and hangs == []
    # Torchrun still running well after: the silence is judged again.
    clock.now += 1.0
    made._watch()
    assert hangs == [clock.now]
