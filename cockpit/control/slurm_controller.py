"""The screen's job-control keys for a job on Slurm.

`cockpit watch` of a Slurm job attaches this controller to its source, so the keys
(and the command palette, which runs the same actions) do on Slurm what the commands
`cockpit pause|resume|stop|relaunch JOB.toml` do (docs/slurm.md, "Controls"):

- pause: USR1 to the batch shell (checkpoint, then the step ends and the allocation
  is released); a pending job is cancelled; a step ended without a checkpoint (none
  within the spec's pause_timeout) is a failed pause, said as one;
- resume: a new `sbatch` resuming from the newest valid checkpoint;
- stop: `scancel`;
- relaunch: pause a running job, then a new `sbatch` from the newest valid checkpoint
  with `--exclude` for the nodes the operator names.

The other keys (fork, LR change, checkpoint now, eval now, scale) have no Slurm
meaning in this cockpit; each is refused with the reason (`refuses`), before any prompt
opens, rather than sent to agents this cockpit does not reach (the nodes' agents are
streamed, not addressed: their journals are read from shared storage).

It shares the watch's `SlurmJob` (one numbering of the `slurm:NAME` events) and holds
its lock for an operation, so the watcher's looks and an operation never interleave.
Each operation returns only once Slurm did it (a pause waits for the job's end), so the
screen's "done" is Slurm's, never "sent".
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agent.wire import ops
from cockpit.control.controller import ControlError
from cockpit.control.jobspec import JobSpec, JobSpecError, load_jobspec
from cockpit.control.slurm import (
    PENDING,
    SLURM_NAME,
    SlurmError,
    SlurmJob,
    is_slurm,
    launcher_of,
)

# Why a control the screen offers for SSH jobs is not offered for a Slurm job.
NOT_OFFERED = {
    ops.FORK: "a fork is not offered on Slurm from the screen: a fork is a second job "
              "with its own spec; write one and `cockpit launch` it",
    ops.ADJUST: "a live LR change is not offered on Slurm: the nodes' agents are "
                "streamed from shared storage, not addressed by this cockpit",
    "checkpoint": "checkpoint now is not offered on Slurm: the nodes' agents are "
                  "streamed from shared storage, not addressed by this cockpit; pause "
                  "(p) checkpoints, then releases the allocation",
    "eval": "eval now is not offered on Slurm: the nodes' agents are streamed from "
            "shared storage, not addressed by this cockpit",
    ops.SCALE: "elastic scale is not offered on Slurm: an allocation's node set is fixed; "
               "pause, edit the spec's `nodes`, and resume",
}
# Seconds a pause waits, beyond the job's own pause_timeout (the batch shell's wait for
# the checkpoint), for Slurm to end the step and release the allocation.
END_MARGIN_S = 60.0


class SlurmController:
    """The screen's controller of one Slurm job (cockpit.read.source.Controller)."""

    def __init__(self, job: SlurmJob, lock: threading.RLock | None = None,
                 spec_path: Path | None = None) -> None:
        self._job = job
        self._lock = lock or job.lock
        self._spec_path = spec_path

    # -- what the screen reads ---------------------------------------------------------

    @property
    def job(self) -> str:
        return self._job.spec.name

    @property
    def hosts(self) -> tuple[str, ...]:
        """Empty: Slurm chooses the nodes, and no control goes to a node's link (the
        screen's reachability warnings and "no host left" checks do not apply)."""
        return ()

    @property
    def spares(self) -> tuple[str, ...]:
        return ()

    @property
    def spec(self) -> JobSpec:
        return self._job.spec

    @property
    def last_ops(self) -> dict[str, str]:
        return {}  # no agent op is sent: there are no acks to follow

    def controller_for(self, job: str | None) -> SlurmController | None:
        return self if job is None or job == self.job else None

    def refuses(self, action: str) -> str | None:
        """Why `action` is not offered on Slurm, or None when it is."""
        return NOT_OFFERED.get(action)

    def abandon(self) -> None:
        """The screen is closing: an operation still waiting on Slurm stops waiting."""
        self._job.abandon()

    def refresh(self) -> None:
        """Adopt the job file as it is now (a `nodes` edited between a pause and a
        resume), as `cockpit resume JOB.toml` would read it; a file that no longer
        parses, or is no longer a Slurm job, is an error the operator reads."""
        if self._spec_path is None:
            return
        try:
            spec = load_jobspec(self._spec_path)
            if not is_slurm(spec):
                raise ControlError(f"{self._spec_path}: no longer a Slurm job spec")
            if spec.name != self.job:
                raise ControlError(f"{self._spec_path}: the job is now named "
                                   f"{spec.name!r}; this screen controls {self.job!r}")
            launcher = launcher_of(spec)
        except (JobSpecError, OSError) as exc:
            raise ControlError(str(exc)) from None
        with self._lock:
            self._job.spec, self._job.launcher = spec, launcher

    def describe(self, action: str, add: str | None = None,
                 remove: str | None = None) -> str:
        """What `action` will do, for the confirmation dialog."""
        why = self.refuses(action)
        if why is not None:
            return why
        job_id = self._job.job_id or "not yet known"
        name = self.job
        if action == ops.PAUSE:
            return (f"pause: Slurm job {job_id} of {name}: USR1 to its batch shell, which "
                    f"asks the trainer for a checkpoint (waiting up to "
                    f"{self.spec.pause_timeout:g} s), then ends the job step; the "
                    "allocation is released. With no checkpoint by then the step ends "
                    "all the same and the pause fails (not paused). A job still "
                    "pending is cancelled.")
        if action == ops.RESUME:
            return (f"resume: a new sbatch of {name} resuming from the newest valid "
                    "checkpoint (a new Slurm job, a new allocation)")
        if action == ops.STOP:
            return f"stop: scancel Slurm job {job_id} of {name} (no checkpoint is asked for)"
        if action == ops.RELAUNCH:
            return (f"relaunch: Slurm job {job_id} of {name} is paused if it runs "
                    "(checkpoint, allocation released), then a new sbatch resumes from "
                    "the newest valid checkpoint, with --exclude for the nodes named")
        return f"{action}: not a control of a Slurm job"

    def check_scale(self, add: str | None, remove: str | None) -> None:
        raise ControlError(NOT_OFFERED[ops.SCALE])

    # -- the controls ------------------------------------------------------------------

    def _attach(self) -> None:
        try:
            self._job.attach()
        except SlurmError as exc:
            raise ControlError(f"{self.job}: no Slurm job to act on ({exc})") from None

    def pause(self) -> str:
        with self._lock:
            self._attach()
            try:
                outcome = self._job.pause(self.spec.pause_timeout + END_MARGIN_S)
            except SlurmError as exc:
                raise ControlError(f"pause {self.job}: {exc}") from None
            if not outcome.ok and outcome.how == "usr1":
                # Ended, but not paused: the screen says it failed, and why.
                raise ControlError(f"pause {self.job}: {outcome.describe()}")
            return outcome.describe()

    def resume(self) -> str:
        self.refresh()
        with self._lock:
            try:
                job_id = self._job.resume()
                state = self._job.poll()
            except SlurmError as exc:
                raise ControlError(f"resume {self.job}: {exc}") from None
            return self._submitted(job_id, state.state, state.reason)

    def relaunch(self, exclude: tuple[str, ...] = ()) -> str:
        bad = [n for n in exclude if not SLURM_NAME.match(n)]
        if bad:
            raise ControlError(f"not Slurm node names: {', '.join(map(repr, bad))}")
        self.refresh()
        with self._lock:
            self._attach()
            try:
                job_id = self._job.relaunch(tuple(exclude),
                                            self.spec.pause_timeout + END_MARGIN_S)
                state = self._job.poll()
            except SlurmError as exc:
                raise ControlError(f"relaunch {self.job}: {exc}") from None
            text = self._submitted(job_id, state.state, state.reason)
            return text + (f", excluding {', '.join(exclude)}" if exclude else "")

    def stop(self) -> str:
        with self._lock:
            self._attach()
            try:
                ended = self._job.stop(self.spec.stop_grace + END_MARGIN_S)
            except SlurmError as exc:
                raise ControlError(f"stop {self.job}: {exc}") from None
            return f"Slurm job {self._job.job_id} cancelled (scancel): {ended.state}"

    def _submitted(self, job_id: str, state: str, reason: str) -> str:
        return (f"Slurm job {job_id} submitted, resuming from the newest valid checkpoint; "
                f"now {state}" + (f" ({reason})" if state == PENDING and reason else ""))

    def _refused(self, action: str) -> ControlError:
        return ControlError(NOT_OFFERED[action])

    def fork(self, overrides: dict[str, Any]) -> object:
        raise self._refused(ops.FORK)

    def adjust(self, **knobs: Any) -> object:
        raise self._refused(ops.ADJUST)

    def checkpoint_now(self) -> object:
        raise self._refused("checkpoint")

    def eval_now(self) -> object:
        raise self._refused("eval")

    def scale(self, add: str | None = None, remove: str | None = None) -> object:
        raise self._refused(ops.SCALE)

