"""What of a job's output reaches the journal: its lines as `log` records, rate-limited
and cut to `MAX_LOG_LINE`, each naming its rank when torchrun's prefix says it; the
last lines kept whole in memory to classify a failure; and a start-up fault read from a
line (`agent.job.startup_faults`) journaled the moment the line arrives.

`agent.job.supervisor` reads the log files and hands their lines here; the full output
stays in the files, so a chatty job loses nothing by the rate limit but journal room.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Deque, List, Optional

from agent.job.startup_faults import IMPORT_ERROR, StartupFault, StartupWatch
from agent.journal.journal import Journal
from agent.wire.events import STARTUP_FAULT
from agent.wire.protocol import ALERT, EVENT, LOG, MAX_LOG_LINE

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


class JobOutput:
    """The journaling of one attempt's output lines."""

    def __init__(self, job: str, journal: Journal, logs_dir: Path, log_rate: float,
                 log_burst: float) -> None:
        self.job = job
        self.journal = journal
        self.logs_dir = logs_dir
        self.tail: Deque[str] = deque(maxlen=TAIL_LINES)  # for classifying a failure
        self.startup_faults = StartupWatch()  # a stuck start-up, named from its output
        # Held while output is journaled: a stop holds it to journal its note before the
        # job's answer to the signal (`agent.job.supervisor.Supervisor.stop`).
        self.lock = threading.Lock()
        self._bucket = TokenBucket(log_rate, log_burst)
        self._suppressed = 0
        self._suppressed_lock = threading.Lock()

    def emit(self, raws: List[bytes], stream: str) -> None:
        records: List[tuple] = []
        for raw in raws:
            self.tail.append(clip_line(raw))
            fault = self.startup_faults.feed(self.tail[-1])
            if fault is not None:  # before the rate limit: the fault is news however chatty
                records.extend(self._fault_records(fault, stream))
            if not self._bucket.take():
                with self._suppressed_lock:
                    self._suppressed += 1
                continue
            line = clip_line(raw)
            records.extend(self.suppressed_note(stream))
            records.append((LOG, {"job": self.job, "rank": parse_rank(line),
                                    "stream": stream, "line": line}))
        if records:
            with self.lock:
                self.journal.append_many(records)

    def _fault_records(self, fault: StartupFault, stream: str) -> List[tuple]:
        """An alert (what, where, the fix) and an event for a fault read from the job's
        output (`agent.job.startup_faults`), the moment its line arrives: a job stuck in
        its rendezvous would otherwise be named only at the start-up hang limit."""
        what = "job %s: %s" % (self.job, fault.what)
        return [(ALERT, {"kind": "parameter" if fault.code == IMPORT_ERROR else "resource",
                           "severity": "critical", "code": fault.code, "job": self.job,
                           "where": dict(fault.where), "what": what, "hint": fault.fix}),
                (EVENT, {"kind": STARTUP_FAULT, "job": self.job, "rank": fault.where.get(
                    "rank"), "step": None, "msg": what,
                    "data": {"code": fault.code, "where": dict(fault.where), "fix": fault.fix,
                             "stream": stream, "line": fault.line}})]

    def suppressed_note(self, stream: str) -> List[tuple]:
        """A log line saying how many lines the rate limit kept out (none: empty)."""
        with self._suppressed_lock:
            suppressed, self._suppressed = self._suppressed, 0
        if not suppressed:
            return []
        return [(LOG, {
            "job": self.job, "rank": None, "stream": stream,
            "line": "[%d lines not journaled: over the log rate limit; full output in "
                    "%s]" % (suppressed, self.logs_dir)})]
