"""The job on this host: one child command (typically torchrun) in its own process group.

A process group of its own keeps the daemon out of every signal meant for the job. torchrun
starts each rank in a session of its own, though, so signals go to the whole process
tree (torchrun, its ranks and whatever they forked), collected before the first signal so
that ranks orphaned by a dying torchrun are not missed.

The job's output goes, whole, to `RUN_DIR/logs/JOB.out` / `.err` and, rate-limited and
cut to 4 KiB a line, into the journal as `log` records so the cockpit can show the tail
(the last lines are also kept in memory, unthrottled, to classify a failure).
torchrun is asked to prefix its ranks' teed lines with `[rankN]:` (unless the user
chose another template) so each line can name its rank.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from agent.journal import Journal
from agent.samplers.procinfo import RankResolver

MAX_LOG_LINE = 4096
TAIL_LINES = 400
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)?(\d+)\]:")


def parse_rank(line: str) -> Optional[int]:
    """Global rank from a `[rank3]:` / `[3]:` prefix (torchrun tee, c10d), else None."""
    match = _RANK_PREFIX.match(line)
    return int(match.group(1)) if match else None


def clip_line(raw: bytes) -> str:
    """One log line as text: newline stripped, at most 4 KiB of UTF-8."""
    raw = raw.rstrip(b"\r\n")
    if len(raw) > MAX_LOG_LINE:
        raw = raw[:MAX_LOG_LINE]
        return raw.decode("utf-8", "ignore")
    return raw.decode("utf-8", "replace")


class TokenBucket:
    """`rate` lines/s on average, bursts up to `burst`: a chatty job cannot flood the
    journal, and the full output stays in the log files anyway."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
            self._last = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return True
            return False


def _proc_stats(entries: List[str]) -> Iterator[Tuple[int, List[bytes]]]:
    """(pid, fields after the command name) of every readable /proc/PID/stat."""
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        yield int(name), stat[stat.rfind(b")") + 2 :].split()


