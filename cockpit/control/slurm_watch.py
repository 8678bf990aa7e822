"""Watching a Slurm job from the cockpit: its queue state polled, its nodes streamed.

`cockpit watch --job JOB.toml` on a Slurm job spec cannot wait for the operator's
commands to record the job's life: a job pends, starts and ends on Slurm's schedule.
`SlurmWatcher` asks Slurm every few seconds (through the login node, or on this
machine when it is one) with `SlurmJob.poll()`, so every change (pending with its
reason and estimate, running with its nodes and queue wait, finished with Slurm's exit
state, a requeue, a node drained under the job) becomes an event in the recording as
it happens. It follows the job across submissions: a `resume` or `relaunch` from
another terminal writes a new id to RUN_DIR/slurm/current-job, and the next look
watches that one.

Once a submission runs, `on_nodes` is told its nodes (once per Slurm job), so the
caller can stream each node's agent; how a node is reached is the caller's choice
(docs/slurm.md, "Reaching the compute nodes").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent.wire.events import SLURM_UNREACHABLE
from cockpit.analysis.text import printable
from cockpit.control.slurm import SlurmError, SlurmJob

log = logging.getLogger(__name__)

DEFAULT_EVERY_S = 2.0
FAULT_BACKOFF_MAX_S = 60.0  # the longest wait after unexpected failures in a row


class SlurmWatcher:
    """Polls one cockpit job's Slurm state on a thread of its own."""

    def __init__(self, job: SlurmJob, on_nodes: Callable[[tuple[str, ...]], None],
                 every: float = DEFAULT_EVERY_S) -> None:
        self.job, self.on_nodes, self.every = job, on_nodes, every
        self.problem: str | None = None  # the latest look that failed, until one works
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # (Slurm id, node list) handed on: a requeued job keeps its id, not its nodes.
        self._told: set[tuple[str, str]] = set()
        self._ended: set[str] = set()  # Slurm ids seen finished: nothing more to ask

    def start(self) -> SlurmWatcher:
        self._thread = threading.Thread(target=self._loop, name="slurm-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling, after one last look: a job that ended since the previous look
        has its end recorded before the recording closes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return  # still inside a look that hangs: no second one beside it
        try:
            self.look_once()
        except SlurmError as exc:
            # Slurm's words (the login node's stderr) go to stderr: shown as text.
            log.warning("slurm watch of %s, last look: %s", printable(self.job.spec.name),
                        printable(exc, multiline=True))
        except Exception as exc:  # the caller's teardown goes on (its SSH link closed)
            log.warning("slurm watch of %s, last look failed unexpectedly: %s",
                        printable(self.job.spec.name),
                        printable(f"{type(exc).__name__}: {exc}", multiline=True))

    def _loop(self) -> None:
        faults = 0  # unexpected failures in a row: the wait after each grows
        while not self._stop.is_set():
            wait = self.every
            try:
                self.look_once()
                self.problem = None
                faults = 0
            except SlurmError as exc:  # the login node unreachable, say: tried again
                faults = 0
                if str(exc) != self.problem:
                    log.warning("slurm watch of %s: %s", printable(self.job.spec.name),
                                printable(exc, multiline=True))
                    self._guarded_event(exc)
                self.problem = str(exc)
            except Exception as exc:  # a fault of the watch itself (handing on nodes, say)
                # The thread goes on (Slurm's events, the nodes' streams depend on it);
                # said once per kind of fault while it repeats, never as a traceback
                # under the screen, and looked at again after a growing back-off.
                faults += 1
                wait = min(self.every * 2 ** min(faults, 8), max(FAULT_BACKOFF_MAX_S,
                                                                 self.every))
                text = f"{type(exc).__name__}: {exc}"
                if text != self.problem:
                    log.warning("slurm watch of %s failed unexpectedly (looked at again "
                                "in %.3g s): %s", printable(self.job.spec.name), wait,
                                printable(text, multiline=True))
                self.problem = text
            self._stop.wait(wait)

    def _guarded_event(self, exc: SlurmError) -> None:
        """The SLURM_UNREACHABLE event; its own failure (the recording's, say) is logged."""
        try:
            self.job.event(SLURM_UNREACHABLE, f"cannot ask Slurm about "
                           f"{self.job.spec.name}: {exc}", error=str(exc))
        except Exception as fault:
            log.warning("slurm watch of %s: recording that Slurm cannot be asked failed: "
                        "%s", printable(self.job.spec.name),
                        printable(f"{type(fault).__name__}: {fault}", multiline=True))

    def look_once(self) -> None:
        """One look: the current submission's state recorded when it changed, and its
        nodes handed on once it runs (after any control of the screen under way)."""
        with self.job.lock:
            self._look()

    def _look(self) -> None:
        current = self.job.current_id()
        if current is None:
            return  # not launched yet
        if current != self.job.job_id:
            previous = self.job.job_id
            # Ended (a pause, say) and replaced between two looks: its end first.
            if previous is not None and previous not in self._ended \
                    and not self.job.poll().active:
                self._ended.add(previous)
            self.job.job_id, self.job.last = current, None
        if current in self._ended:
            return
        state = self.job.poll()
        if not state.active:
            self._ended.add(current)
        told = (current, state.nodes)
        if told not in self._told and state.state not in ("PENDING", "UNKNOWN"):
            nodes = self.job.allocated(state)
            if nodes:
                # Told once it worked: nodes whose hand-on failed are handed on again by
                # the next look (adding a node already streamed changes nothing).
                self.on_nodes(nodes)
                self._told.add(told)
