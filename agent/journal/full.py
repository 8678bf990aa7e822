"""What the journal does while it cannot write: a full disk, a quota, an I/O error.

The agent must outlive a full disk and tell the cockpit about it, so `Journal` (the only
writer) never lets such an error escape into the threads that feed it (the sampler, the
job's output follower and watcher, control acks). Records it cannot write are held here,
in memory, oldest first, and written, with their seqs given then, as soon as the disk has
room again; nothing is numbered before it is on disk, so seqs stay gap-free and a record
the cockpit has is always the one the journal holds.

Memory is bounded (`HeldRecords.limit` bytes). Past it the oldest held host/GPU samples
and job output lines go first (the next sample supersedes them; the output is still in
the job's log files), then, if events and alerts alone fill it, the oldest of those. What
was dropped is counted by record type and told in a `dropped` event (reason "disk full")
once the journal can write again: the cockpit shows a gap it knows about, never a silent
one. Held records die with the process: a daemon killed while the disk is full loses them.

A small reserve file (`journal/.reserve`) is given back to the filesystem the moment a
write fails, so that the critical `journal_disk_full` alert (where, how much is free, what
to do) still reaches the journal, and hence the cockpit, while the disk is full. When the
held records are written, an `info` alert with the same code and `where` says the fault
is over (the cockpit keeps the newest alert per code and place), and the reserve is made
again.
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict, deque
from pathlib import Path
from typing import Deque, Dict, List, Optional, Tuple

from agent.hostinfo import hostname
from agent.wire.events import DROPPED
from agent.wire.protocol import ALERT, EVENT, GPU, HOST, LOG

HOLD_BYTES = 8 << 20  # records held in memory while the journal cannot write
RETRY_EVERY = 1.0  # s between attempts to write held records
RESERVE_BYTES = 32 << 10  # room for a few dozen alerts when the disk is full
RESERVE_NAME = ".reserve"
# Sampled again within seconds, or kept elsewhere (job output is in its log files): the
# first to go when the held records outgrow their memory.
DROPPABLE = frozenset({GPU, HOST, LOG})
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

Held = Tuple[str, float, bytes]  # (record type, its time, its encoded line)


class JournalFull(OSError):
    """The journal cannot write now and the caller asked not to have its records held:
    none of them was written. Raised only to callers that keep their records elsewhere
    until it can (the spool tailer: the trainer's spool files hold them)."""


class HeldRecords:
    """Records waiting for room on disk, oldest first, within `limit` bytes."""

    def __init__(self, limit: int = HOLD_BYTES) -> None:
        self.limit = int(limit)
        self.bytes = 0
        self._items: "OrderedDict[int, Held]" = OrderedDict()
        self._samples: Deque[int] = deque()  # keys of DROPPABLE records, oldest first
        self._others: Deque[int] = deque()
        self._next = 0
        self.dropped: Dict[str, int] = {}
        self.dropped_first: Optional[float] = None
        self.dropped_last: Optional[float] = None

    def __len__(self) -> int:
        return len(self._items)

    def add(self, t: str, ts: float, line: bytes) -> None:
        key = self._next
        self._next += 1
        self._items[key] = (t, ts, line)
        self.bytes += len(line)
        (self._samples if t in DROPPABLE else self._others).append(key)
        while self.bytes > self.limit and self._items:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        for keys in (self._samples, self._others):
            while keys:
                item = self._items.pop(keys.popleft(), None)
                if item is None:
                    continue  # written already
                t, ts, line = item
                self.bytes -= len(line)
                self.dropped[t] = self.dropped.get(t, 0) + 1
                self.dropped_first = ts if self.dropped_first is None else min(
                    self.dropped_first, ts)
                self.dropped_last = ts if self.dropped_last is None else max(
                    self.dropped_last, ts)
                return

    def items(self) -> List[Held]:
        return list(self._items.values())

    def take(self, count: int) -> None:
        """Forget the `count` oldest records (they were written)."""
        for _ in range(min(count, len(self._items))):
            _key, (_t, _ts, line) = self._items.popitem(last=False)
            self.bytes -= len(line)
        for keys in (self._samples, self._others):
            while keys and keys[0] not in self._items:
                keys.popleft()

    def dropped_count(self) -> int:
        return sum(self.dropped.values())

    def reset_dropped(self) -> None:
        self.dropped, self.dropped_first, self.dropped_last = {}, None, None


def free_bytes(path: Path) -> Optional[int]:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    try:
        st = os.statvfs(str(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def mount_point(path: Path) -> str:
    """The mount point of the filesystem holding `path` (where `df` would look)."""
    try:
        current = Path(os.path.realpath(str(path)))
        dev = os.stat(str(current)).st_dev
        while current.parent != current and os.stat(str(current.parent)).st_dev == dev:
            current = current.parent
        return str(current)
    except OSError:
        return str(path)


def _size(count: int) -> str:
    return "%d MiB" % (count >> 20) if count >= 1 << 20 else "%d KiB" % max(1, count >> 10)


class Reserve:
    """A few KiB of disk held back for the alert that says the disk is full."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = Path(path)
        self.size = int(size)

    def make(self) -> bool:
        """Hold the space (best effort: False when there is no room for it)."""
        if self.size <= 0:
            return False
        try:
            if os.stat(str(self.path)).st_size >= self.size:
                return True
        except OSError:
            pass
        try:
            fd = os.open(str(self.path), os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            try:
                os.posix_fallocate(fd, 0, self.size)
            except (AttributeError, OSError) as exc:
                if getattr(exc, "errno", None) in _FULL_ERRNOS:
                    raise
                os.write(fd, bytes(self.size))  # no fallocate here: real blocks, not a hole
            return True
        except OSError:
            self.release()
            return False
        finally:
            os.close(fd)

    def release(self) -> bool:
        """Give the space back; True when there was some to give."""
        try:
            os.unlink(str(self.path))
            return True
        except OSError:
            return False


class DiskFault:
    """One spell of the journal being unable to write, from its first failed write."""

    def __init__(self, exc: OSError, directory: Path, since: float, hold_limit: int) -> None:
        self.errno = exc.errno
        self.error = exc.strerror or str(exc) or type(exc).__name__
        self.directory = Path(directory)
        self.since = since
        self.hold_limit = hold_limit
        self.free = free_bytes(directory)
        self.mount = mount_point(directory)
        self.host = hostname()
        self.written = 0  # held records written since
        self.reserve_released = False

    @property
    def full(self) -> bool:
        return self.errno in _FULL_ERRNOS

    @property
    def code(self) -> str:
        return "journal_disk_full" if self.full else "journal_write_failed"

    def where(self) -> dict:
        return {"file": str(self.directory)}

    def describe(self) -> str:
        free = "unknown" if self.free is None else "%d bytes" % self.free
        if self.full:
            return "journal disk full on %s (%s, %s free)" % (self.host, self.directory, free)
        return "journal write failed on %s (%s: %s)" % (self.host, self.directory, self.error)

    def alert(self) -> dict:
        what = ("%s: records are held in memory (up to %s) and written when it can write "
                "again" % (self.describe(), _size(self.hold_limit)))
        if self.full:
            hint = ("free space on %s, the filesystem holding %s (`df -h %s`): old "
                    "checkpoints, logs and core files are the usual culprits; or lower the "
                    "agent's --max-journal-bytes so its journal keeps less. Past %s of held "
                    "records the oldest host/GPU samples and job output go first, counted "
                    "in a `dropped` event" % (self.mount, self.directory, self.mount,
                                              _size(self.hold_limit)))
        else:
            hint = ("check the disk holding %s (`dmesg`, `smartctl -a`) and that %s is "
                    "still mounted read-write; the job goes on and is still watched"
                    % (self.directory, self.mount))
        return {"kind": "resource", "severity": "critical", "code": self.code,
                "job": None, "where": self.where(), "what": what, "hint": hint}

    def end_records(self, held: HeldRecords, now: float) -> List[Tuple[str, dict]]:
        """What says the fault is over: the `dropped` event (when records were), then the
        `info` alert that supersedes the critical one."""
        records: List[Tuple[str, dict]] = []
        count = held.dropped_count()
        reason = "disk full" if self.full else "write error"
        if count:
            kinds = ", ".join("%s: %d" % kv for kv in sorted(held.dropped.items()))
            records.append((EVENT, {
                "kind": DROPPED, "job": None, "rank": None, "step": None,
                "msg": "journal %s: dropped %d records made while it could not write "
                       "(%s), over %s of memory" % (reason, count, kinds,
                                                    _size(self.hold_limit)),
                "data": {"count": count, "reason": reason, "first": None, "last": None,
                         "by_type": dict(held.dropped), "since": held.dropped_first,
                         "until": held.dropped_last}}))
        what = "journal on %s (%s) writes again after %.0f s: %d held records written" % (
            self.host, self.directory, max(0.0, now - self.since), self.written)
        if count:
            what += ", %d dropped (see the `dropped` event)" % count
        records.append((ALERT, {
            "kind": "resource", "severity": "info", "code": self.code, "job": None,
            "where": self.where(), "what": what,
            "hint": "nothing to do now; if the disk keeps filling, free space on %s for "
                    "good or lower the agent's --max-journal-bytes" % self.mount}))
        return records