def group_pids(pgid: int) -> List[int]:
    """Pids whose process group is `pgid` (Linux /proc; psutil elsewhere)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            import psutil

            return [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
        except ImportError:
            return [pgid]
    return sorted(pid for pid, fields in _proc_stats(entries)
                  if len(fields) > 2 and int(fields[2]) == pgid)


def _parents() -> Dict[int, List[int]]:
    children: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for pid, fields in _proc_stats(entries):
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(pid)
    return children


def descendants(pid: int) -> List[int]:
    """Every live descendant of `pid` (Linux /proc), children before grandchildren."""
    children = _parents()
    found: List[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def children_of(pid: int) -> List[int]:
    """Direct children of `pid`. The kernel's per-thread `children` lists answer without
    walking all of /proc (the watcher asks every second); the walk is the fallback."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        tasks = []
    found = set()
    try:
        for tid in tasks:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:  # no CONFIG_PROC_CHILDREN, or the process is gone: walk /proc
        return sorted(_parents().get(pid, []))
    if not tasks:
        return sorted(_parents().get(pid, []))
    return sorted(found)


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie (a zombie is dead, only not yet reaped)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Supervisor:
    """Starts, watches and stops one job command; journals its life and output."""

    def __init__(self, cmd: Sequence[str], job: str, run_dir: Path, journal: Journal,
                 env: Optional[Mapping[str, str]] = None, log_rate: float = 200.0,
                 log_burst: float = 2000.0,
                 on_exit: Optional[Callable[[int], None]] = None,
                 cwd: Optional[Path] = None, started_data: Optional[dict] = None) -> None:
        if not cmd:
            raise ValueError("no job command given")
        self.cmd = list(cmd)
        self.job = job
        self.run_dir = Path(run_dir)
        self.journal = journal
        self.extra_env = dict(env or {})
        self.on_exit = on_exit
        self.cwd = cwd
        self.started_data = dict(started_data or {})
        self.tail: Deque[str] = deque(maxlen=TAIL_LINES)  # for classifying a failure
        self.logs_dir = self.run_dir / "logs"
        self._bucket = TokenBucket(log_rate, log_burst)
        self._suppressed = 0
        self._suppressed_lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._readers: List[threading.Thread] = []
        self._waiter: Optional[threading.Thread] = None
        self._exited = threading.Event()
        self._ranks = RankResolver()
        self.returncode: Optional[int] = None
        self.started_at: Optional[float] = None

    # -- life ------------------------------------------------------------------------
    def environment(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["COCKPIT_RUN_DIR"] = str(self.run_dir)
        env["COCKPIT_JOB"] = self.job
        env["TORCHELASTIC_ERROR_FILE"] = str(self.logs_dir / ("%s.error.json" % self.job))
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]:")
        return env

    def start(self) -> int:
        """Launch the command; returns its pid (also the job's process group id)."""
        if self._proc is not None:
            raise RuntimeError("job %r was already started" % self.job)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        # Owned by the output pump threads, which close them when the pipes end.
        out = open(str(self.logs_dir / ("%s.out" % self.job)), "ab")  # noqa: SIM115
        err = open(str(self.logs_dir / ("%s.err" % self.job)), "ab")  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=self.environment(),
                cwd=str(self.cwd) if self.cwd is not None else os.getcwd(),
                start_new_session=True)
        except OSError as exc:
            out.close()
            err.close()
            raise RuntimeError("cannot start %r: %s" % (self.cmd[0], exc.strerror or exc)
                               ) from exc
        self.started_at = time.time()
        self.journal.append("event", {
            "kind": "job_started", "job": self.job, "rank": None, "step": None,
            "msg": "job %s started (pid %d): %s" % (self.job, self._proc.pid,
                                                     " ".join(self.cmd)),
            "data": dict(self.started_data, pid=self._proc.pid, cmd=self.cmd,
                         run_dir=str(self.run_dir)),
        })
        for pipe, sink, name in ((self._proc.stdout, out, "stdout"),
                                 (self._proc.stderr, err, "stderr")):
            reader = threading.Thread(target=self._pump, args=(pipe, sink, name),
                                      name="job-%s" % name, daemon=True)
            reader.start()
            self._readers.append(reader)
        self._waiter = threading.Thread(target=self._wait, name="job-wait", daemon=True)
        self._waiter.start()
        return self._proc.pid

    @property
    def pid(self) -> Optional[int]:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and not self._exited.is_set()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """The return code once the job has exited and its exit is journaled."""
        self._exited.wait(timeout)
        return self.returncode

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM to the whole tree, SIGKILL after `grace` seconds; returns the code."""
        if self._proc is None:
            return None
        tree = self.tree_pids()
        if not self._exited.is_set():
            self.signal_tree(signal.SIGCONT, tree)  # a frozen job cannot act on SIGTERM
            self.signal_tree(signal.SIGTERM, tree)
            if not self._exited.wait(grace):
                self.signal_tree(signal.SIGKILL, tree + self.tree_pids())
                self._exited.wait(grace + 5.0)
        # Stragglers that outlived the leader (ranks live in sessions of their own).
        self.signal_tree(signal.SIGKILL, [p for p in tree if alive(p)])
        return self.returncode

    def tree_pids(self) -> List[int]:
        """torchrun and every live process below it, plus the rest of its group."""
        if self._proc is None:
            return []
        pids = [self._proc.pid, *descendants(self._proc.pid)]
        for pid in group_pids(self._proc.pid):
            if pid not in pids:
                pids.append(pid)
        return pids

    def rank_pids(self) -> Dict[int, Optional[int]]:
        """The worker processes torchrun started (its children) -> their global rank."""
        if self._proc is None or self._exited.is_set():
            return {}
        return {pid: self._ranks(pid) for pid in children_of(self._proc.pid)}

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
        if not self.running or self._proc is None:
            return {}
        return {pid: self._ranks(pid) for pid in group_pids(self._proc.pid)}

    # -- output and exit -------------------------------------------------------------
    def _pump(self, pipe: IO[bytes], sink: IO[bytes], stream: str) -> None:
        with sink:
            for raw in iter(lambda: pipe.readline(65536), b""):
                sink.write(raw)
                if raw.endswith(b"\n"):
                    sink.flush()
                self.tail.append(clip_line(raw))
                self._log(raw, stream)
            sink.flush()

    def _log(self, raw: bytes, stream: str) -> None:
        if not self._bucket.take():
            with self._suppressed_lock:
                self._suppressed += 1
            return
        line = clip_line(raw)
        records = self._suppressed_note(stream)
        records.append(("log", {"job": self.job, "rank": parse_rank(line), "stream": stream,
                                "line": line}))
        self.journal.append_many(records)

    def _suppressed_note(self, stream: str) -> List[tuple]:
        """A log line saying how many lines the rate limit kept out (none: empty)."""
        with self._suppressed_lock:
            suppressed, self._suppressed = self._suppressed, 0
        if not suppressed:
            return []
        return [("log", {
            "job": self.job, "rank": None, "stream": stream,
            "line": "[%d lines not journaled: over the log rate limit; full output in "
                    "%s]" % (suppressed, self.logs_dir)})]

    def _wait(self) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        for reader in self._readers:
            reader.join(timeout=5.0)
        self.returncode = code
        note = self._suppressed_note("stdout")
        if note:
            self.journal.append_many(note)
        how = "exited with code %d" % code if code >= 0 else "was killed by signal %d" % -code
        self.journal.append("event", {
            "kind": "job_exited", "job": self.job, "rank": None, "step": None,
            "msg": "job %s %s" % (self.job, how),
            "data": {"returncode": code, "pid": self._proc.pid,
                     "seconds": None if self.started_at is None
                     else round(time.time() - self.started_at, 3)},
        })
        self._exited.set()
        if self.on_exit is not None:
            self.on_exit(code)
