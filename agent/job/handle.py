"""What a managed job's parts may use of it: the narrow interface between `ManagedJob`
(agent.job.managed) and the parts it is made of (agent.job.membership, agent.job.peer_end).

The parts hold a `JobHandle`, never the job itself: they say things (events, alerts, an
interruption), save the job's state, look for the newest checkpoint, launch and stop an
attempt, and change the shared counters only through `Progress` (agent.job.progress),
which keeps the lock. The job's own bookkeeping stays its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional, Protocol, Tuple, TypeVar

from agent.job.generations import Generations
from agent.job.launch import LaunchSpec
from agent.job.progress import Progress
from agent.job.recovery import Decision, Diagnosis, RecoveryPolicy
from agent.job.supervisor import Supervisor
from agent.journal.journal import Journal
from agent.wire import checkpoints, launch_reasons

T = TypeVar("T")


class PeerGenerations(Protocol):
    """What the job's parts use of its peer-end state: the generations of its part."""

    generations: Generations


class JobHandle(Protocol):
    """The job as its parts see it. Called on the job's thread unless a method says
    otherwise."""

    name: str
    spec: LaunchSpec
    journal: Journal  # its state dir holds this host's GPU fault history too
    state: str
    attempt: int
    policy: RecoveryPolicy
    supervisor: Optional[Supervisor]
    progress: Progress

    @property
    def peers(self) -> PeerGenerations: ...

    @property
    def running(self) -> bool: ...

    @property
    def closing(self) -> bool:
        """Whether the agent is stopping the job for good: long waits give up (any
        thread)."""

    def event(self, kind: str, msg: str, data: dict, step: Optional[int] = None) -> None:
        """Journal an `event` of the job (any thread)."""

    def alert(self, kind: str, severity: str, code: str, what: str, hint: str,
              where: Optional[dict] = None) -> None:
        """Journal an `alert` about the job (any thread)."""

    def interrupted(self, diagnosis: Diagnosis, decision: Decision, detected_at: float,
                    failure_at: float, last_step: Optional[int],
                    returncode: Optional[int] = None, extra: Optional[dict] = None,
                    in_place: bool = False, msg: Optional[str] = None) -> None:
        """Journal the `interruption` event (agent.job.recovery.interruption)."""

    def decide_restart(self, diagnosis: Diagnosis, failure_at: float) -> Decision:
        """Restart or stop after a failure at `failure_at`, within the job-wide restart
        budget (agent.job.restart_budget), which a restart granted is counted against."""

    def save(self, state: Optional[str] = None) -> None:
        """Write the job's state for a restarted agent (agent.wire.jobstate)."""

    def newest_checkpoint(self) -> Tuple[Optional[checkpoints.Checkpoint], list]:
        """The newest valid checkpoint and the ones skipped (each journaled)."""

    def launch(self, checkpoint: Optional[checkpoints.Checkpoint],
               reason: str = launch_reasons.LAUNCH) -> None:
        """Start a new attempt from `checkpoint` (None: from the start)."""

    def stop_attempt(self, grace: Optional[float] = None, why: Optional[str] = None) -> bool:
        """Stop the attempt's processes; False when none was running."""

    def looking_in(self, directory: Path, look: Callable[[], T], what: str = ...,
                   maybe: str = ...) -> T:
        """`look()` in `directory`, journaled when it is slow (a hung network mount)."""

    def watched_pids(self) -> List[int]:
        """The worker processes the last look at the attempt saw."""

    def last_alive(self, pid: int, default: float) -> float:
        """When the worker `pid` was last seen alive (`default`: never seen)."""

    def forget_workers(self) -> None:
        """The workers watched so far are gone for good (a new worker group follows)."""
