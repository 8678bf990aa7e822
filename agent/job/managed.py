"""One managed job on this host: torchrun attempts, operator operations, and recovery.

The agent, not the cockpit, owns recovery: a crash at 3 a.m. must be handled whether or
not anyone has the cockpit open. Each attempt is one `Supervisor` (torchrun child). A
thread per job watches the attempt and carries out operations, so the daemon's main loop
(spool tailing, control inbox) never waits on a kill, a backoff or a checksum:

- crash: a worker process vanishing (checked every `WATCH` s) or torchrun exiting non-zero;
- hang: no new step for max(floor, k × median step time), from the trainer's own train
  records as the daemon journals them; stacks are dumped before the kill;
- then: classify (`agent.job.recovery.classify`), decide (`RecoveryPolicy`), and restart from
  the newest valid checkpoint (`agent.wire.checkpoints`) after the backoff, or stop and say
  why with an alert.

Every interruption is journaled as an `event` `interruption` (cause, evidence,
detected_at, detection_latency), and every recovery as `recovery` (recovery_seconds from
the failure to the first new step, steps_lost, restart_count, checkpoint), as
docs/protocol.md lays down. Operations (pause, freeze, thaw, resume, relaunch, stop) are
queued to the job's thread and acknowledged by `event`s when they have happened.

Over 500 lines because `ManagedJob` is the job's state machine: every transition
(launch, failure and restart, pause, freeze, resume, stop, adoption) runs on the job's
own thread and moves `state` under its one lock. What does not move the state lives apart,
behind `agent.job.handle.JobHandle`: the supervisor with its output and process tree,
progress, generations, membership, peer ends, and recovery's classifier and policy.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Tuple, TypeVar

from agent.job import peer_end
from agent.job.bounded_read import read_new
from agent.job.launch import LaunchSpec
from agent.job.membership import NOT_EXITED, Membership
from agent.job.progress import Progress
from agent.job.recovery import (
    Decision,
    Diagnosis,
    HangDetector,
    RecoveryPolicy,
    classify,
    hang_diagnosis,
    interruption,
    read_error_file,
)
from agent.job.restart_budget import JobBudget, read_others, write_mine
from agent.job.stacks import STACKS_MAX_BYTES, dump_stacks
from agent.job.supervisor import Supervisor, alive
from agent.journal.journal import Journal, JournalReader
from agent.off_thread import OffThread
from agent.wire import atomic, checkpoints, jobstate, launch_reasons, ops, paths
from agent.wire.causes import LAUNCH_FAILED
from agent.wire.events import (
    CHECKPOINT_SAVED,
    CHECKPOINT_SKIPPED,
    CHECKPOINTS_SET_ASIDE,
    FORK,
    INTERRUPTION,
    JOB_ADOPTED,
    JOB_EXITED,
    PAUSE,
    RECOVERY,
    RELAUNCH,
    RESUME,
    SAMPLER_ERROR,
)
from agent.wire.op_error import OpError
from agent.wire.protocol import ALERT, EVENT
from agent.wire.states import (
    BACKOFF,
    FAILED,
    FINISHED,
    FROZEN,
    PAUSED,
    PAUSING,
    RUNNING,
    STANDBY,
    STARTING,
    STOPPED,
)

WATCH = 0.5  # s between checks of the attempt (worker liveness, hang, operations)
RANKS_REFRESH = 2.0  # s between re-reading which processes are torchrun's workers
CRASH_EXIT_WAIT = 5.0  # s torchrun gets to exit by itself after a worker died
PAUSE_STEP_WAIT = 5.0  # s at most for the ranks to report the paused checkpoint's step
SPOOL_SETTLE = 0.5  # s without a new train record: the spools are drained
SPOOL_SETTLE_MAX = 3.0  # s at most to wait for that
SHARED_CHECKPOINT_POLL = 0.2  # s between looks at the shared checkpoint dir in a pause
# s after the journal can write again before silence counts again: the spool tailer
# journals what the ranks wrote meanwhile on its next polls, and only then are their steps seen
JOURNAL_CATCH_UP = 5.0
SAVE_EVERY = 1.0  # s between saves of a training job's state for adoption (agent.wire.jobstate)
# s a look at the checkpoint dir may take before the journal says the job waits on it
SLOW_LOOK = 30.0
# s past the stop grace the agent's stop waits for the job's thread to end; one held
# longer (a look at a hung checkpoint dir) is left behind, and starts nothing after it
CLOSE_WAIT = 15.0
# Why an operation under way gives up when the agent stops (its event says so).
AGENT_STOPPING = "the agent is stopping"

IDLE_STATES = (PAUSED, FINISHED, FAILED, STOPPED)
# Idle states a resume starts again, and in which a part follows the other hosts' resume
# that did not reach it (agent.job.peer_end): a finished job has nothing left to run.
RESUMABLE = (PAUSED, STOPPED, FAILED)
# A new agent takes these over (a spare in standby keeps waiting for its claim).
ADOPTABLE_STATES = (STARTING, RUNNING, BACKOFF, PAUSING, FROZEN, STANDBY)
ALERT_KINDS = {"data": "data", "oom": "parameter", "user_code": "parameter"}
# Marks an operation the previous agent acknowledged, queued again by the adopting one.
CARRIED = "_carried_over"
T = TypeVar("T")


def exit_status(pid: int) -> Optional[int]:
    """None while `pid` runs (or is stopped); once it ended: its exit code (negative: the
    signal that killed it) while it is an unreaped zombie, -1 once it is gone entirely."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return -1
    fields = stat[stat.rfind(b")") + 2 :].split()
    if not fields or fields[0] not in (b"Z", b"X"):
        return None
    try:
        raw = int(fields[49])  # exit_code: the wait(2) status (Linux >= 3.5)
    except (IndexError, ValueError):
        return -1
    if raw & 0x7F:
        return -(raw & 0x7F)
    code = (raw >> 8) & 0xFF
    return code if code else 0


def _blame_order(status: int) -> int:
    if status == -signal.SIGTERM:
        return 2
    return 0 if status != 0 else 1


def describe_status(status: int) -> str:
    if status == -1:
        return "exited"
    if status < 0:
        try:
            return "was killed by %s" % signal.Signals(-status).name
        except ValueError:
            return "was killed by signal %d" % -status
    return "exited with code %d" % status


