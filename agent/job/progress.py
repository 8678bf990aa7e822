"""How far a managed job's attempt got: the counters two threads share, behind one lock.

The daemon's thread feeds them (each train record, each XID) while the job's thread reads
and resets them (a launch, a regroup, a failure, a pause). Every compound change happens
here, under the lock, so that `ManagedJob` (agent.job.managed) and its parts
(agent.job.membership, agent.job.peer_end) never take the lock themselves for it.
"""

from __future__ import annotations

import threading
from typing import Collection, List, Optional, Set, Tuple

from agent.job.recovery import HangDetector


class Progress:
    """Newest steps of this attempt and the one before, the recovery awaiting its first
    step, and the hang detector fed by the same records. Fields are read without the lock
    only for a single value (an int or a reference); anything that reads or changes more
    than one goes through a method, or holds `lock`."""

    def __init__(self, detector: HangDetector) -> None:
        self.lock = threading.Lock()
        self.detector = detector
        self.attempt_started = 0.0
        self.cur_max: Optional[int] = None  # newest step of this attempt
        self.prev_max: Optional[int] = None  # newest step of the attempt before
        # The recovery journaled at the first step after a restart (see ManagedJob).
        self.pending_recovery: Optional[dict] = None
        # This attempt's XIDs, each with whether its GPU is the job's (True) or unknown
        # (None); another job's are not kept. The job's GPUs: those NVML listed one of
        # its processes on during this attempt.
        self.xids: List[Tuple[int, Optional[bool]]] = []
        self.gpus: Set[int] = set()
        self.train_seen_at = 0.0

    @property
    def newest_step(self) -> Optional[int]:
        """The newest step of this attempt (None before its first)."""
        return self.cur_max

    def note_gpus(self, gpus: Collection[int]) -> None:
        """GPUs NVML listed one of the job's processes on: this attempt's GPUs."""
        with self.lock:
            self.gpus.update(gpus)

    def note_xid(self, xid: int, gpu: Optional[int] = None,
                 gpu_pids: Optional[Collection[int]] = None) -> None:
        """An XID of GPU `gpu`, whose processes NVML listed as `gpu_pids` (None: not
        sampled). It is the job's when the job runs on that GPU, another's (dropped) when
        the job is known to run elsewhere and other processes run there, else unknown.
        `gpu` None: the job's (a caller that knows no better)."""
        with self.lock:
            if gpu is None or gpu in self.gpus:
                self.xids.append((xid, True))
            elif not (self.gpus and gpu_pids):
                self.xids.append((xid, None))

    def telemetry(self) -> dict:
        """What the GPUs reported during this attempt, for `recovery.classify`."""
        with self.lock:
            return {"xid": [x for x, own in self.xids if own],
                    "xid_unsure": [x for x, own in self.xids if own is None]}

    def new_attempt(self, now: float) -> None:
        """A new torchrun attempt starts: its steps count from `now`."""
        with self.lock:
            self.attempt_started = now
            self.prev_max = self.cur_max if self.cur_max is not None else self.prev_max
            self.cur_max = None
            self.detector.reset(now)
            self.xids = []
            self.gpus = set()

    def new_generation(self, since: float, now: float) -> Optional[int]:
        """Steps from `since` on belong to the next worker group of the same attempt (an
        elastic regroup); the hang check starts again at `now`. Returns the old group's
        newest step."""
        with self.lock:
            last = self.cur_max
            if last is not None:
                self.prev_max = last if self.prev_max is None else max(self.prev_max, last)
            self.cur_max = None
            self.attempt_started = since
            self.detector.reset(now)
            return last if last is not None else self.prev_max

    def await_recovery(self, pending: Optional[dict]) -> None:
        """The recovery to journal at the next first step (None: no outage is open)."""
        with self.lock:
            self.pending_recovery = pending

    def recovering(self) -> bool:
        """Whether an outage awaits its recovery (a first step after a restart)."""
        with self.lock:
            return self.pending_recovery is not None
