"""Which operation can do anything for a job in which state: the verdict the screen's
job-control keys are refused by at once, before anything is sent.

An agent refuses an operation that cannot apply (`agent.job.managed`), but only after
it was sent, and its refusal comes back as an acknowledgement seconds later; the screen
knows the job's state already and says so at the key. The verdict is the domain's (the
job's states, `agent.wire.states`); how it is worded, with the key that does instead,
is the screen's (`cockpit.ui.job_control.refusal`).

Beside the control ops (`agent.wire.ops`), the screen offers two operations of its own,
each an `adjust` asking the trainer for one thing now: a checkpoint and an evaluation.
"""

from __future__ import annotations

import enum

from agent.wire import ops, states
from cockpit.analysis.lifecycle import is_partly_paused

CHECKPOINT = "checkpoint"  # an adjust with `checkpoint_now` (the `c` key)
EVAL = "eval"  # an adjust with `eval_now` (the `e` key)

# Operations that need the job's processes running (or about to run again).
NEEDS_PROCESSES = frozenset({ops.PAUSE, CHECKPOINT, EVAL})
LIVE_STATES = frozenset(states.LIVE)
# States of a job that runs no process and will not start one by itself.
IDLE_STATES = frozenset(states.IDLE)


class Futile(enum.Enum):
    """Why an operation would do nothing for the job as it is."""

    NO_PROCESS = "no process"  # it acts on processes, and none runs or is about to
    FINISHED = "finished"  # a resume of a finished job would exit at once
    NOTHING_TO_RESUME = "nothing to resume"  # every part of the job runs


def futile(op: str, state: str, note: str | None) -> Futile | None:
    """Why `op` cannot do anything for a job in `state` (with its state's `note`,
    `Progress.eta_note`), or None when it can."""
    if op in NEEDS_PROCESSES and state not in LIVE_STATES:
        return Futile.NO_PROCESS
    if op == ops.RESUME and state == states.FINISHED:
        return Futile.FINISHED
    if op == ops.RESUME and state in (states.RUNNING, states.STALLED) and not is_partly_paused(
            note):  # a part that paused while the others run has something to resume
        return Futile.NOTHING_TO_RESUME
    return None


def starts_idle_job(op: str, state: str) -> bool:
    """Whether `op` starts again a job that runs no process (a resume or a relaunch of a
    paused, stopped, exited or failed job): a failed one repeats its failure unless its
    cause was fixed, and a relaunch then stops nothing."""
    return op in (ops.RESUME, ops.RELAUNCH) and state in IDLE_STATES
