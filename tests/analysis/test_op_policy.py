"""The operation policy: which operation can do anything for a job in which state (the
verdict the screen's keys are refused by at once, `cockpit.analysis.op_policy`)."""

from __future__ import annotations

import pytest

from agent.wire import ops, states
from cockpit.analysis.lifecycle import PARTLY_PAUSED
from cockpit.analysis.op_policy import CHECKPOINT, EVAL, Futile, futile, starts_idle_job


@pytest.mark.parametrize("op", [ops.PAUSE, CHECKPOINT, EVAL])
def test_an_operation_on_the_processes_needs_a_job_that_runs_or_is_about_to(op: str) -> None:
    for state in states.LIVE:
        assert futile(op, state, None) is None, state
    for state in states.IDLE:
        assert futile(op, state, None) is Futile.NO_PROCESS, state


def test_a_resume_needs_a_part_that_is_not_running_and_a_job_that_is_not_finished() -> None:
    assert futile(ops.RESUME, states.FINISHED, None) is Futile.FINISHED
    for state in (states.RUNNING, states.STALLED):
        assert futile(ops.RESUME, state, None) is Futile.NOTHING_TO_RESUME
        # A part paused while the others run has something to resume.
        assert futile(ops.RESUME, state, f"{state} ({PARTLY_PAUSED} on gpu2)") is None
    for state in (states.PAUSED, states.STOPPED, states.FAILED):
        assert futile(ops.RESUME, state, None) is None


def test_the_other_operations_apply_in_every_state() -> None:
    for op in (ops.STOP, ops.RELAUNCH, ops.FORK, ops.ADJUST, ops.SCALE):
        for state in (*states.LIVE, *states.IDLE):
            assert futile(op, state, None) is None, (op, state)


def test_starting_an_idle_job_again_is_told_apart() -> None:
    assert starts_idle_job(ops.RESUME, states.FAILED)
    assert starts_idle_job(ops.RELAUNCH, states.PAUSED)
    assert not starts_idle_job(ops.RELAUNCH, states.RUNNING)
    assert not starts_idle_job(ops.PAUSE, states.FAILED)
