"""The job on this host: one command (typically torchrun) in a session of its own.

A session of its own keeps the daemon out of every signal meant for the job. torchrun
starts each rank in a session of its own, though, so signals go to the whole process
tree (torchrun, its ranks and whatever they forked), collected from /proc
(`agent.job.proctree`) before the first signal so that ranks orphaned by a dying
torchrun are not missed.

The job must outlive the agent: a `kill -9` of the daemon (or a crash, or an upgrade)
must neither end the job nor leave a restarted daemon blind to it. So the command is
started by a small wrapper (`agent.job.jobwrap`) that stays its parent and writes its pid,
start time and, at the end, its exit status to a status file; and the job writes its
output straight into `RUN_DIR/logs/JOB.out` / `.err`, which the agent tails. Nothing
runs through a pipe the agent holds. `identity()` is what a restarted daemon needs to
re-attach (`Supervisor.adopt`): the pids guarded by their start times against pid reuse,
the boot, the status file and how far the logs were read.

The tailed output goes, rate-limited and cut to 4 KiB a line, into the journal as `log`
records (`agent.job.output`) so the cockpit can show the tail (the last lines are also
kept in memory, unthrottled, to classify a failure). torchrun is asked to prefix its
ranks' teed lines with `[rankN]:` (unless the user chose another template) so each line
can name its rank.

Over 500 lines because one attempt's life stays in one module: its start or adoption,
signals, exit status, and the follower that tails its output, which share the launch's
identity and the offsets an adopting agent resumes from.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from agent.hostinfo import boot_id
from agent.job import jobwrap
from agent.job.output import JobOutput
from agent.job.proctree import alive, children_of, descendants, group_pids
from agent.job.startup_faults import StartupWatch
from agent.journal.journal import Journal
from agent.samplers.procinfo import RankResolver
from agent.wire import atomic, launch_reasons, paths
from agent.wire.events import JOB_EXITED, JOB_STARTED
from agent.wire.protocol import EVENT, LOG

READ_LINE = 65536  # a longer line without a newline is journaled in pieces of this size
FOLLOW_POLL = 0.5  # s between looks at the log files when nothing new came
READ_RETRY = 0.5  # s before a log file whose read failed is opened and read again
END_READ_TRIES = 3  # tries at reading the logs to their end after the exit, when one fails
EXIT_POLL = 0.05  # s between looks at an adopted job's wrapper
OUTPUT_HOLD = 1.0  # s a stop waits for a journal write of output before signalling anyway
STREAMS = ("stdout", "stderr")
# Run the wrapper from wherever this package was imported (a checkout or agent.pyz);
# -I: the job's PYTHON* environment is for the job, not for the wrapper.
_WRAPPER = ("import sys; sys.path.insert(0, sys.argv[1]); from agent.job.jobwrap import main; "
            "sys.exit(main(sys.argv[2:]))")
# Why the agent ends an attempt itself, as its job_exited says it.
ENDED_FOR = {launch_reasons.FOR_PAUSE: "for a pause",
             launch_reasons.FOR_STOP: "on a stop request",
             launch_reasons.FOR_RELAUNCH: "for a relaunch",
             launch_reasons.FOR_SCALE: "as this host left the job",
             launch_reasons.FOR_SHUTDOWN: "as the agent shut down",
             launch_reasons.FOR_PEER: "as another host of the job gave up"}


class Supervisor:
    """Starts (or adopts), watches and stops one job command; journals its life and
    output."""

    def __init__(self, cmd: Sequence[str], job: str, run_dir: Path, journal: Journal,
                 env: Optional[Mapping[str, str]] = None, log_rate: float = 200.0,
                 log_burst: float = 2000.0,
                 on_exit: Optional[Callable[[Optional[int]], None]] = None,
                 cwd: Optional[Path] = None, started_data: Optional[dict] = None) -> None:
        if not cmd:
            raise ValueError("no job command given")
        self.cmd = list(cmd)
        self.job = job
        self.run_dir = Path(run_dir).absolute()
        self.journal = journal
        self.extra_env = dict(env or {})
        self.on_exit = on_exit
        self.cwd = cwd
        self.started_data = dict(started_data or {})
        self.logs_dir = paths.logs_dir(self.run_dir)
        self.output = JobOutput(job, journal, self.logs_dir, log_rate, log_burst)
        self.tail: Deque[str] = self.output.tail  # for classifying a failure
        self.startup_faults: StartupWatch = self.output.startup_faults
        self.status_path = paths.status_file(self.run_dir, job)
        # How far into each log file the journal has the output, rewritten after every
        # journaled batch: an agent that adopts the job resumes exactly there, so no line
        # is journaled twice (the saved job state is up to a second older).
        self.journaled_path = paths.journaled_file(self.run_dir, job)
        self.launch_id = secrets.token_hex(8)
        self.adopted = False
        self._wrapper: Optional[subprocess.Popen] = None  # set when this agent started it
        self._wrapper_pid: Optional[int] = None
        self._wrapper_start: Optional[int] = None
        self._pid: Optional[int] = None
        self._pid_start: Optional[int] = None
        self._boot: Optional[str] = None
        self._rebooted = False  # adopted from before a reboot: every pid is stale
        self._offsets: Dict[str, int] = {}
        self._follower: Optional[threading.Thread] = None
        self._read_errors: Set[str] = set()  # the follower's failures, said once each
        self._waiter: Optional[threading.Thread] = None
        self._ended = threading.Event()  # the exit status is known: read the logs to EOF
        self._exited = threading.Event()
        self._ranks = RankResolver()
        self.returncode: Optional[int] = None
        # Why the agent is ending this attempt (one of agent.wire.launch_reasons.ENDED_FOR),
        # for its job_exited: such an exit is asked for, whatever its status says.
        self.ended_for: Optional[str] = None
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None  # as the wrapper saw it (None: unknown)
        self.found_running = False  # adopted: the job was still running when found

    # -- life ------------------------------------------------------------------------
    def environment(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["COCKPIT_RUN_DIR"] = str(self.run_dir)
        env["COCKPIT_JOB"] = self.job
        env["TORCHELASTIC_ERROR_FILE"] = str(paths.error_file(self.run_dir, self.job))
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]:")
        return env

    def _log_paths(self) -> Dict[str, Path]:
        return {"stdout": paths.stdout_log(self.run_dir, self.job),
                "stderr": paths.stderr_log(self.run_dir, self.job)}

    def start(self) -> int:
        """Launch the command through the wrapper; returns its pid (also the job's
        process group id)."""
        if self._wrapper is not None or self._pid is not None:
            raise RuntimeError("job %r was already started" % self.job)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        paths = self._log_paths()
        for stream, path in paths.items():
            with open(str(path), "ab") as f:  # the job appends from here on
                self._offsets[stream] = f.tell()
        try:
            self.status_path.unlink()
        except FileNotFoundError:
            pass
        # the directory that holds the `agent` package (jobwrap is agent/job/jobwrap.py)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(jobwrap.__file__))))
        cwd = os.path.abspath(str(self.cwd) if self.cwd is not None else os.getcwd())
        argv = [sys.executable or "python3", "-I", "-c", _WRAPPER, root,
                str(self.status_path), str(paths["stdout"]), str(paths["stderr"]), cwd,
                self.launch_id, "--", *self.cmd]
        try:
            with open(str(paths["stderr"]), "ab") as err:  # the wrapper's own complaints
                self._wrapper = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    cwd="/", start_new_session=True)
        except OSError as exc:
            raise RuntimeError("cannot start the job wrapper %r: %s" % (
                argv[0], exc.strerror or exc)) from exc
        assert self._wrapper.stdin is not None and self._wrapper.stdout is not None
        try:
            with self._wrapper.stdin:
                self._wrapper.stdin.write(json.dumps(self.environment()).encode("utf-8"))
        except OSError:  # the wrapper died at once: its stdout (empty) says so below
            pass
        with self._wrapper.stdout:
            line = self._wrapper.stdout.readline()
        try:
            report = json.loads(line) if line else {}
        except ValueError:
            report = {}
        if not isinstance(report.get("pid"), int):
            code = self._wrapper.wait()
            raise RuntimeError(report.get("error") or "the job wrapper exited (code %s) "
                               "before starting %r; see %s" % (code, self.cmd[0],
                                                               paths["stderr"]))
        self._pid, self._pid_start = report["pid"], report.get("pid_start")
        self._wrapper_pid, self._wrapper_start = self._wrapper.pid, report.get("wrapper_start")
        self._boot = boot_id()
        self.started_at = time.time()
        self.journal.append(EVENT, {
            "kind": JOB_STARTED, "job": self.job, "rank": None, "step": None,
            "msg": "job %s started (pid %d): %s" % (self.job, self._pid, " ".join(self.cmd)),
            "data": dict(self.started_data, pid=self._pid, cmd=self.cmd,
                         run_dir=str(self.run_dir)),
        })
        self._start_threads()
        return self._pid

    @classmethod
    def adopt(cls, identity: Mapping[str, Any], journal: Journal,
              on_exit: Optional[Callable[[Optional[int]], None]] = None,
              log_rate: float = 200.0, log_burst: float = 2000.0) -> "Supervisor":
        """Re-attach to a job a previous agent started, as its `identity()` described it.

        Whether the job still runs is decided here (the same boot, the wrapper or the
        command alive with the start time recorded); one that ended meanwhile is
        reported as exited, with the status its wrapper wrote, or None when nobody could
        write it (a reboot, a killed wrapper)."""
        sup = cls(list(identity.get("cmd") or ["?"]), str(identity["job"]),
                  Path(str(identity["run_dir"])), journal, log_rate=log_rate,
                  log_burst=log_burst, on_exit=on_exit)
        sup.adopted = True
        sup.launch_id = str(identity.get("launch") or "")
        # Saved before the start, the identity may lack what the wrapper wrote down.
        known = dict(sup._status())
        known.update({k: v for k, v in identity.items() if v is not None})
        sup._pid, sup._pid_start = known.get("pid"), known.get("pid_start")
        sup._wrapper_pid, sup._wrapper_start = known.get("wrapper"), known.get("wrapper_start")
        sup._boot = known.get("boot_id")
        sup._rebooted = sup._boot is not None and sup._boot != boot_id()
        sup.started_at = known.get("started_at")
        offsets = identity.get("offsets") or {}
        for stream, path in sup._log_paths().items():
            offset = offsets.get(stream)
            if not isinstance(offset, int):
                try:
                    offset = path.stat().st_size
                except OSError:
                    offset = 0
            sup._offsets[stream] = offset
        sup._offsets.update(sup._journaled_offsets())
        sup.found_running = (sup._same_process(sup._wrapper_pid, sup._wrapper_start)
                             or sup._same_process(sup._pid, sup._pid_start))
        sup._start_threads()
        return sup

    def identity(self) -> Dict[str, Any]:
        """What a restarted agent needs to find this job again (JSON-serialisable)."""
        return {"launch": self.launch_id, "job": self.job, "cmd": self.cmd,
                "run_dir": str(self.run_dir), "status": str(self.status_path),
                "pid": self._pid, "pid_start": self._pid_start,
                "wrapper": self._wrapper_pid, "wrapper_start": self._wrapper_start,
                "boot_id": self._boot if self._pid is not None else boot_id(),
                "started_at": self.started_at, "offsets": dict(self._offsets)}

    def _start_threads(self) -> None:
        self._follower = threading.Thread(target=self._follow, name="job-output",
                                          daemon=True)
        self._follower.start()
        self._waiter = threading.Thread(target=self._wait, name="job-wait", daemon=True)
        self._waiter.start()

    @property
    def pid(self) -> Optional[int]:
        return self._pid

    @property
    def running(self) -> bool:
        return self._pid is not None and not self._exited.is_set()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """The return code once the job has exited and its exit is journaled (None also
        when its exit status could not be learnt: check `running`)."""
        self._exited.wait(timeout)
        return self.returncode

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM to the whole tree, SIGKILL after `grace` seconds; returns the code."""
        if self._pid is None:
            return None
        tree = self.tree_pids()
        if not self._exited.is_set():
            # Signals first: nothing the agent fails to write (a full disk, a hung one)
            # may keep a stop from ending the job. Output journaled meanwhile waits (for
            # a while) so that the note below precedes the job's answer to the signal.
            held = self.output.lock.acquire(timeout=OUTPUT_HOLD)
            try:
                self.signal_tree(signal.SIGCONT, tree)  # a frozen job cannot act on SIGTERM
                self.signal_tree(signal.SIGTERM, tree)
                self._note_deliberate_stop()
            finally:
                if held:
                    self.output.lock.release()
            if not self._exited.wait(grace):
                self.signal_tree(signal.SIGKILL, tree + self.tree_pids())
                self._exited.wait(grace + 5.0)
        # Stragglers that outlived the leader (ranks live in sessions of their own).
        self.signal_tree(signal.SIGKILL, [p for p in tree if alive(p)])
        return self.returncode

    def _note_deliberate_stop(self) -> None:
        """A line in the journaled log right after the agent's SIGTERM, when the stop was
        asked for (pause, stop, relaunch): torchrun answers it with a SignalException
        traceback and each rank may print its own, which read as a crash unless the log
        says what came first. It is journaled before that output, which reaches the
        journal only through the log files the follower reads. Best effort: the stop
        goes on whatever happens to this line. The output itself is kept as it is."""
        if not self.ended_for:
            return
        try:
            self.journal.append_many([(LOG, {
                "job": self.job, "rank": None, "stream": "stderr",
                "line": "[cockpit-agent] stopping the job %s: SIGTERM sent to its processes; "
                        "the shutdown output that follows (torchrun's SignalException "
                        "traceback) is expected, not a failure" % ENDED_FOR.get(
                            self.ended_for, self.ended_for)})])
        except Exception as exc:  # the signals were sent: a note is no reason to fail
            print("cockpit-agent: job %s: could not journal the stop note: %s: %s"
                  % (self.job, type(exc).__name__, exc), file=sys.stderr)

    def _same_process(self, pid: Optional[int], ticks: Optional[int]) -> bool:
        """`pid` is still the process recorded (not a reused pid, not a zombie)."""
        if pid is None or self._rebooted or not alive(pid):
            return False
        return ticks is None or jobwrap.start_ticks(pid) == ticks

    def tree_pids(self) -> List[int]:
        """The command and every live process below it, plus the rest of its group."""
        pid = self._pid
        if pid is None or self._rebooted or (
                self._pid_start is not None and jobwrap.start_ticks(pid) != self._pid_start):
            return []  # gone, and the pid may now be someone else's
        pids = [pid, *descendants(pid)]
        for other in group_pids(pid):
            if other not in pids:
                pids.append(other)
        return pids

    def rank_pids(self) -> Dict[int, Optional[int]]:
        """The worker processes torchrun started (its children) -> their global rank."""
        if self._pid is None or self._exited.is_set():
            return {}
        return {pid: self._ranks(pid) for pid in children_of(self._pid)}

    def signal_tree(self, sig: int, pids: Optional[List[int]] = None) -> None:
        """`sig` to every process of the job (the tree as it is now, unless given)."""
        for pid in self.tree_pids() if pids is None else pids:
            self._kill(pid, sig)

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    # -- what the samplers need -------------------------------------------------------
    def pid_ranks(self) -> Dict[int, Optional[int]]:
        """Every live process of the job -> its global rank (None: torchrun itself)."""
        if not self.running or self._pid is None:
            return {}
        return {pid: self._ranks(pid) for pid in group_pids(self._pid)}

    # -- output ----------------------------------------------------------------------
    def _follow(self) -> None:
        """Tail the log files into the journal until the job has ended and they are
        read to the end. A read that fails (EIO or ESTALE from a network mount), or
        anything else that goes wrong in a round, is said once and tried again after
        READ_RETRY, the file opened anew: the job's output keeps reaching the journal."""
        files: Dict[str, Any] = {}
        partial = {stream: b"" for stream in STREAMS}
        end_tries = 0
        try:
            while True:
                final = self._ended.is_set()
                got, failed = self._follow_round(files, partial, final)
                if final and (not failed or end_tries >= END_READ_TRIES):
                    break
                if failed and final:
                    end_tries += 1
                    time.sleep(READ_RETRY)
                elif failed or not got:
                    self._ended.wait(READ_RETRY if failed else FOLLOW_POLL)
        finally:
            for f in files.values():
                _close_quietly(f)
        for stream in STREAMS:
            if partial[stream]:
                self.output.emit([partial[stream]], stream)
                self._offsets[stream] += len(partial[stream])
        self._note_journaled()

    def _follow_round(self, files: Dict[str, Any], partial: Dict[str, bytes],
                      to_end: bool) -> Tuple[bool, bool]:
        """One look at each log file: (whether anything new was read, whether a read
        failed). A file whose read failed is closed, to be opened anew next round and
        read from where the journal has it."""
        got = failed = False
        for stream, path in self._log_paths().items():
            try:
                got = self._read_new(stream, path, files, partial, to_end) or got
            except Exception as exc:  # one stream's trouble: said once, then tried again
                failed = True
                f = files.pop(stream, None)
                if f is not None:
                    _close_quietly(f)
                self._note_read_error(stream, path, exc)
        return got, failed

    def _note_read_error(self, stream: str, path: Path, exc: Exception) -> None:
        text = "cockpit-agent: job %s: reading its %s (%s) failed: %s: %s; opened again " \
               "and read on (said once)" % (self.job, stream, path, type(exc).__name__, exc)
        if text not in self._read_errors and len(self._read_errors) < 100:
            self._read_errors.add(text)
            print(text, file=sys.stderr)

    def _read_new(self, stream: str, path: Path, files: Dict[str, Any],
                  partial: Dict[str, bytes], to_end: bool) -> bool:
        """Journal what is new in one log file; an OSError other than a missing file
        is the caller's (`_follow_round`): the file is then opened anew."""
        f = files.get(stream)
        if f is None:
            try:
                f = open(str(path), "rb", buffering=0)  # noqa: SIM115
            except OSError:
                return False
            files[stream] = f
            f.seek(self._offsets[stream] + len(partial[stream]))
        if os.fstat(f.fileno()).st_size < f.tell():  # truncated under us (logrotate)
            f.seek(0)
            partial[stream], self._offsets[stream] = b"", 0
        got = False
        while True:
            data = f.read(1 << 20)
            if not data:
                return got
            got = True
            data = partial[stream] + data
            lines = data.split(b"\n")
            rest = lines.pop()
            raws = [line + b"\n" for line in lines]
            while len(rest) >= READ_LINE:
                raws.append(rest[:READ_LINE])
                rest = rest[READ_LINE:]
            self.output.emit(raws, stream)
            # Only once journaled: a failure before leaves the file to be read again there.
            partial[stream] = rest
            self._offsets[stream] += sum(len(raw) for raw in raws)
            self._note_journaled()
            if not to_end:
                return got

    def _note_journaled(self) -> None:
        try:  # after every journaled batch: durable enough without an fsync each time
            atomic.write_text(self.journaled_path, json.dumps(
                {"launch": self.launch_id, "offsets": self._offsets}), durable=False)
        except OSError:
            pass  # the saved job state still holds offsets at most a second old

    def _journaled_offsets(self) -> Dict[str, int]:
        """The offsets `_note_journaled` wrote for this launch (none: empty)."""
        try:
            noted = json.loads(self.journaled_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(noted, dict) or noted.get("launch") != self.launch_id:
            return {}
        offsets = noted.get("offsets")
        if not isinstance(offsets, dict):
            return {}
        return {stream: value for stream, value in offsets.items()
                if stream in STREAMS and isinstance(value, int) and value >= 0}

    # -- exit ------------------------------------------------------------------------
    def _status(self) -> dict:
        """The wrapper's status file, when it is this launch's."""
        try:
            status = json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(status, dict) or status.get("launch") != self.launch_id:
            return {}
        return status

    def _wait(self) -> None:
        if self._wrapper is not None:
            self._wrapper.wait()
        else:
            while self._same_process(self._wrapper_pid, self._wrapper_start):
                time.sleep(EXIT_POLL)
        status = self._status()
        code = status.get("returncode")
        ended = status.get("ended_at")
        self.ended_at = float(ended) if isinstance(ended, (int, float)) else None
        how = None
        if not isinstance(code, int):
            # The wrapper could not say (it was killed, or the host rebooted): watch the
            # command itself; its exit status is then lost.
            code = None
            while self._same_process(self._pid, self._pid_start):
                time.sleep(EXIT_POLL)
            how = "ended; its exit status is unknown (its wrapper %s did not record it)" % (
                self._wrapper_pid)
        self._ended.set()
        if self._follower is not None:
            self._follower.join(timeout=5.0)
        self.returncode = code
        try:
            self._journal_exit(code, how)
        except Exception as exc:  # whoever waits must learn of the exit
            print("cockpit-agent: job %s: could not journal its exit: %s: %s"
                  % (self.job, type(exc).__name__, exc), file=sys.stderr)
        self._exited.set()
        if self.on_exit is not None:
            self.on_exit(code)

    def _journal_exit(self, code: Optional[int], how: Optional[str]) -> None:
        """The exit, as the journal tells it (the caller sets `_exited` whatever happens
        here: a job whose exit cannot be written is still one that ended)."""
        note = self.output.suppressed_note("stdout")
        if note:
            self.journal.append_many(note)
        if how is None:
            assert code is not None
            how = ("exited with code %d" % code if code >= 0
                   else "was killed by signal %d" % -code)
        data: Dict[str, Any] = {"returncode": code, "pid": self._pid,
                "seconds": None if self.started_at is None
                else round(time.time() - self.started_at, 3)}
        if self.ended_for:
            how += " (ended by the agent %s)" % ENDED_FOR.get(self.ended_for, self.ended_for)
            data["ended_for"] = self.ended_for
        self.journal.append(EVENT, {
            "kind": JOB_EXITED, "job": self.job, "rank": None, "step": None,
            "msg": "job %s %s" % (self.job, how), "data": data,
        })


def _close_quietly(f: Any) -> None:
    """Close a log file the follower read; a failure to (a stale handle) changes nothing."""
    try:
        f.close()
    except OSError:
        pass