class ManagedJob:
    """A job's life on this host; every public method is safe to call from any thread."""

    def __init__(self, spec: LaunchSpec, journal: Journal,
                 overrides: Optional[Dict[str, Any]] = None,
                 log: Callable[[str], None] = lambda msg: None) -> None:
        self.spec = spec
        self.name = spec.name
        self.journal = journal
        self.overrides = dict(overrides or {})
        self.log = log
        self.policy = RecoveryPolicy(spec.restart_budget, spec.backoff, spec.backoff_max)
        self.budget = JobBudget(spec.per_cause, spec.budget_window, spec.restart_budget,
                                spec.host or "local")
        self.detector = HangDetector(spec.hang_k, spec.hang_floor, spec.hang_startup)
        self.state = STARTING
        self.attempt = 0
        self.supervisor: Optional[Supervisor] = None
        # The counters the daemon's thread feeds and this job's thread reads, and their
        # lock (which also guards `_checkpoints`).
        self.progress = Progress(self.detector)
        self._commands: "queue.Queue[Tuple[str, dict]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._closing = threading.Event()
        # Held while an attempt's processes start, and by `close` before it stops the
        # current attempt: once the job is closing, no attempt starts (`launch`).
        self._launch_lock = threading.Lock()
        self._attempt_checkpoint: Optional[checkpoints.Checkpoint] = None
        self._last_alive: Dict[int, float] = {}
        self._ranks: Dict[int, Optional[int]] = {}
        self._ranks_at = 0.0
        self._checkpoints: List[Tuple[float, int, str]] = []  # (ts, step, path) saved
        self._err_offset = 0
        self._failure: dict = {}
        self._vanished_at: Optional[Tuple[float, float, str]] = None
        self._freeze_until: Optional[float] = None
        self._saved: tuple = ()  # what the last save of the job's state recorded
        self._saved_at = 0.0
        self._save_lock = threading.Lock()  # the job's thread and the daemon's both save
        # Operations acknowledged and not yet carried out, oldest first, kept in the saved
        # state until done (agent.wire.jobstate.pending_out), with their lock; and, once
        # adopted, those the previous agent left and this one carries out, with those
        # dropped as unusable (why).
        self._accepted: List[dict] = []
        self._accepted_lock = threading.Lock()
        self._carried: List[dict] = []
        self._dropped_ops: List[str] = []
        self._start_op: object = None  # the op that started this job (`start`)
        self.membership = Membership(self)  # elastic jobs: scale, spares, regroups
        self.peers = peer_end.Peers(self)  # multi-host jobs: the other hosts' parts' ends

    # -- inputs from the daemon -------------------------------------------------------
    def on_train(self, record: dict) -> None:
        step, ts = record.get("step"), record.get("ts")
        if not isinstance(step, int) or not isinstance(ts, (int, float)):
            return
        progress = self.progress
        with progress.lock:
            progress.train_seen_at = time.time()
            if ts < progress.attempt_started:
                progress.prev_max = step if progress.prev_max is None else max(
                    progress.prev_max, step)
                return
            progress.cur_max = step if progress.cur_max is None else max(progress.cur_max,
                                                                         step)
            self.detector.observe(step, record.get("step_time"), ts)
            pending = progress.pending_recovery
            if pending is not None:
                progress.pending_recovery = None
            regroup = self.membership.first_step(ts)
        if pending is not None:
            self._journal_recovery(pending, step, ts)
        if regroup is not None:
            self.membership.completed(regroup, step, ts)

    def on_run(self, record: dict) -> None:
        """The trainer's `run` record: its declared final step tells the hang detector
        when the job is at its end (no hang is declared after it)."""
        with self.progress.lock:
            self.detector.declare_total(record.get("total_steps"))

    def on_event(self, record: dict) -> None:
        if record.get("kind") == CHECKPOINT_SAVED:
            data = record.get("data") or {}
            step = record.get("step", data.get("step"))
            with self.progress.lock:
                self._checkpoints.append((float(record.get("ts") or time.time()),
                                          step if isinstance(step, int) else -1,
                                          str(data.get("path"))))

    def note_gpus(self, gpu_pids: Mapping[int, Collection[int]]) -> None:
        """The daemon's newest GPU sample: the processes NVML lists on each GPU. Those
        running one of the job's processes (torchrun's process group) are the GPUs of this
        attempt, whose XIDs are the job's (`note_xid`)."""
        sup = self.supervisor
        group = sup.pid if sup is not None and sup.running else None
        if group is None:
            return
        mine = [gpu for gpu, pids in gpu_pids.items()
                if any(_in_group(pid, group) for pid in pids)]
        if mine:
            self.progress.note_gpus(mine)

    def note_xid(self, gpu: int, xid: int, gpu_pids: Optional[Collection[int]] = None) -> None:
        """An XID of GPU `gpu` (`gpu_pids`: the processes the newest sample listed on it,
        None when not sampled): the job's when it runs there, dropped when the job runs
        on other GPUs and other processes run there, else kept as not known to be the
        job's (agent.job.progress, `recovery.classify`)."""
        self.progress.note_xid(xid, gpu, gpu_pids)

    def request(self, action: str, args: Optional[dict] = None) -> dict:
        """Queue an operation after checking it makes sense in the current state."""
        state = self.state
        self._check(action, args or {}, state)
        if action in jobstate.PENDING_ACTIONS:
            # Kept in the saved state before it is queued: acknowledged, it is carried out
            # by this agent or, if this one is killed first, by the one that adopts the job.
            with self._accepted_lock:
                self._accepted.append({"action": action, "args": dict(args or {}),
                                       "at": time.time()})
            self.save()
        self._commands.put((action, dict(args or {})))
        return {"job": self.name, "state": state}

    def _check(self, action: str, args: dict, state: str) -> None:
        """Refuse (OpError) an operation that makes no sense in `state`."""
        if action == ops.PAUSE and state not in (RUNNING, BACKOFF, STARTING):
            raise OpError("job %r is %s: only a running job can be paused" % (self.name, state))
        if action == ops.PAUSE and state == BACKOFF and args.get("freeze"):
            raise OpError("job %r is waiting to restart after a failure: it has no process "
                          "to freeze (a pause without freeze cancels the restart)" % self.name)
        if action == ops.THAW and state != FROZEN:
            raise OpError("job %r is %s, not frozen" % (self.name, state))
        if action == ops.RESUME and state not in (*IDLE_STATES, FROZEN):
            raise OpError("job %r is %s: nothing to resume" % (self.name, state))
        if action == ops.STOP and state in (STOPPED, FINISHED):
            raise OpError("job %r is already %s" % (self.name, state))
        if action == ops.SCALE:
            self.membership.check(state, args)

    # -- life ------------------------------------------------------------------------
    def start(self, use_newest: bool = False,
              fork_from: Optional[Tuple[Path, Optional[int]]] = None,
              standby: bool = False, op_id: object = None) -> None:
        """Start the first attempt: from scratch, from the newest valid checkpoint, or as
        a fork from a checkpoint of (the parent's checkpoint dir, step or None: newest);
        or, for a spare, wait in standby until it takes over from an excluded host.
        `op_id`: the operator's op that starts it (its generation, agent.job.peer_end)."""
        self.spec.prepare_dirs()
        self._start_op = op_id  # a fork's event names it: the cockpit waits for that one
        self._started_by_operator(op_id)
        if standby:
            self.state = STANDBY
            self.membership.standby()
        self._thread = threading.Thread(target=self._run, args=(use_newest, fork_from),
                                        name="job-%s" % self.name, daemon=True)
        self._thread.start()

    def adopt(self, saved: dict) -> None:
        """Take the job over from a previous agent, as `agent.wire.jobstate` saved it: its
        processes are watched again where they run, or, if the attempt ended while no
        agent was there, the failure is handled now."""
        self._restore(saved)  # before any record journaled from the spools reaches it
        self._thread = threading.Thread(target=self._run, args=(False, None),
                                        kwargs={"adopted": saved},
                                        name="job-%s" % self.name, daemon=True)
        self._thread.start()

    def close(self, grace: float) -> None:
        """Stop the job for good (the daemon is exiting): no recovery, no restart.

        The job's thread sees the close between operations, and its long waits (a pause)
        give up on it; one still held past `grace` + CLOSE_WAIT (a look at a hung
        checkpoint dir) is left behind: the attempt current then is stopped here, and
        that thread starts no other (`launch` checks under `_launch_lock`)."""
        self._closing.set()
        self._commands.put(("close", {"grace": grace}))
        thread = self._thread
        if thread is not None:
            thread.join(grace + CLOSE_WAIT)
            if thread.is_alive():
                self.log("job %s: its thread is still busy %.0f s after the stop; its "
                         "processes are stopped without it" % (self.name, grace + CLOSE_WAIT))
        # An attempt starting now has started once the lock is free, and is stopped too;
        # one whose start hangs (an exec on a hung mount) is stopped by its thread.
        held = self._launch_lock.acquire(timeout=CLOSE_WAIT)
        sup = self.supervisor
        if held:
            self._launch_lock.release()
        if sup is not None and sup.running:
            sup.stop(grace)
        self.save(STOPPED)  # stopped with the agent: nothing for a new agent to adopt

    def retire(self) -> None:
        """This part is replaced by a new one of the same name (a launch after it ended):
        its thread ends, saving and stopping nothing (it runs no process, and the new
        part owns the state file). Left running, each replaced part kept a thread that
        looked every half second, and followed the other hosts' markers, for the agent's
        life."""
        self._closing.set()
        self._commands.put(("close", {}))

    @property
    def closing(self) -> bool:
        """Whether the agent is stopping the job for good (`close`)."""
        return self._closing.is_set()

    def pid_ranks(self) -> Dict[int, Optional[int]]:
        sup = self.supervisor
        return sup.pid_ranks() if sup is not None else {}

    @property
    def running(self) -> bool:
        sup = self.supervisor
        return sup is not None and sup.running

    def describe(self) -> dict:
        return {"job": self.name, "state": self.state, "attempt": self.attempt,
                "restarts": self.policy.restarts, "run_dir": str(self.spec.run_dir),
                "hosts": list(self.spec.hosts),
                "pid": self.supervisor.pid if self.supervisor is not None else None}

    # -- the job's thread -------------------------------------------------------------
    # The job's loop outlives an unexpected error in one of its steps (a look at the
    # attempt, a restart, an operation): the error is said, once per step and kind, and
    # again every LOOP_REPORT_EVERY s with how often it recurred; the looks then wait
    # LOOP_BACKOFF s, doubled at each error in a row up to LOOP_BACKOFF_MAX s, while the
    # operator's operations are still carried out. Only a decision fails the job.
    LOOP_BACKOFF = WATCH
    LOOP_BACKOFF_MAX = 60.0
    LOOP_REPORT_EVERY = 600.0

    def _run(self, use_newest: bool, fork_from: Optional[Tuple[Path, Optional[int]]],
             adopted: Optional[dict] = None) -> None:
        # Over 80 lines: the job thread's whole life, start (adopted, forked, resumed)
        # then each step of the loop guarded on its own; split, the steps' guards and
        # the back-off they share would be passed between the parts.
        try:
            checkpoint = None
            retry_now: Optional[float] = None
            if adopted is not None:
                retry_now = self._adopt(adopted)
            elif self.state == STANDBY:
                pass
            elif fork_from is not None:
                checkpoint = self._fork_checkpoint(*fork_from)
                if checkpoint is None:
                    self.state = FAILED
                    return
            elif use_newest:
                checkpoint, _skipped = self.newest_checkpoint()
            elif self.state != STANDBY and adopted is None and not self._fresh_start():
                self.state = FAILED
                return
            if self.state != STANDBY and adopted is None:
                self.launch(checkpoint)
            retry_at: Optional[float] = retry_now
            failures = 0  # steps in a row that raised
            quiet_until = 0.0  # no look before then, after a step raised
            said: Dict[Tuple[str, str], List[float]] = {}  # (step, error): said at, repeats

            def trouble(doing: str, exc: Exception) -> float:
                """Say (or count) an unexpected error of one step; when to look next."""
                nonlocal failures
                failures += 1
                now = time.time()
                wait = min(self.LOOP_BACKOFF_MAX,
                           self.LOOP_BACKOFF * 2.0 ** min(failures - 1, 30))
                key = (doing, type(exc).__name__)
                before = said.get(key)
                if before is not None and now - before[0] < self.LOOP_REPORT_EVERY:
                    before[1] += 1
                    return now + wait
                said[key] = [now, 0.0]
                tb = exc.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                where = None if tb is None else "%s:%d in %s" % (
                    tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name)
                repeats = int(before[1]) if before is not None else 0
                error = "%s: %s" % (type(exc).__name__, exc)
                try:
                    self.event(SAMPLER_ERROR, "job %s: %s failed: %s%s; the job goes on as "
                               "it was (%s), its next look in %.1f s" % (
                                    self.name, doing, error,
                                    " (%d more time(s) since it was last said)" % repeats
                                    if repeats else "", self.state, wait),
                               {"job_state": self.state, "doing": doing, "error": error,
                                "where": where, "repeats": repeats,
                                "failures_in_a_row": failures, "next_look_in": wait})
                except Exception:  # nowhere to say it: the job goes on all the same
                    pass
                return now + wait

            while not self._closing.is_set():
                try:
                    self._save_if_due()
                except Exception as exc:  # said, as any step's (trouble)
                    quiet_until = trouble("saving its state", exc)
                try:
                    action, args = self._commands.get(timeout=self._next_look())
                except queue.Empty:
                    action, args = "", {}
                if action == "close":
                    break
                doing = "carrying out the operator's %s" % action
                try:
                    if action:
                        if args.pop(CARRIED, False) and not self._still_applies(action, args):
                            continue
                        try:
                            retry_at = self._operate(action, args, retry_at)
                        except OSError as exc:
                            self._op_failed(action, args, exc)
                        finally:
                            self._carried_out(action)
                        continue
                    if time.time() < quiet_until:
                        continue
                    doing = "following the other hosts' parts"
                    if self._follow_peers():
                        retry_at = None  # this part ended or started again as another's did
                    elif self.state == BACKOFF and retry_at is not None and (
                            time.time() >= retry_at):
                        doing = "restarting after a failure"
                        self._restart_after_failure()
                        retry_at = None  # once restarted: one that raised is tried again
                    elif self.state == FROZEN and self._freeze_until is not None and (
                            time.time() >= self._freeze_until):
                        doing = "thawing at the end of its freeze"
                        self._thaw("hold of the freeze ran out")
                    elif self.state == RUNNING:
                        doing = "watching its attempt"
                        retry_at = self._watch()
                    elif self.state == STANDBY:
                        doing = "waiting as a spare for its claim"
                        self.membership.poll_takeover()
                    failures = 0
                except Exception as exc:  # one step's bug never ends the job, nor its trainer
                    quiet_until = trouble(doing, exc)
                    if self.state == BACKOFF and retry_at is None:
                        retry_at = quiet_until  # a restart was decided: it stays due
        except Exception as exc:  # the agent must outlive a bug in one job's handling
            self.state = FAILED
            self.event(SAMPLER_ERROR, "job %s: recovery loop failed: %s: %s"
                       % (self.name, type(exc).__name__, exc), {"job_state": self.state})
        finally:
            sup = self.supervisor
            if sup is not None and sup.running:
                sup.stop(self.spec.stop_grace)

    def launch(self, checkpoint: Optional[checkpoints.Checkpoint],
               reason: str = launch_reasons.LAUNCH) -> None:
        if self._closing.is_set():
            self._not_launched(reason)
            return
        self.attempt += 1
        try:  # a relaunch may bring a new host set, hence a new dir of this host's own
            self.looking_in(self.spec.shared_dir, self.spec.prepare_dirs,
                            "preparing its run dir", "a hung network mount?")
        except (OpError, OSError) as exc:
            self._launch_failed("job %s: cannot prepare its run dir: %s" % (self.name, exc),
                                "check the run dir %s on this host" % self.spec.shared_dir)
            return
        path = str(checkpoint.path) if checkpoint is not None else None
        argv = self.spec.argv(path, self.overrides)
        error_file = paths.error_file(self.spec.run_dir, self.name)
        try:
            error_file.unlink()
        except FileNotFoundError:
            pass
        sup = Supervisor(argv, self.name, self.spec.run_dir, self.journal,
                         env=self.spec.environment(path), cwd=self.spec.workdir,
                         started_data={"attempt": self.attempt, "reason": reason,
                                       "checkpoint": path, "spec": self.spec.raw,
                                       "overrides": self.overrides})
        self._attempt_checkpoint = checkpoint
        self.progress.new_attempt(time.time())
        self.forget_workers()
        err = paths.stderr_log(self.spec.run_dir, self.name)
        self._err_offset = err.stat().st_size if err.exists() else 0
        self.membership.started()
        failed: Optional[RuntimeError] = None
        with self._launch_lock:
            if self._closing.is_set():  # the agent stopped while this thread prepared it
                self.attempt -= 1
                self._not_launched(reason)
                return
            self.supervisor = sup
            self.save(RUNNING)  # before the start: a job started is never one nobody knows
            try:
                sup.start()
            except RuntimeError as exc:
                failed = exc
        if failed is None and self._closing.is_set():
            # The agent began stopping during the start, and close() may have given up
            # waiting for it (a start that hung): the attempt is ended here too.
            sup.stop(self.spec.stop_grace)
        if failed is not None:
            self._launch_failed(str(failed), "check the spec's python, script and workdir "
                                "on this host")
            self.save()
            return
        self.state = RUNNING
        self.save()

    def _not_launched(self, reason: str) -> None:
        """A launch asked for once the agent is stopping the job: no process starts, as
        none would be watched (the agent's log says so; the job is saved as stopped)."""
        self.log("job %s: %s not started: %s" % (self.name, reason, AGENT_STOPPING))

    def _launch_failed(self, message: str, hint: str) -> None:
        """No attempt could start: the job has failed, and says so in its lifecycle too
        (an interruption the agent will not retry), or a cockpit would keep showing what
        the previous event said ("recovering", "starting")."""
        self.state = FAILED
        self.peers.announce(peer_end.GAVE_UP, "launch_failed", message)
        self.alert("resource", "critical", "launch_failed", message, hint)
        now = time.time()
        self.interrupted(Diagnosis(LAUNCH_FAILED, [message], {}, hint=hint),
                         Decision(False, 0.0, "the launch itself failed", hint), now, now,
                         self.progress.cur_max, msg="job %s could not start: %s; not "
                         "restarting" % (self.name, message))

    def _watch(self) -> Optional[float]:
        """One look at the running attempt; returns when to retry if it just failed."""
        sup = self.supervisor
        assert sup is not None
        now = time.time()
        if not sup.running:
            code = sup.returncode
            if code == 0:
                self.state = FINISHED
                return None
            if self._vanished_at is not None:
                detected, failure_at, note = self._vanished_at
                return self._failed(detected, failure_at, note)
            return self._failed(now, self._last_seen_alive(now), None)
        if now - self._ranks_at >= RANKS_REFRESH:
            ranks = sup.rank_pids()
            # A worker that ended since the last look is seen ending, though torchrun
            # has reaped it (and, elastic, restarted workers in place) since.
            for pid, rank in self._ranks.items():
                ranks.setdefault(pid, rank)
            self._ranks = ranks
            self._ranks_at = now
        if self.spec.elastic:
            self.membership.tick(now)
        ended = []
        for pid, rank in list(self._ranks.items()):
            status = exit_status(pid)
            if status is None:
                self._last_alive[pid] = now
            else:
                del self._ranks[pid]
                ended.append((_blame_order(status), pid, rank, status))
        # An elastic job's torchrun restarts its workers itself when its nodes change:
        # True is such a regroup; False, a failure of this host's ranks (torchrun would
        # restart them in place: no waiting for it); None, torchrun's exit code decides.
        verdict = (self.membership.workers_ended(sorted(ended), now)
                   if ended and self.spec.elastic else None)
        if verdict:
            return None
        # Seen in one look, a rank killed by torchrun's teardown (SIGTERM) is a
        # consequence; one already reaped, or failed on its own, went first.
        for _order, pid, rank, status in sorted(ended):
            if self._vanished_at is None:
                self._vanished_at = (now, self._last_alive.get(pid, now),
                                     "rank %s (pid %d) %s" % (rank, pid, describe_status(
                                         status)))
            if status in (0, -1) and verdict is None:
                # Ended cleanly, or reaped before its status could be read: torchrun's
                # own exit code (normally within its monitor interval) tells which.
                if status == 0:  # the job is ending: the others' teardown is no hang
                    with self.progress.lock:
                        self.detector.end("rank %s (pid %d) exited cleanly" % (rank, pid))
                continue
            # A worker failed: the failure is known now, not after torchrun's teardown.
            detected, failure_at, note = self._vanished_at
            sup.wait(CRASH_EXIT_WAIT if verdict is None else 0.0)
            if sup.running:
                sup.stop(self.spec.stop_grace)
            return self._failed(detected, failure_at, note,
                                self.membership.failure if verdict is False else None)
        return self._judge_silence(now)

    def _judge_silence(self, now: float) -> Optional[float]:
        """The hang check of one look at a running attempt: when to retry if it hung.

        Not for `CRASH_EXIT_WAIT` after a rank was seen ending without a status that
        says how (torchrun reaped it first): its peers wait on it in their collectives,
        silent, and torchrun's exit, due within its monitor interval, says why it
        ended. Judged a hang meanwhile, a rank killed on a loaded host was restarted as
        a hang, its cause lost."""
        vanished = self._vanished_at
        if vanished is not None and now - vanished[0] < CRASH_EXIT_WAIT:
            return None
        with self.progress.lock:
            if self._journal_blind(now):  # its silence is the agent's, not the job's
                self.detector.reset(now, new_attempt=False)
            hung = self.detector.hung(now)
            silent, threshold = self.detector.silent_for(now), self.detector.threshold()
            median, last_step = self.detector.median_step_time(), self.detector.last_step
        if hung:
            return self._hang(now, silent, threshold, median, last_step)
        return None

    def _journal_blind(self, now: float) -> bool:
        """Whether the agent cannot see the ranks' steps now. It sees them as the spool
        tailer journals them; while the journal cannot write (a full disk,
        `agent.journal.full`) they wait in the spool files, and a step nobody can read
        is no hang: restarting for it would lose the steps since the last checkpoint to
        a fault of the agent's disk. Silence counts again `JOURNAL_CATCH_UP` after the
        journal writes again, once the waiting records are read."""
        if self.journal.fault is not None:
            return True
        ended = self.journal.fault_ended_at
        return ended is not None and now - ended < JOURNAL_CATCH_UP

    def _last_seen_alive(self, now: float) -> float:
        return max(self._last_alive.values()) if self._last_alive else now

    def _hang(self, now: float, silent: float, threshold: float, median: Optional[float],
              last_step: Optional[int]) -> Optional[float]:
        sup = self.supervisor
        assert sup is not None
        if last_step is None:
            what = "no first step within %.1f s of the start (hang.startup)" % silent
        else:
            what = ("no step after step %d for %.1f s (limit %.1f s = max(floor %g s, %g × "
                    "median step time %s))" % (last_step, silent, threshold,
                                               self.detector.floor, self.detector.k,
                                               "%.3f s" % median if median else "n/a"))
        ranks = {pid: rank for pid, rank in sup.rank_pids().items() if alive(pid)}
        stacks_path = paths.stacks_file(self.spec.run_dir, self.name, self.attempt)
        stacks = dump_stacks(ranks, stacks_path, self._new_err_output)
        evidence = [what]
        if stacks["file"]:
            evidence.append("stacks of ranks %s (%s) in %s" % (
                ", ".join(str(r) for r in stacks["ranks"]), stacks["method"], stacks["file"]))
        for rank, why in sorted(stacks["unavailable"].items()):
            evidence.append("stacks of rank %s unavailable: %s" % (rank, why))
        failure_at = now - silent  # the last step: the hang began right after it
        sup.stop(0.0)  # a hung rank cannot act on SIGTERM: no grace to wait out
        # A hardware XID of the job's GPUs held for this attempt names the cause.
        diagnosis = hang_diagnosis(evidence, {"step": last_step}, self.progress.telemetry())
        return self._failed(now, failure_at, None, diagnosis, extra={"stacks": stacks,
                                                                      "silent_for": silent,
                                                                      "threshold": threshold})

    def _new_err_output(self) -> str:
        # The stacks follow the hang signal at once: the head of what came since, not a
        # trainer's gigabytes of stderr before it, at most `STACKS_MAX_BYTES`.
        err = paths.stderr_log(self.spec.run_dir, self.name)
        chunk, self._err_offset = read_new(err, self._err_offset, STACKS_MAX_BYTES,
                                           keep_head=True)
        return chunk.decode("utf-8", "replace")

    def _failed(self, detected_at: float, failure_at: float, note: Optional[str],
                diagnosis: Optional[Diagnosis] = None, extra: Optional[dict] = None
                ) -> Optional[float]:
        sup = self.supervisor
        assert sup is not None
        if sup.running:
            sup.wait(CRASH_EXIT_WAIT)
        # Ranks of a multi-host job fail on their peers as soon as another host's part
        # ends: when that host was paused or stopped, or gave up, this exit is its
        # consequence, not an interruption to diagnose, count and restart from.
        if self._peer_ended(at_once=True):
            return None
        if diagnosis is None:
            error = read_error_file(paths.error_file(self.spec.run_dir, self.name))
            diagnosis = classify(sup.returncode, list(sup.tail), error,
                                 self.progress.telemetry())
            if note and diagnosis.where.get("rank") is not None:
                # torchrun's account names the rank that failed first; what /proc showed
                # may be a peer its teardown took down, so it comes second.
                diagnosis.evidence.append(note)
            elif note:
                diagnosis.evidence.insert(0, note)
            if error is not None and error.get("timestamp"):
                failure_at = min(failure_at, float(error["timestamp"]))
        exclusion = self.membership.exclusion(diagnosis)  # elastic: this host leaves the job
        decision = exclusion[1] if exclusion else self.decide_restart(diagnosis, failure_at)
        last_step = self.progress.cur_max
        extra = dict(extra or {})
        if exclusion:
            extra["exclusion"] = exclusion[0]
        self.interrupted(diagnosis, decision, detected_at, failure_at, last_step,
                         sup.returncode, extra)
        if exclusion:
            self.membership.excluded(exclusion[0])
            return None
        if not decision.retry:
            self.state = FAILED
            self.peers.announce(peer_end.GAVE_UP, diagnosis.cause, decision.reason)
            self.alert(ALERT_KINDS.get(diagnosis.cause, "resource"), "critical",
                       "recovery_stopped", "job %s stopped after %s: %s" % (
                self.name, diagnosis.cause, decision.reason), decision.hint or diagnosis.hint,
                {"step": last_step, **{k: v for k, v in diagnosis.where.items()
                                       if v is not None}})
            return None
        self._failure = self._outage(failure_at, diagnosis.cause, last_step)
        self.state = BACKOFF
        return time.time() + decision.delay

    def decide_restart(self, diagnosis: Diagnosis, failure_at: float) -> Decision:
        """Retry or stop, within the job-wide restart budget (agent.job.restart_budget):
        this host's restarts and, for a multi-host job, the other hosts' as the shared
        dir has them (a dir that does not answer leaves this host's own, said in the
        decision's budget)."""
        spec = self.spec
        generation = self.peers.generations.current
        others: List[dict] = []
        unread = None
        if spec.nnodes > 1 or len(spec.hosts) > 1:
            answered, found = self.peers.shared.call(
                lambda: read_others(spec.shared_dir, self.name, spec.host or "local"))
            others = list(found or [])
            if not answered:
                unread = self.peers.shared.unanswered(spec)
        judged = self.budget.judge(diagnosis.cause, failure_at, generation, others,
                                   time.time())
        if unread is not None:
            judged["unread"] = unread
        decision = self.policy.decide(diagnosis, judged)
        if decision.retry:
            self.budget.record(diagnosis.cause, failure_at, generation)
            if others or spec.nnodes > 1 or len(spec.hosts) > 1:
                entries = self.budget.state()
                answered, error = self.peers.shared.call(lambda: write_mine(
                    spec.shared_dir, self.name, spec.host or "local", entries))
                if not answered or error:
                    judged["unwritten"] = error or self.peers.shared.unanswered(spec)
        return decision

    def _outage(self, failure_at: float, cause: str, last_step: Optional[int]) -> dict:
        """The failure a recovery will be measured from. A restart that fails before its
        first step does not end the outage: the recovery still counts from the first
        failure and names its cause (the later ones, often a peer's rendezvous or
        collective failing while the group re-forms, are listed after it)."""
        ongoing = self.progress.recovering()
        first = self._failure if ongoing and self._failure else None
        if first is None:
            return {"failure_at": failure_at, "cause": cause, "last_step": last_step,
                    "then": []}
        steps = [x for x in (first.get("last_step"), last_step) if x is not None]
        return {"failure_at": min(float(first["failure_at"]), failure_at),
                "cause": first["cause"], "last_step": max(steps) if steps else None,
                "then": [*(first.get("then") or []), cause]}

    def _restart_after_failure(self) -> None:
        checkpoint, skipped = self.newest_checkpoint()
        failure = self._failure
        last = failure["last_step"]
        self.progress.await_recovery({
            "failure_at": failure["failure_at"], "cause": failure["cause"],
            "checkpoint": str(checkpoint.path) if checkpoint is not None else None,
            "checkpoint_step": checkpoint.step if checkpoint is not None else 0,
            "restart_count": self.policy.restarts, "skipped": skipped,
            "last_step": last, "then": list(failure.get("then") or []),
        })
        self.launch(checkpoint, reason=launch_reasons.RECOVERY)

    def _journal_recovery(self, pending: dict, step: int, ts: float) -> None:
        with self.progress.lock:
            last = max(x for x in (pending["last_step"], self.progress.prev_max, 0)
                       if x is not None)
        self.policy.progressed()
        lost = max(0, last - pending["checkpoint_step"])
        seconds = round(ts - pending["failure_at"], 3)
        then = list(pending.get("then") or [])
        self.event(RECOVERY, "job %s recovered from %s%s in %.1f s at step %d (%d step(s) "
                   "lost, restart %d)" % (
                        self.name, pending["cause"],
                        " (then %s on restart)" % ", ".join(then) if then else "", seconds,
                        step, lost, pending["restart_count"]), {
            "cause": pending["cause"], "recovery_seconds": seconds, "steps_lost": lost,
            "restart_count": pending["restart_count"], "checkpoint": pending["checkpoint"],
            "checkpoint_step": pending["checkpoint_step"], "first_step": step,
            "skipped": pending["skipped"], "failed_restarts": then}, step=step)
        self.save()  # now, not at the next look: a new agent must not journal it again

    def _fork_checkpoint(self, parent_dir: Path, step: Optional[int]
                         ) -> Optional[checkpoints.Checkpoint]:
        """Copy the parent's chosen checkpoint into this job's checkpoint dir; journal the
        fork (parent job and step), or why it could not be made."""
        parent = (self.spec.parent or {}).get("job")
        if step is None:
            source, _skipped = self._newest_valid(parent_dir)
            why: Optional[str] = "no valid checkpoint in %s" % parent_dir
        else:
            source, why = self.looking_in(
                parent_dir, lambda: checkpoints.at_step(parent_dir, step))
        copied = None
        if source is not None:
            try:
                copied = checkpoints.copy_to(source, self.spec.checkpoint_dir)
            except OSError as exc:
                why = "copying %s failed: %s" % (source.path, exc)
        if copied is None or source is None:
            self.event(FORK, "fork %s of %s failed: %s" % (self.name, parent, why),
                       {"ok": False, "id": self._start_op, "parent": parent, "error": why})
            return None
        self.spec.raw["parent"] = {"job": parent, "step": source.step,
                                   "checkpoint": str(source.path)}
        self.event(FORK, "job %s forked from %s at step %d%s" % (
            self.name, parent, source.step, " with %s" % ", ".join(
                "%s=%s" % kv for kv in sorted(self.overrides.items()))
            if self.overrides else ""), {
            "ok": True, "id": self._start_op, "parent": parent, "parent_step": source.step,
            "checkpoint": str(copied.path), "source": str(source.path),
            "run_dir": str(self.spec.run_dir), "overrides": self.overrides}, step=source.step)
        return copied

    def _fresh_start(self) -> bool:
        """A launch from step 0 into a checkpoint dir that still holds checkpoints (an
        earlier run under the same name): they are set aside first, or a recovery, pause
        or fork of this run would restore the earlier run's newest step. False (and the
        job is not started) when some could not be moved."""
        directory = self.spec.checkpoint_dir
        target, moved, failed = self.looking_in(
            directory, lambda: checkpoints.set_aside(directory))
        if target is None or not (moved or failed):
            return True
        steps = sorted({s for s, p in checkpoints.candidates(target)})
        where = "steps %d to %d" % (steps[0], steps[-1]) if len(steps) > 1 else (
            "step %d" % steps[0] if steps else "no step")
        data = {"ok": not failed, "from": str(directory), "to": str(target),
                "moved": len(moved), "failed": [{"path": p, "error": w} for p, w in failed]}
        if failed:
            self.event(CHECKPOINTS_SET_ASIDE, "job %s not started: its checkpoint dir %s "
                       "holds an earlier run's checkpoints and %d could not be moved to %s "
                       "(%s: %s); a fresh start beside them would recover into them: move "
                       "them away, or continue that run with resume" % (
                            self.name, directory, len(failed), target, failed[0][0],
                            failed[0][1]), data)
            self.alert("resource", "critical", "launch_refused",
                       "job %s not started: %d earlier checkpoint(s) in %s could not be "
                       "moved aside (%s)" % (self.name, len(failed), directory,
                                              failed[0][1]),
                       "move the earlier run's checkpoints out of %s, or continue that run "
                       "with resume" % directory)
            return False
        self.event(CHECKPOINTS_SET_ASIDE, "job %s starts afresh: the earlier run's "
                   "checkpoints in %s (%s) were moved to %s, so that no restart of this run "
                   "restores them" % (self.name, directory, where, target), data)
        return True

    def _newest_valid(self, directory: Path
                      ) -> Tuple[Optional[checkpoints.Checkpoint], List[Tuple[str, str]]]:
        return self.looking_in(directory, lambda: checkpoints.newest_valid(directory))

    def looking_in(self, directory: Path, look: Callable[[], T],
                    what: str = "a look at its checkpoint dir",
                    maybe: str = "a checksum of a large checkpoint, or a hung network "
                                 "mount?") -> T:
        """`look()`, `what` is done in `directory` (a look at a checkpoint dir, by
        default), journaled when it takes longer than SLOW_LOOK and again when it ends.
        The job's restart, pause or launch waits on it either way (it needs the answer),
        but a checksum of a large checkpoint, or a network mount whose server went away,
        would otherwise leave the job silent, its state "waiting to restart" with no word
        of why. `maybe`: what could be taking so long."""
        pending = OffThread(look, "checkpoint-look-%s" % self.name)
        if not pending.wait(SLOW_LOOK):
            since = time.time() - SLOW_LOOK
            self.event(SAMPLER_ERROR, "job %s: %s %s has taken %.0f s so far (%s); the "
                       "job waits for it" % (self.name, what, directory, SLOW_LOOK, maybe),
                       {"job_state": self.state, "answered": False, "dir": str(directory),
                         "within": SLOW_LOOK})
            pending.wait()
            seconds = time.time() - since
            self.event(SAMPLER_ERROR, "job %s: %s %s was done after about %.0f s"
                       % (self.name, what, directory, seconds),
                       {"job_state": self.state, "answered": True, "dir": str(directory),
                         "seconds": round(seconds, 1)})
        return pending.result()

    def newest_checkpoint(self) -> Tuple[Optional[checkpoints.Checkpoint], list]:
        found, skipped = self._newest_valid(self.spec.checkpoint_dir)
        for path, why in skipped:
            self.event(CHECKPOINT_SKIPPED, "checkpoint %s skipped: %s" % (path, why),
                       {"path": path, "error": why})
        return found, [{"path": p, "error": w} for p, w in skipped]

    # -- operations ------------------------------------------------------------------
    def _operate(self, action: str, args: dict, retry_at: Optional[float]) -> Optional[float]:
        if action == ops.PAUSE:
            if args.get("freeze"):
                self._freeze(args)
                return retry_at
            return self._pause(args, retry_at)
        if action == ops.THAW:
            self._thaw("operator")
            return retry_at
        if action == ops.RESUME:
            if self.state == FROZEN:
                self._thaw("operator")
                return retry_at
            self._resume(args.get("id"))
            return None
        if action == ops.RELAUNCH:
            self.stop_attempt(why=launch_reasons.FOR_RELAUNCH)
            self._started_by_operator(args.get("id"))  # or left out: its give-up is over
            if args.get("exclude_self"):
                self.state = STOPPED
                if self._outlived_stop():
                    self.event(RELAUNCH, "job %s: this host is excluded, but its part did not "
                               "stop: its %s" % (self.name, NOT_EXITED),
                               {"excluded": True, "ok": False, "error": NOT_EXITED})
                    return None
                self.event(RELAUNCH, "job %s: this host is excluded; its part stopped"
                           % self.name, {"excluded": True})
                return None
            if isinstance(args.get("spec"), LaunchSpec):
                self.spec = args["spec"]
            checkpoint, skipped = self.newest_checkpoint()
            self.policy.progressed()
            # Said before the launch, which may yet fail: its own event then says so.
            self.event(RELAUNCH, "job %s relaunching from %s" % (
                self.name, checkpoint.path if checkpoint else "the start"), {
                "checkpoint": str(checkpoint.path) if checkpoint else None,
                "step": checkpoint.step if checkpoint else 0, "skipped": skipped,
                "nnodes": self.spec.nnodes})
            self.launch(checkpoint, reason=launch_reasons.RELAUNCH)
            return None
        if action == ops.STOP:
            was = self.state
            # Told before the processes end, as for a pause (see _pause).
            self.peers.announce(peer_end.STOPPED, "operator", "stopped by the operator")
            ended = self.stop_attempt(float(args.get("grace", self.spec.stop_grace)),
                                      why=launch_reasons.FOR_STOP)
            self.state = STOPPED
            if not ended:
                self._stopped_idle(was)
            return None  # no restart is pending any more: one due in a backoff is dropped
        if action == ops.SCALE:
            self.membership.scale(args)
            return retry_at
        return retry_at

    def _pending(self) -> List[dict]:
        with self._accepted_lock:
            return list(self._accepted)

    def _carried_out(self, action: str) -> None:
        """The oldest pending `action` is done (or its failure said): no agent is to carry
        it out again. Operations are carried out in the order they were accepted."""
        if action not in jobstate.PENDING_ACTIONS:
            return
        with self._accepted_lock:
            done = next((e for e in self._accepted if e["action"] == action), None)
            if done is None:
                return
            self._accepted.remove(done)
        self.save()

    def _still_applies(self, action: str, args: dict) -> bool:
        """An operation the previous agent acknowledged, checked as the operator's own
        would be against the state the job was found in; one that no longer makes sense
        (a thaw of a job whose processes ended meanwhile) is not carried out, and its
        event says so and why."""
        try:
            self._check(action, args, self.state)
        except OpError as exc:
            data: Dict[str, Any] = {"ok": False, "carried_over": True, "error": str(exc),
                                    "job_state": self.state, "id": args.get("id")}
            if action == ops.PAUSE:
                data["mode"] = "freeze" if args.get("freeze") else "checkpoint"
            self.event(action, "job %s: the %s the previous agent accepted is not carried "
                       "out: %s" % (self.name, action, exc), data)
            self._carried_out(action)
            return False
        return True

    def _op_failed(self, action: str, args: dict, exc: OSError) -> None:
        """An operation the disk could not carry out (a full run dir): it failed, and its
        own event says so; the job stays as it was, still watched. Left to the catch-all
        of `_run`, the error would end this thread, and with it the job."""
        data = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc),
                "job_state": self.state, "id": args.get("id")}
        if action == ops.PAUSE:
            data["mode"] = ("freeze" if args.get("freeze") else
                            "follow" if args.get("follow") else "checkpoint")
        self.event(action, "job %s: %s failed: %s; the job goes on as it was (%s)" % (
            self.name, action, data["error"], self.state), data)

    def stop_attempt(self, grace: Optional[float] = None, why: Optional[str] = None) -> bool:
        """Stop the attempt's processes; False when none was running. `why` goes into
        its `job_exited` (a stop for a pause exits non-zero, and is no failure)."""
        sup = self.supervisor
        if sup is None or not sup.running:
            return False
        sup.ended_for = why
        sup.stop(self.spec.stop_grace if grace is None else grace)
        return True

    def _stopped_idle(self, was: str, why: str = launch_reasons.FOR_STOP) -> None:
        """A stop that found no process to end (a job waiting to restart, paused, failed,
        a spare) ends its life with the `job_exited` a stopped process journals: the
        operator was told one follows the ack, and the cockpit reads a job's state from
        its last lifecycle event, which would otherwise stay "recovering" or "paused"."""
        sup = self.supervisor
        seconds = None
        if sup is not None and sup.started_at is not None and sup.ended_at is not None:
            seconds = round(sup.ended_at - sup.started_at, 3)
        code = sup.returncode if sup is not None else None
        self.event(JOB_EXITED, "job %s stopped %s; %s" % (
            self.name, "while waiting to restart after a failure: the restart is cancelled"
            if was == BACKOFF else "(it was %s)" % was,
            "its last attempt %s" % describe_status(code) if code is not None
            else "no process of it was running"),
            {"returncode": code, "pid": sup.pid if sup is not None else None,
             "seconds": seconds, "ended_for": why})

    def _pause(self, args: dict, retry_at: Optional[float]) -> Optional[float]:
        # Over 80 lines: one pause in the order it happens (ask for a checkpoint, wait
        # for it, give up or stop the processes, record where it paused); every step
        # reads the request's time and the checkpoint found.
        op_id = args.get("id")  # in each of its events: the cockpit waits for its own
        if self.state == BACKOFF:
            self._pause_in_backoff(op_id)
            return None  # the restart that was due is dropped
        timeout = float(args.get("timeout", self.spec.pause_timeout))
        if args.get("follow"):
            return self._pause_following(timeout, retry_at, op_id)
        requested = time.time()
        control = paths.control_file(self.spec.run_dir, self.name)
        control.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all (OSError: `_op_failed` says the pause failed); never glued
        # to what a failed append left, which the trainer would refuse with it.
        atomic.append_line(control, (json.dumps({"id": args.get("id"), "ts": requested,
                                                 "knobs": {"checkpoint_now": True}})
                                     + "\n").encode("utf-8"))
        self.state = PAUSING
        deadline = requested + timeout
        saved = None
        # Rank 0 may run on another host of the job (torchrun's c10d rendezvous orders
        # the nodes by its own rule), so its `checkpoint_saved` never reaches this host's
        # journal: then a new valid checkpoint in the shared checkpoint dir counts. When
        # rank 0 is here, its event does, which also means its spool is journaled up to
        # the checkpoint before its processes are stopped.
        sup = self.supervisor
        ranks = {r for r in (sup.rank_pids().values() if sup is not None else ())
                 if r is not None}
        remote_rank0 = bool(ranks) and 0 not in ranks
        before = self._newest_step() if remote_rank0 else None
        looked = requested
        while time.time() < deadline and saved is None and not self._closing.is_set():
            sup = self.supervisor
            if sup is None or not sup.running:
                break
            with self.progress.lock:
                fresh = [c for c in self._checkpoints if c[0] >= requested]
            if fresh:
                saved = fresh[0]
                break
            if remote_rank0 and time.time() - looked >= SHARED_CHECKPOINT_POLL:
                looked = time.time()
                found, _skipped = self._newest_valid(self.spec.checkpoint_dir)
                if found is not None and (before is None or found.step > before):
                    saved = (looked, found.step, str(found.path))
                    break
            time.sleep(0.02)
        if saved is None and self._closing.is_set():
            self._pause_given_up("checkpoint", op_id)
            return retry_at
        if saved is None:
            sup = self.supervisor
            if sup is not None and not sup.running:
                # The processes ended while the pause waited (the job reached its last
                # step, or failed): that, not a timeout, is why; the next watch reads
                # the exit as usual (finished, or a failure to recover from).
                self.state = RUNNING
                code = sup.returncode
                why = ("its processes %s after %.0f s, before a checkpoint was saved"
                       % (describe_status(code) if code is not None else "ended",
                          time.time() - requested))
                self.event(PAUSE, "job %s: pause not done: %s; nothing left to pause"
                           % (self.name, why),
                           {"mode": "checkpoint", "ok": False, "id": op_id, "error": why,
                             "returncode": code})
                return retry_at
            self.state = RUNNING if self.running else FAILED
            self.event(PAUSE, "job %s: pause failed: no checkpoint within %.0f s; the job "
                       "keeps running" % (self.name, timeout),
                       {"mode": "checkpoint", "ok": False, "id": op_id,
                         "error": "no checkpoint_saved within %g s" % timeout})
            return retry_at
        self._hold_at_reported_checkpoint(min(deadline, time.time() + PAUSE_STEP_WAIT))
        # Told before the processes end: the other hosts' ranks fail on this host's as
        # soon as they do, and their agents must read that failure as this pause.
        frozen_at, _skipped = self.newest_checkpoint()
        if frozen_at is not None:
            self.peers.announce(peer_end.PAUSED, "operator", "paused by the operator",
                                frozen_at.step, str(frozen_at.path))
        self.stop_attempt(why=launch_reasons.FOR_PAUSE)
        if self._outlived_stop():
            self._pause_not_ended("checkpoint", op_id)
            return None
        self._settle_spool()
        with self.progress.lock:
            last = self.progress.cur_max
        # The ranks kept training until they were stopped and may have saved again (the
        # requested checkpoint after a periodic one): a resume starts from the newest.
        newest, _skipped = self.newest_checkpoint()
        _ts, step, reported = saved
        path = reported  # type: Optional[str]
        data = {"mode": "checkpoint", "ok": True, "id": op_id}  # type: Dict[str, Any]
        if newest is not None and newest.step >= step:
            step, path = newest.step, str(newest.path)
            said = "job %s paused at step %d (checkpoint %s)" % (self.name, step, path)
        else:
            # Rank 0 reported a checkpoint that is no valid one of the checkpoint dir (a
            # trainer saving elsewhere, a path it did not name): a resume starts from the
            # newest valid one, and the pause says that step, not the one reported.
            data.update(reported_step=step, reported_checkpoint=path)
            step, path = (newest.step, str(newest.path)) if newest is not None else (0, None)
            said = ("job %s paused; rank 0 reported a checkpoint at step %d (%s), which is no "
                    "valid checkpoint in %s: a resume starts from %s" % (
                        self.name, data["reported_step"], data["reported_checkpoint"],
                        self.spec.checkpoint_dir,
                        "step %d (%s)" % (step, path) if path else "the start"))
        self.state = PAUSED
        data.update(checkpoint=path, step=step, steps_discarded=max(0, (last or step) - step))
        self.event(PAUSE, said + "; its processes have exited", data, step=step)
        if frozen_at is None or (frozen_at.step, str(frozen_at.path)) != (step, path):
            self.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", step,
                                path)
        return None

    def _outlived_stop(self) -> bool:
        """Whether the attempt's processes still run after `stop_attempt` (its SIGKILL's
        wait ran out): nothing that says they exited may be journaled then."""
        sup = self.supervisor
        return sup is not None and sup.running

    def _pause_not_ended(self, mode: str, op_id: object, peer: Optional[str] = None) -> None:
        """A pause whose stop left processes running. The checkpoint it asked for may be
        saved, but the job is not paused: it failed, and neither restarts by itself when
        those processes end at last (they were stopped on purpose) nor reads as paused;
        a resume or a stop is the operator's, once the host is looked at."""
        self.state = FAILED
        data: Dict[str, Any] = {"mode": mode, "ok": False, "id": op_id, "error": NOT_EXITED}
        if peer is not None:
            data["peer"] = peer
        self.event(PAUSE, "job %s: pause failed%s: this host's %s (pids %s)" % (
            self.name, " as host %s was paused" % peer if peer is not None else "",
            NOT_EXITED, ", ".join(str(p) for p in self._alive_pids()) or "unknown"), data)

    def _alive_pids(self) -> List[int]:
        sup = self.supervisor
        try:
            return sup.tree_pids() if sup is not None else []
        except OSError:
            return []

    def _pause_in_backoff(self, op_id: object = None) -> None:
        """Paused between a failure and its restart: the processes are gone already, so
        the pause only cancels the restart. The event says where a `resume` will start
        (the newest valid checkpoint), as a pause of a running job does."""
        newest, _skipped = self._newest_valid(self.spec.checkpoint_dir)
        step = newest.step if newest is not None else 0
        last = self._failure.get("last_step")
        self.state = PAUSED
        self.event(PAUSE, "job %s paused while waiting to restart after a failure: the "
                   "restart is cancelled; a resume starts from %s" % (
                        self.name, newest.path if newest is not None else "the start"), {
                        "mode": "checkpoint", "ok": True, "id": op_id,
                        "checkpoint": str(newest.path) if newest is not None else None,
                        "step": step, "steps_discarded": max(0, (last or step) - step),
                        "restart_cancelled": True}, step=step)
        self.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", step,
                            str(newest.path) if newest is not None else None)

    def _hold_at_reported_checkpoint(self, until: float) -> None:
        """Leave the job frozen (SIGSTOP) at a moment when the newest valid checkpoint's
        step has been journaled, so that `stop` ends it there.

        The ranks keep training while the pause is carried out and may save again; a
        trainer may also hold its newest train records back for a flush or two, and
        what is still buffered when the ranks are stopped is lost. Frozen, the ranks can
        neither save a newer checkpoint nor lose a reported step; thawed for a moment,
        they flush. Past `until`, the job is stopped where it is.
        """
        sup = self.supervisor
        while sup is not None and sup.running:
            sup.signal_tree(signal.SIGSTOP)
            newest = self._newest_step()
            with self.progress.lock:
                reported = self.progress.cur_max
            if newest is None or (reported is not None and reported >= newest) or (
                    time.time() >= until):
                return
            sup.signal_tree(signal.SIGCONT)
            time.sleep(0.05)

    def _settle_spool(self) -> None:
        """Wait until the steps the stopped ranks wrote last have been journaled (the
        daemon tails their spools on its own loop), so the pause can say how many steps
        it discards."""
        deadline = time.time() + SPOOL_SETTLE_MAX
        while time.time() < deadline:
            with self.progress.lock:
                quiet = time.time() - self.progress.train_seen_at
            if quiet >= SPOOL_SETTLE:
                return
            time.sleep(0.05)

    def _newest_step(self) -> Optional[int]:
        found, _skipped = self._newest_valid(self.spec.checkpoint_dir)
        return found.step if found is not None else None

    def _pause_following(self, timeout: float, retry_at: Optional[float],
                         op_id: object = None) -> Optional[float]:
        """On a host without rank 0: rank 0's host checkpoints and stops its part, the
        rendezvous then ends this part too, and that exit is a pause, not a failure."""
        self.state = PAUSING
        sup = self.supervisor
        if sup is not None and sup.running:
            # Its end, when rank 0's host stops, is the pause.
            sup.ended_for = launch_reasons.FOR_PAUSE
            if self.spec.elastic:  # torchrun would regroup, not end: its workers' end is
                self.membership.follow_end(timeout)
            else:
                self._wait_unless_closing(sup, timeout)
        if sup is not None and sup.running and self._closing.is_set():
            sup.ended_for = None
            self._pause_given_up("follow", op_id)
            return retry_at
        if sup is not None and sup.running:
            sup.ended_for = None
            self.state = RUNNING
            self.event(PAUSE, "job %s: pause failed: this host's part did not end within "
                       "%.0f s of the pause; it keeps running" % (self.name, timeout),
                       {"mode": "follow", "ok": False, "id": op_id,
                         "error": "still running after %g s" % timeout})
            return retry_at
        checkpoint, _skipped = self.newest_checkpoint()
        self.state = PAUSED
        self.event(PAUSE, "job %s paused; this host's processes have exited" % self.name,
                   {"mode": "follow", "ok": True, "id": op_id,
                     "checkpoint": str(checkpoint.path) if checkpoint else None,
                     "step": checkpoint.step if checkpoint else None})
        self.peers.announce(peer_end.PAUSED, "operator", "paused by the operator",
                            checkpoint.step if checkpoint else None,
                            str(checkpoint.path) if checkpoint else None)
        return None

    def _wait_unless_closing(self, sup: Supervisor, timeout: float) -> None:
        """Wait up to `timeout` for the attempt to end, or until the agent stops."""
        deadline = time.time() + timeout
        while sup.running and not self._closing.is_set():
            left = deadline - time.time()
            if left <= 0:
                return
            sup.wait(min(WATCH, left))

    def _pause_given_up(self, mode: str, op_id: object) -> None:
        """A pause still waiting when the agent stops: it is not done, and says so; the
        job's processes are stopped with the agent."""
        self.state = RUNNING if self.running else FAILED
        self.event(PAUSE, "job %s: pause not done: %s; the job is stopped with it"
                   % (self.name, AGENT_STOPPING),
                   {"mode": mode, "ok": False, "id": op_id, "error": AGENT_STOPPING})

    def _freeze(self, args: dict) -> None:
        sup = self.supervisor
        if self.state != RUNNING or sup is None or not sup.running:
            self.event(PAUSE, "job %s: freeze refused: it is %s" % (self.name, self.state),
                       {"mode": "freeze", "ok": False, "id": args.get("id"),
                         "error": "job is %s" % self.state})
            return
        hold = float(args.get("hold", 60.0))
        sup.signal_tree(signal.SIGSTOP)
        self.state = FROZEN
        self._freeze_until = time.time() + hold
        self.event(PAUSE, "job %s frozen (SIGSTOP) for at most %.0f s" % (self.name, hold),
                   {"mode": "freeze", "ok": True, "id": args.get("id"), "hold": hold,
                     "pids": sup.tree_pids()})

    def _thaw(self, why: str) -> None:
        sup = self.supervisor
        if sup is not None:
            sup.signal_tree(signal.SIGCONT)
        self._freeze_until = None
        with self.progress.lock:
            self.detector.reset(time.time(), new_attempt=False)
        self.state = RUNNING if self.running else FAILED
        self.event(RESUME, "job %s thawed (SIGCONT): %s" % (self.name, why),
                   {"mode": "thaw", "reason": why})

    def _resume(self, op_id: object, peer: Optional[peer_end.PeerResumed] = None) -> None:
        """Start the idle part (paused, stopped, failed) again from the newest valid
        checkpoint, at the operator's word (`op_id`) or, with `peer`, as that host resumed
        the part this one ended with; then tell the other hosts, for one the resume did
        not reach."""
        checkpoint, skipped = self.newest_checkpoint()
        self.policy.progressed()
        ended_in = self.peers.generations.current
        self._started_by_operator(op_id)
        where = checkpoint.path if checkpoint else "the start (no valid checkpoint)"
        step = checkpoint.step if checkpoint else 0
        data: Dict[str, Any] = {"checkpoint": str(checkpoint.path) if checkpoint else None,
                                "step": step, "skipped": skipped}
        # Said before the launch, which may yet fail: its own event then says so.
        if peer is None:
            text = "job %s resuming from %s" % (self.name, where)
        else:
            text = ("job %s resuming from %s, as host %s resumed it (the resume did not "
                    "reach this host)" % (self.name, where, peer.host))
            data.update(mode="peer", peer=peer.host)
        self.event(RESUME, text, data, step=step)
        self.launch(checkpoint, reason=launch_reasons.RESUME)
        if self._closing.is_set():
            return  # not started (the agent is stopping): no other host is to follow it
        self.peers.announce_resumed(ended_in, step, data["checkpoint"])

    def _follow_peers(self) -> bool:
        """Whether this part just ended as another host's part ended (running or waiting
        to restart, it cannot run without that host; paused, it follows a stop), or
        started again as another host's part was resumed (`_peer_resumed`)."""
        if self.state in (RUNNING, BACKOFF, PAUSED) and self._peer_ended():
            return True
        return self.state in RESUMABLE and self._peer_resumed()

    def _peer_resumed(self) -> bool:
        """Resume this idle part (paused, stopped, failed) when another host resumed the
        part it ended with and the resume did not reach here: that host's part waits in
        the rendezvous for it."""
        peer = self.peers.resume_to_follow()
        if peer is None:
            return False
        # As the operator's resume would have: the same generation, this host's op id.
        self._resume("%s-%s" % (peer.generation, self.spec.host), peer)
        self.save()
        return True

    # -- the other hosts of a multi-host job (agent.job.peer_end) ---------------------------
    def _started_by_operator(self, op_id: object = None) -> None:
        """This host's part starts again at the operator's word (`op_id`, the op that
        says so). An outage still awaiting its recovery is over too: the operator ended
        it (a pause, a stop, a relaunch), and a recovery journaled at this start's first
        step would time it with the pause in it, as if the agent had brought the job
        back. The restart budget starts afresh too: this host's restarts, the failures a
        repeat is judged against and the backoff (the job-wide budget counts by the
        operator's starts, agent.job.restart_budget), so what the next failure's decision
        and recovery say counts from this start."""
        with self.progress.lock:
            self.progress.pending_recovery = None
            self._failure = {}
        self.policy.reset()
        self.budget.started()
        self.peers.started(op_id)

    def _peer_ended(self, at_once: bool = False) -> bool:
        """End this host's part as another host's part ended (gave up, stopped, paused)
        when this one runs or waits to restart: it would otherwise wait in the
        rendezvous for that host, restart, and wait again, or train on alone. `at_once`:
        look now (this host's part just failed), not only every CHECK_EVERY."""
        peer = self.peers.to_follow(at_once)
        if peer is None:
            return False
        was = self.state
        if peer.why == peer_end.PAUSED:
            self.stop_attempt(why=launch_reasons.FOR_PAUSE)
            if self._outlived_stop():
                self._pause_not_ended("peer", None, peer.host)
                self.save()
                return True
            checkpoint, _skipped = self.newest_checkpoint()
            self.state = PAUSED
            # `id` None: no op of the operator's asked this host (the cockpit waits for
            # the events of its own ops).
            self.event(PAUSE, "job %s paused as host %s was; this host's processes have "
                       "exited" % (self.name, peer.host), {
                            "mode": "peer", "ok": True, "id": None, "peer": peer.host,
                            "checkpoint": str(checkpoint.path) if checkpoint else None,
                            "step": checkpoint.step if checkpoint else None},
                       step=checkpoint.step if checkpoint else None)
        else:
            why = (launch_reasons.FOR_STOP if peer.why == peer_end.STOPPED
                   else launch_reasons.FOR_PEER)
            ended = self.stop_attempt(why=why)
            self.state = STOPPED if peer.why == peer_end.STOPPED else FAILED
            if not ended:
                self._stopped_idle(was, why)
        self.save()
        return True

    # -- adoption (agent.wire.jobstate) ----------------------------------------------------
    def _snapshot(self, state: Optional[str] = None) -> dict:
        sup = self.supervisor
        progress = self.progress
        with progress.lock:
            data = {
                "job": self.name, "state": state or self.state, "spec": self.spec.raw,
                "overrides": self.overrides, "attempt": self.attempt,
                "attempt_started": progress.attempt_started, "prev_max": progress.prev_max,
                "cur_max": progress.cur_max, "pending_recovery": progress.pending_recovery,
                "detector": self.detector.state(),
            }
        data.update({
            "policy": self.policy.state(), "budget": self.budget.state(),
            "failure": self._failure,
            "freeze_until": self._freeze_until,
            "standby_since": self.membership.standby_since,
            "membership": self.membership.state(),
            **self.peers.state(),
            "process": sup.identity() if sup is not None else None,
            "pending_ops": jobstate.pending_out(self._pending()),
            "agent_pid": os.getpid(), "saved_at": time.time(),
            "journal_head": self.journal.head,
        })
        return data

    def save(self, state: Optional[str] = None) -> None:
        """Write the job's state for a restarted agent; a failure to write is reported,
        never fatal (the job matters more than its adoptability)."""
        with self._save_lock:  # a save that began before the close ends before its own
            if self._closing.is_set() and state != STOPPED:
                return  # stopped with the agent: only that is left to say
            data = self._snapshot(state)
            try:
                jobstate.save(self.journal.state_dir, self.name, data)
            except (OSError, TypeError, ValueError) as exc:
                error = str(exc)
                repeated = self._saved == ("error", error)
                self._saved = ("error", error)
            else:
                self._saved = (data["state"], self.attempt, self.policy.restarts,
                               self._freeze_until, bool(data["pending_recovery"]))
                self._saved_at = time.time()
                return
        if not repeated:
            self.event(SAMPLER_ERROR, "job %s: cannot save its state for adoption: %s"
                       % (self.name, error), {"job_state": self.state})

    def _save_if_due(self) -> None:
        key = (self.state, self.attempt, self.policy.restarts, self._freeze_until,
               bool(self.progress.pending_recovery))
        if key != self._saved or (self.state == RUNNING
                                  and time.time() - self._saved_at >= SAVE_EVERY):
            self.save()

    def _next_look(self) -> float:
        """Seconds until the next look at the attempt: WATCH, or less when the hang
        deadline comes first, so a hang is declared when the limit is reached."""
        if self.state != RUNNING:
            return WATCH
        with self.progress.lock:
            deadline = self.detector.deadline()
        if deadline is None:
            return WATCH
        return min(WATCH, max(0.001, deadline - time.time()))

    def _restore(self, saved: dict) -> None:
        """The bookkeeping as the previous agent left it, and its processes re-attached."""
        now = time.time()
        self.attempt = int(saved.get("attempt") or 0)
        self.policy.restore(saved.get("policy") or {})
        self.budget.restore(saved.get("budget"))
        self._failure = dict(saved.get("failure") or {})
        self.membership.restore(saved.get("membership"))
        self.peers.restore(saved)
        self._restore_pending(saved)
        progress = self.progress
        with progress.lock:
            progress.attempt_started = float(saved.get("attempt_started") or 0.0)
            progress.prev_max, progress.cur_max = saved.get("prev_max"), saved.get("cur_max")
            progress.pending_recovery = self._still_pending(saved)
            self.detector.restore(saved.get("detector") or {})
            # The steps trained while no agent watched are still in the spools, journaled
            # from now on: silence is counted from the adoption, never from before it.
            self.detector.reset(now, new_attempt=False)
        identity = saved.get("process")
        self.supervisor = (Supervisor.adopt(identity, self.journal)
                           if isinstance(identity, dict) else None)
        err = paths.stderr_log(self.spec.run_dir, self.name)
        self._err_offset = err.stat().st_size if err.exists() else 0

    def _restore_pending(self, saved: dict) -> None:
        """The operations the previous agent acknowledged and did not carry out, queued
        here in the order it accepted them, ahead of any the operator sends this agent.
        A pause it had begun (`pausing`) is not begun again: the adoption says that pause
        failed and the job keeps running (`_adopt`)."""
        accepted, self._dropped_ops = jobstate.pending_in(saved.get("pending_ops"))
        if saved.get("state") == PAUSING:
            begun = next((e for e in accepted if e["action"] == ops.PAUSE), None)
            if begun is not None:
                accepted.remove(begun)
        with self._accepted_lock:
            self._accepted = list(accepted)
        self._carried = list(accepted)
        for entry in accepted:
            self._commands.put((entry["action"], dict(entry["args"], **{CARRIED: True})))

    def _still_pending(self, saved: dict) -> Optional[dict]:
        """The saved recovery awaiting its first step, unless the journal shows that the
        previous agent journaled it after its last save (the journal is the truth)."""
        pending = saved.get("pending_recovery")
        head = saved.get("journal_head")
        if not isinstance(pending, dict) or not isinstance(head, int):
            return pending if isinstance(pending, dict) else None
        for record in JournalReader(self.journal.state_dir).records(head):
            if record.get("t") == EVENT and record.get("kind") == RECOVERY and (
                    record.get("job") == self.name) and (record.get("data") or {}).get(
                    "restart_count") == pending.get("restart_count"):
                return None
        return pending

    def _adopt(self, saved: dict) -> Optional[float]:
        """Take up the job where the previous agent left it; returns when to restart it
        (a job that was waiting to restart after a failure), else None."""
        now = time.time()
        previous = saved.get("state")
        sup = self.supervisor
        identity = saved.get("process")
        alive_now = sup is not None and sup.found_running
        data = {"ok": True, "attempt": self.attempt, "state": previous, "running": alive_now,
                "pid": sup.pid if sup is not None else None,
                "wrapper_pid": (identity or {}).get("wrapper"),
                "previous_agent_pid": saved.get("agent_pid"),
                "saved_at": saved.get("saved_at"), "restarts": self.policy.restarts}
        if sup is not None and not alive_now:
            sup.wait(5.0)  # its exit is being journaled: let the message say how it ended
            data["returncode"] = sup.returncode
            ended = sup.ended_at
            if ended is not None and sup.pid is not None:
                self._last_alive = {sup.pid: ended}
        standby = previous == STANDBY and sup is None
        what = ("torchrun pid %s and its ranks still run" % data["pid"] if alive_now
                else "its attempt %d ended while no agent watched" % self.attempt
                if sup is not None else "a spare, still in standby" if standby
                else "no process of it was recorded")
        carried = [e["action"] for e in self._carried]
        if carried:
            data["carried_over"] = carried
            what += ("; the %s it had accepted and not carried out is carried out now "
                     "(its own event says how it went)" % " then ".join(carried))
        if self._dropped_ops:
            data["dropped_ops"] = list(self._dropped_ops)
            what += "; %d saved operation(s) unusable, not carried out (%s)" % (
                len(self._dropped_ops), "; ".join(self._dropped_ops))
        self.event(JOB_ADOPTED, "job %s adopted from the previous agent (pid %s): %s"
                   % (self.name, saved.get("agent_pid"), what), data,
                   step=self.progress.cur_max)
        # A stop accepted before: no restart, no launch, whatever state the job was in.
        stopping = ops.STOP in carried
        if previous == BACKOFF:
            self.state = BACKOFF
            return None if stopping else now
        if standby:
            self.state = STANDBY
            self.membership.resume_standby(float(saved.get("standby_since") or now))
            return None
        if sup is None and stopping:
            self.state = STARTING  # nothing of it runs: the stop ends it as it is
            return None
        if sup is None:
            checkpoint, _skipped = self.newest_checkpoint()
            self.launch(checkpoint, reason=launch_reasons.RESUME)
            return None
        if previous == FROZEN and alive_now:
            self.state = FROZEN
            self._freeze_until = saved.get("freeze_until") or now + 60.0
            return None
        if previous == PAUSING and alive_now:
            sup.signal_tree(signal.SIGCONT)  # it may have been held for the pause
            self.event(PAUSE, "job %s: pause failed: the agent restarted while pausing; "
                       "the job keeps running" % self.name,
                       {"mode": "checkpoint", "ok": False,
                         "error": "agent restarted during the pause"})
        self.state = RUNNING  # one that ended meanwhile is handled by the next look
        return None

    # -- records ---------------------------------------------------------------------
    def event(self, kind: str, msg: str, data: dict, step: Optional[int] = None) -> None:
        self.journal.append(EVENT, {"kind": kind, "job": self.name, "rank": None,
                                  "step": step, "msg": msg, "data": data})
        self.log(msg)

    def alert(self, kind: str, severity: str, code: str, what: str, hint: str,
              where: Optional[dict] = None) -> None:
        self.journal.append(ALERT, {"kind": kind, "severity": severity, "code": code,
                                  "job": self.name, "where": dict(where or {}),
                                  "what": what, "hint": hint})

    def interrupted(self, diagnosis: Diagnosis, decision: Decision, detected_at: float,
                    failure_at: float, last_step: Optional[int],
                    returncode: Optional[int] = None, extra: Optional[dict] = None,
                    in_place: bool = False, msg: Optional[str] = None) -> None:
        """Journal an `interruption`: a failure here, a regroup in place
        (agent.job.membership) or a launch that failed all say it in these words, with
        the data `agent.job.recovery.interruption` builds."""
        data = interruption(diagnosis, decision, detected_at, failure_at, self.attempt,
                            returncode, last_step, in_place)
        data.update(extra or {})
        if msg is None:
            outcome = (decision.reason if in_place else "restarting in %.1f s" % decision.delay
                       if decision.retry else "not restarting: %s" % decision.reason)
            msg = "job %s interrupted (%s): %s; %s" % (
                self.name, diagnosis.cause, diagnosis.evidence[0] if diagnosis.evidence
                else "", outcome)
        self.event(INTERRUPTION, msg, data, step=last_step)

    # -- the attempt's workers, as the last look saw them (the job's thread only) ---------
    def watched_pids(self) -> List[int]:
        return list(self._ranks)

    def last_alive(self, pid: int, default: float) -> float:
        return self._last_alive.get(pid, default)

    def forget_workers(self) -> None:
        """The workers watched so far are gone for good: a new group (an elastic regroup)
        or a new attempt follows, whose failure is timed from its own workers."""
        self._ranks, self._ranks_at, self._last_alive = {}, 0.0, {}
        self._vanished_at = None


def _in_group(pid: int, group: int) -> bool:
    """Whether process `pid` is in process group `group` (a job's: torchrun's pid)."""
    try:
        return os.getpgid(pid) == group
    except (OSError, ValueError):
        return False
