"""Host-local, seq-numbered, append-only journal of wire records.

The journal is what makes "nothing lost, nothing twice" possible: every record the agent
produces is written here once, with the next `seq`, before any cockpit sees it, and a
cockpit that reconnects is served from here by seq. It lives in `STATE_DIR/journal/` as
segment files named after the first seq they hold (`00000000000000000001.ndjson`), each
line a finished wire line (`agent.wire.protocol.encode`), so a stream can copy segment bytes
to its stdout without re-encoding them.

Only one process writes (the daemon, guarded by its lock file); any number of
`stream` processes read concurrently. Readers only ever consume whole lines, so a batch
half-written by a daemon that was killed is never sent: on the next open the writer
cuts such a torn tail off and continues from the last whole record.

A write that fails (disk full, I/O error) never leaves a torn line either: the writer
cuts what reached the file back to its last whole line at once, keeps the whole lines
that made it, and holds the rest in memory until the disk has room (`agent.journal.full`
says how, and what the cockpit is told meanwhile). The error never reaches the threads
that journal, so none of them dies of a full disk. Over 500 lines because writing,
retention and reading share the segment format and its invariants.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from agent.journal.full import (
    HOLD_BYTES,
    RESERVE_BYTES,
    RESERVE_NAME,
    RETRY_EVERY,
    DiskFault,
    HeldRecords,
    JournalFull,
    Reserve,
    free_bytes,
)
from agent.wire import atomic
from agent.wire.events import DROPPED
from agent.wire.protocol import ALERT, EVENT, encode

SEGMENT_SUFFIX = ".ndjson"
DEFAULT_MAX_BYTES = 2 << 30
DEFAULT_MAX_AGE = 14 * 86400.0
DEFAULT_SEGMENT_BYTES = 64 << 20
_READ_BLOCK = 4 << 20

# Every journaled line starts with `{"t":"TYPE","seq":N` (protocol: t first, seq second).
_SEQ_PREFIX = re.compile(rb'\{"t":"[^"\\]*","seq":(\d+)[,}]')


class JournalError(Exception):
    """The journal directory cannot be used (unreadable, foreign files, bad id)."""


class JournalReplaced(Exception):
    """The journal a reader follows was replaced by another: its state dir was wiped and a
    new journal begun, whose seqs start again at 1 and whose segment files may reuse the
    old ones' names. Nothing read by the old offsets may be sent as the old journal's."""

    def __init__(self, old_id: str, new_id: str) -> None:
        super().__init__("journal %s was replaced by journal %s" % (old_id, new_id))
        self.old_id = old_id
        self.new_id = new_id


class _FileReplaced(Exception):
    """The segment path now names another file than the one being read."""


def _stamp(path: Path) -> Optional[Tuple[int, int, int]]:
    """What tells one version of a small file from another: device, inode and mtime."""
    try:
        st = os.stat(str(path))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _inode(path: Path) -> Optional[int]:
    try:
        return os.stat(str(path)).st_ino
    except FileNotFoundError:
        return None


def journal_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "journal"


def segment_name(first_seq: int) -> str:
    return "%020d%s" % (first_seq, SEGMENT_SUFFIX)


def list_segments(directory: Path) -> List[Tuple[int, Path]]:
    """(first seq, path) of every segment, oldest first."""
    found = []
    try:
        entries = list(os.scandir(str(directory)))
    except FileNotFoundError:
        return []
    for entry in entries:
        name = entry.name
        if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit():
            found.append((int(name[: -len(SEGMENT_SUFFIX)]), Path(entry.path)))
    found.sort()
    return found


def line_seq(line: bytes) -> Optional[int]:
    """The seq of one journaled line, read from its fixed prefix without parsing it."""
    match = _SEQ_PREFIX.match(line)
    return int(match.group(1)) if match else None


def _renumber(line: bytes, seq: int) -> bytes:
    """An encoded line with its seq replaced (a held record gets its seq when written).
    The first `"seq":` is the key: a quote inside the `t` before it is escaped."""
    start = line.index(b'"seq":') + 6
    end = start
    while line[end : end + 1].isdigit():
        end += 1
    return line[:start] + b"%d" % seq + line[end:]


def ensure_journal_id(state_dir: Path) -> str:
    """The journal's random id, created once; racing creators agree on one value."""
    state_dir = Path(state_dir)
    atomic.private_dir(state_dir)
    path = state_dir / "journal_id"
    for _ in range(3):
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            text = ""
        if text:
            if not re.fullmatch(r"[0-9a-f]{8,64}", text):
                raise JournalError("%s does not hold a journal id (found %r)" % (path, text[:40]))
            return text
        tmp = state_dir / (".journal_id.%d.tmp" % os.getpid())
        tmp.write_text(secrets.token_hex(8) + "\n", encoding="ascii")
        try:
            os.link(str(tmp), str(path))  # atomic create-if-absent
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    raise JournalError("could not create %s" % path)


def _last_valid_line_end(path: Path, size: int) -> Tuple[int, Optional[int]]:
    """(byte length to keep, seq of the last kept line) for a segment that may be torn.

    A line counts as whole when it ends in a newline and parses as a record with an
    integer seq; anything after the last whole line is a torn write.
    """
    with open(str(path), "rb") as f:
        end = size
        block = 1 << 16
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            data = f.read(end - start)
            nl = data.rfind(b"\n")
            if nl < 0 and start > 0:
                block *= 2
                continue
            if nl < 0:
                return 0, None
            # data[:nl] ends with the candidate line; find where it begins.
            prev = data.rfind(b"\n", 0, nl)
            if prev < 0 and start > 0:
                block *= 2
                continue
            line = data[prev + 1 : nl]
            seq = line_seq(line)
            if seq is not None:
                try:
                    ok = isinstance(json.loads(line), dict)
                except ValueError:
                    ok = False
                if ok:
                    return start + nl + 1, seq
            end = start + prev + 1
        return 0, None


class Journal:
    """The single writer. Thread-safe: samplers, spool tailer and output readers share it.

    `max_bytes` and `max_age` (seconds) cap the whole journal; whole segments are
    dropped oldest first and the loss is journaled as an `event` of kind `dropped`.
    While it cannot write, up to `hold_bytes` of records wait in memory and a write is
    tried again at most every `retry_every` seconds (`agent.journal.full`); `log` hears
    when such a spell begins and ends.
    """

    def __init__(
        self,
        state_dir: Path,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age: float = DEFAULT_MAX_AGE,
        segment_bytes: Optional[int] = None,
        clock: Callable[[], float] = time.time,
        hold_bytes: int = HOLD_BYTES,
        retry_every: float = RETRY_EVERY,
        reserve_bytes: int = RESERVE_BYTES,
        log: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.dir = journal_dir(self.state_dir)
        atomic.private_dir(self.state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.journal_id = ensure_journal_id(self.state_dir)
        self.max_bytes = int(max_bytes)
        self.max_age = float(max_age)
        if segment_bytes is None:
            segment_bytes = min(DEFAULT_SEGMENT_BYTES, max(64 << 10, self.max_bytes // 8))
        self.segment_bytes = int(segment_bytes)
        self._clock = clock
        self._lock = threading.Lock()
        self._segments = list_segments(self.dir)
        self._fd: Optional[int] = None
        self._size = 0
        self.truncated_bytes = 0
        self._head = 0
        self._held = HeldRecords(hold_bytes)
        self._fault: Optional[DiskFault] = None
        self._fault_ended: Optional[float] = None  # clock time the last spell ended
        self._retry_every = float(retry_every)
        self._retry_at = 0.0  # time.monotonic() of the next write attempt while faulty
        self._torn = False  # a failed write left bytes after `_size` not yet cut off
        self._recovering = False  # a retry is writing (retention may journal meanwhile)
        self._retention_error: Optional[str] = None  # the failure said, until one works
        # A full disk is tried again only once this much is free (the reserve's room
        # twice): a few bytes freed now and then must not make the alerts flap.
        self._resume_free = 2 * max(0, int(reserve_bytes))
        self._log = log or (lambda msg: None)
        self._recover()
        self._reserve = Reserve(self.dir / RESERVE_NAME, reserve_bytes)
        self._reserve.make()

    # -- state -----------------------------------------------------------------------
    @property
    def head(self) -> int:
        """The newest seq written (0 for an empty journal)."""
        return self._head

    @property
    def fault(self) -> Optional[DiskFault]:
        """The spell of failed writes going on now (None: the journal writes)."""
        return self._fault

    @property
    def fault_ended_at(self) -> Optional[float]:
        """When (this journal's clock) the last spell of failed writes ended; None if
        there has been none. What was kept out of the journal meanwhile (the trainers'
        spool records, `JournalFull`) is journaled only after it."""
        return self._fault_ended

    @property
    def held(self) -> int:
        """How many records wait in memory for room on disk."""
        return len(self._held)

    @property
    def first(self) -> int:
        """The oldest seq still held (head + 1 when nothing is held)."""
        with self._lock:
            return self._segments[0][0] if self._segments else self._head + 1

    def _recover(self) -> None:
        if not self._segments:
            return
        first, path = self._segments[-1]
        size = path.stat().st_size
        keep, seq = _last_valid_line_end(path, size)
        if keep < size:
            self.truncated_bytes = size - keep
            with open(str(path), "r+b") as f:
                f.truncate(keep)
        self._head = seq if seq is not None else first - 1
        self._open(path)

    def _open(self, path: Path) -> None:
        fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self._fd is not None:  # closed only once the next one is open
            os.close(self._fd)
        self._fd = fd
        self._size = os.fstat(self._fd).st_size
        self._torn = False

    # -- writing ---------------------------------------------------------------------
    def append(self, t: str, fields: Mapping, ts: Optional[float] = None) -> Optional[int]:
        """Journal one record; returns its seq (None: held until the disk has room)."""
        seqs = self.append_many([(t, fields)], ts=ts)
        return seqs[-1] if seqs else None

    def append_many(
        self, records: Iterable[Tuple[str, Mapping]], ts: Optional[float] = None,
        hold: bool = True,
    ) -> List[int]:
        """Journal records in order with one write; returns the seqs of those written.

        When the journal cannot write (disk full, I/O error) the records that did not
        reach it are held in memory and written later, in order, and get their seqs
        then; their seqs are missing from the list returned. With `hold=False` a caller
        that keeps its records elsewhere gets `JournalFull` instead whenever none of them
        was written (and nothing of them is held)."""
        with self._lock:
            return self._append_locked(records, ts, hold)

    def retry(self, force: bool = False) -> bool:
        """Write what is held if the disk has room now (no sooner than `retry_every`
        after the last try unless `force`); True when the journal writes normally."""
        with self._lock:
            if self._fault is None:
                return True
            if force:
                self._retry_at = 0.0
            return self._recovered_locked()

    def _append_locked(
        self, records: Iterable[Tuple[str, Mapping]], ts: Optional[float], hold: bool = True
    ) -> List[int]:
        now = self._clock() if ts is None else ts
        pending = [(t, fields) for t, fields in records]
        if not pending:
            return []
        if self._fault is not None and not self._recovered_locked():
            if not hold:
                raise JournalFull(self._fault.errno, "%s; %d records held" % (
                    self._fault.describe(), len(self._held)))
            for t, fields in pending:
                self._held.add(t, _when(fields, now), encode(t, 0, fields, ts=now))
            return []
        first = self._head + 1
        entries = [(t, fields, encode(t, first + i, fields, ts=now))
                   for i, (t, fields) in enumerate(pending)]
        written = self._write_entries(entries, requeue=True, strict=not hold, now=now)
        return list(range(first, first + written))

    def _recovered_locked(self, last: bool = False) -> bool:
        """While faulty, and a try is due: write the held records, then what says the
        spell is over. True when it is over. `last`: the last chance, whatever is free."""
        assert self._fault is not None
        now = time.monotonic()
        if now < self._retry_at or self._recovering:
            return False
        self._retry_at = now + self._retry_every
        if self._fault.errno == errno.ENOSPC and not last:
            free = free_bytes(self.dir)
            if free is not None and free < self._resume_free:
                return False
        self._recovering = True
        try:
            return self._recover_held()
        finally:
            self._recovering = False

    def _recover_held(self) -> bool:
        assert self._fault is not None
        held = self._held.items()
        if held:
            first = self._head + 1
            written = self._write_entries(
                [(t, when, _renumber(line, first + i)) for i, (t, when, line) in enumerate(held)],
                requeue=False)
            self._held.take(written)
            self._fault.written += written
            if len(self._held):
                return False
        fault = self._fault
        records = fault.end_records(self._held, self._clock())
        first, now_ts = self._head + 1, self._clock()
        written = self._write_entries(
            [(t, now_ts, encode(t, first + i, fields, ts=now_ts))
             for i, (t, fields) in enumerate(records)], requeue=False)
        if written and self._held.dropped_count():
            self._held.reset_dropped()  # the `dropped` event went first: it is told
        if written < len(records):
            return False
        self._fault = None
        self._fault_ended = self._clock()
        self._log("journal: %s is over: writing again (%d held records written)"
                  % (fault.describe(), fault.written))
        self._reserve.make()
        return True

    def _write_entries(self, entries: Sequence[Tuple[str, object, bytes]], requeue: bool,
                       strict: bool = False, now: float = 0.0) -> int:
        """Write encoded lines (type, its fields or time, line) numbered from head + 1;
        returns how many reached the journal whole. On a failure the rest are held when
        `requeue`; with `strict`, when none was written, `JournalFull` is raised instead
        (nothing held)."""
        data = b"".join(line for _, _, line in entries)
        rotated = False
        try:
            if self._fd is None or (
                    self._size > 0 and self._size + len(data) > self.segment_bytes):
                rotated = self._rotate(self._head + 1)
            kept, error = self._write(data)
        except OSError as exc:  # the next segment could not even be created
            kept, error = 0, exc
        written = data.count(b"\n", 0, kept)
        self._size += kept
        self._head += written
        if error is not None:
            rest = entries[written:]
            if strict and not written:
                self._begin_fault(error)
                raise JournalFull(error.errno, "%s; nothing written" % (
                    self._fault.describe() if self._fault is not None else error))
            if requeue:
                for t, when, line in rest:
                    self._held.add(t, _when(when, now), line)
            self._begin_fault(error)
        if rotated:
            try:
                self._enforce_locked()
            except Exception as exc:  # the write is done: retention never undoes that
                self._retention_failed("", exc)
        return written

    def _write(self, data: bytes) -> Tuple[int, Optional[OSError]]:
        """Append `data` (whole lines) to the current segment: (bytes kept, the error
        that stopped it). What a failed write left is cut back to its last whole line at
        once; if even that fails, before the next write."""
        start = self._size
        fd = self._fd
        if fd is None:  # `_rotate` opens a segment or raises: no write without one
            return 0, OSError(errno.EBADF, "no journal segment is open")
        try:
            if self._torn:
                os.ftruncate(fd, start)
                self._torn = False
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            return len(data), None
        except OSError as exc:
            error = exc
        try:
            reached = os.fstat(fd).st_size - start
        except OSError:
            reached = 0  # unknown: keep nothing of it, so the cut below removes it all
            self._torn = True
        keep = data.rfind(b"\n", 0, max(0, min(reached, len(data)))) + 1
        if self._torn or reached != keep:
            try:
                os.ftruncate(fd, start + keep)
                self._torn = False
            except OSError:
                self._torn = True  # no newline after `keep`: readers never take it
        return keep, error

    def _begin_fault(self, error: OSError) -> None:
        """The first failed write of a spell: say so, in the journal too, using the
        reserve's room for it (see `agent.journal.full`)."""
        if self._fault is not None:
            return
        fault = self._fault = DiskFault(error, self.dir, self._clock(), self._held.limit)
        self._retry_at = time.monotonic() + self._retry_every
        self._log("journal: %s: %s; holding records in memory until it can write"
                  % (fault.describe(), fault.error))
        fault.reserve_released = self._reserve.release()
        when = self._clock()
        self._write_entries([(ALERT, when, encode(ALERT, self._head + 1, fault.alert(),
                                                ts=when))], requeue=True)

    def _rotate(self, first_seq: int) -> bool:
        path = self.dir / segment_name(first_seq)
        if self._segments and self._segments[-1][0] == first_seq:
            self._open(path)  # the current segment is still empty: keep using it
            return False
        self._open(path)  # raises when it cannot be made: nothing changed then
        self._segments.append((first_seq, path))
        return True

    def enforce_retention(self) -> int:
        """Drop segments beyond the size/age caps; returns how many records were dropped.
        A segment that cannot be removed (a read-only remount) is kept, in the list as
        on disk, with those after it, and `log` hears it once per spell; nothing raised."""
        with self._lock:
            return self._enforce_locked()

    def _enforce_locked(self) -> int:
        now = self._clock()
        sizes = []
        for _, path in self._segments:
            try:
                st = path.stat()
                sizes.append((st.st_size, st.st_mtime))
            except FileNotFoundError:
                sizes.append((0, now))
            except OSError as exc:  # not known to be past a cap: kept, and said
                self._retention_failed("cannot look at %s" % path, exc)
                sizes.append((0, now))
        total = sum(s for s, _ in sizes)
        # reason -> [count, first seq, last seq]
        dropped: Dict[str, List[Any]] = {"size cap": [0, None, None], "age cap": [0, None, None]}
        # Never drop the segment being written to.
        while len(self._segments) > 1:
            size, mtime = sizes[0]
            if total > self.max_bytes:
                reason = "size cap"
            elif now - mtime > self.max_age:
                reason = "age cap"
            else:
                break
            first, path = self._segments[0]
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                # Kept, here and on disk (a read-only remount): the journal grows past
                # its cap until it can drop it; the segments after it wait behind it.
                self._retention_failed("cannot drop %s past the %s" % (path, reason), exc)
                break
            self._retention_ok()
            self._segments.pop(0)
            sizes.pop(0)
            count = self._segments[0][0] - first
            total -= size
            entry = dropped[reason]
            entry[0] += count
            entry[1] = first if entry[1] is None else entry[1]
            entry[2] = first + count - 1
        total_dropped = 0
        for reason, (count, lo, hi) in dropped.items():
            if count:
                total_dropped += count
                self._append_locked(
                    [
                        (
                            EVENT,
                            {
                                "kind": DROPPED,
                                "job": None,
                                "rank": None,
                                "step": None,
                                "msg": "journal %s: dropped %d records (seq %d..%d)"
                                % (reason, count, lo, hi),
                                "data": {"count": count, "reason": reason, "first": lo,
                                         "last": hi},
                            },
                        )
                    ],
                    None,
                )
        return total_dropped

    def _retention_failed(self, what: str, exc: Exception) -> None:
        """Said once per spell of failures (every minute's retention would say it
        again), never raised: a segment it cannot drop costs room, not records."""
        if self._retention_error is None:
            self._retention_error = "%s: %s: %s" % (what or "failed", type(exc).__name__,
                                                    exc)
            self._log("journal retention: %s; segments are kept until it can (said once)"
                      % self._retention_error)

    def _retention_ok(self) -> None:
        if self._retention_error is not None:
            self._log("journal retention drops segments again (after: %s)"
                      % self._retention_error)
            self._retention_error = None

    def close(self) -> None:
        """Close, after a last try to write what is held; what still cannot be written
        is lost with this process, and `log` says how much."""
        with self._lock:
            if self._fault is not None:
                self._retry_at = 0.0
                self._recovered_locked(last=True)
            if len(self._held):
                self._log("journal: %d records held in memory could not be written before "
                          "closing (%s): they are lost" % (
                              len(self._held),
                              self._fault.describe() if self._fault else "write failed"))
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _when(fields: object, default: float) -> float:
    """A record's time as it will be journaled (its own `ts`, else the batch's), from
    its fields or, for one held already, its time."""
    if isinstance(fields, float):
        return fields
    ts = fields.get("ts") if isinstance(fields, Mapping) else None
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else default


# -- reading ---------------------------------------------------------------------------


def _offset_after(path: Path, after: int) -> int:
    """Byte offset of the first whole line in a segment whose seq is > `after`.

    Lines are seq-ordered, so this is a binary search over byte positions; a torn or
    unreadable line counts as "not yet there".
    """
    with open(str(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            lo, hi = 0, size
            while lo < hi:
                mid = (lo + hi) // 2
                start = lo
                if mid > lo:
                    nl = mm.find(b"\n", mid - 1, hi)
                    if nl >= 0 and nl + 1 < hi:
                        start = nl + 1
                end = mm.find(b"\n", start, hi)
                if end < 0:
                    hi = start
                    continue
                seq = line_seq(mm[start : min(end + 1, start + 96)])
                if seq is None or seq > after:
                    hi = start
                else:
                    lo = end + 1
            return lo


def _head_of(path: Path, first: int) -> int:
    size = path.stat().st_size
    with open(str(path), "rb") as f:
        pos = size
        tail = b""
        while pos > 0:
            step = min(pos, 1 << 16)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
            end = tail.rfind(b"\n")
            if end < 0:
                continue
            begin = tail.rfind(b"\n", 0, end)
            if begin < 0 and pos > 0:
                continue
            seq = line_seq(tail[begin + 1 : end + 1])
            return seq if seq is not None else first - 1
    return first - 1


class JournalReader:
    """Read-only access to a journal written by another process."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.dir = journal_dir(self.state_dir)
        self.journal_id = ensure_journal_id(self.state_dir)
        self._id_path = self.state_dir / "journal_id"
        self._id_stamp = _stamp(self._id_path)

    def still_this_journal(self) -> bool:
        """True while the journal on disk is the one this reader opened; False while the
        state dir holds no journal id at all (just wiped, its successor not begun).

        Raises `JournalReplaced` once another journal's id is there. One `stat` when
        nothing changed, so a follower can ask before every read."""
        stamp = _stamp(self._id_path)
        if stamp is not None and stamp == self._id_stamp:
            return True
        if stamp is None:
            return False
        try:
            text = self._id_path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return False
        if text == self.journal_id:
            self._id_stamp = stamp
            return True
        if not text:
            return False
        raise JournalReplaced(self.journal_id, text)

    def bounds(self) -> Tuple[int, int]:
        """(first seq held, newest seq) right now; (1, 0) for an empty journal."""
        segments = list_segments(self.dir)
        if not segments:
            return 1, 0
        head = _head_of(segments[-1][1], segments[-1][0])
        return segments[0][0], head

    def chunks(
        self,
        after: int,
        follow: bool = False,
        poll: float = 0.05,
        stop: Optional[Callable[[], bool]] = None,
        block: int = _READ_BLOCK,
        on_gap: Optional[Callable[[int, int], bytes]] = None,
    ) -> Iterator[bytes]:
        """Raw journal bytes, whole lines only, for every record with seq > `after`.

        With `follow`, keeps waiting for new records (polling every `poll` s) until
        `stop()` returns true. Raises `JournalReplaced` when the journal was replaced
        under the reader, before anything of the new journal is read as the old one's.

        Records that retention drops before the reader reaches them (a reader far behind
        a full journal) cannot be sent; with `on_gap`, what `on_gap(newest seq sent,
        first seq sent next)` returns is yielded where they were, so that the loss is
        told (a stream sends a header there), never skipped in silence.
        """
        # Over 80 lines: one reader's position (segment, inode, offset, seq) carried
        # through rotation, retention and replacement; split, each part would hand all
        # four back and forth around its yields.
        current: Optional[Tuple[int, Path]] = None
        inode: Optional[int] = None  # of the file `current` named when it was chosen
        offset = 0
        while True:
            if not self.still_this_journal():
                # Wiped, its successor not begun: nothing here belongs to this journal.
                current = None
                if not follow or (stop is not None and stop()):
                    return
                time.sleep(poll)
                continue
            if current is None:
                segments = list_segments(self.dir)
                candidates = [s for s in segments if s[0] <= after + 1]
                if candidates:
                    current = candidates[-1]
                elif segments:
                    current = segments[0]
                    if on_gap is not None:
                        yield on_gap(after, current[0])  # dropped before it was reached
                    after = current[0] - 1
                if current is None:
                    if not follow or (stop is not None and stop()):
                        return
                    time.sleep(poll)
                    continue
                inode = _inode(current[1])
                try:
                    offset = _offset_after(current[1], after) if current[0] <= after else 0
                except FileNotFoundError:
                    current = None
                    continue
            try:
                for chunk, end in _read_lines(current[1], offset, block, inode):
                    offset = end
                    after = _last_seq(chunk, after)
                    yield chunk
            except FileNotFoundError:
                pass  # dropped by retention while we were behind: move on
            except _FileReplaced:
                # Between the id check and the open: another journal's file, or (same
                # id) a segment made again; either way, look again before reading.
                self.still_this_journal()
                current = None
                continue
            newer = [s for s in list_segments(self.dir) if s[0] > current[0]]
            if newer:
                # The writer moves to a new segment only after its last write to this
                # one, so one more pass here sees everything this segment will hold.
                try:
                    for chunk, end in _read_lines(current[1], offset, block, inode):
                        offset = end
                        after = _last_seq(chunk, after)
                        yield chunk
                except FileNotFoundError:
                    pass
                except _FileReplaced:
                    self.still_this_journal()
                    current = None
                    continue
                current = newer[0]
                inode = _inode(current[1])
                if current[0] > after + 1 and on_gap is not None:
                    yield on_gap(after, current[0])  # the rest of the segment was dropped
                after = max(after, current[0] - 1)  # all before it was sent (or dropped)
                try:
                    offset = _offset_after(current[1], after) if current[0] <= after else 0
                except FileNotFoundError:
                    current = None  # dropped meanwhile: start over from what is left
                continue
            if not follow or (stop is not None and stop()):
                return
            time.sleep(poll)

    def records(self, after: int = 0) -> Iterator[dict]:
        """Decoded records with seq > `after` (for tools and tests, not the hot path)."""
        for chunk in self.chunks(after):
            for line in chunk.splitlines():
                yield json.loads(line)


def _last_seq(chunk: bytes, default: int) -> int:
    """The seq of a chunk's last line (`default` when it has no journaled line)."""
    start = chunk.rfind(b"\n", 0, len(chunk) - 1) + 1
    seq = line_seq(chunk[start:])
    return default if seq is None else seq


def _read_lines(path: Path, offset: int, block: int,
                inode: Optional[int] = None) -> Iterator[Tuple[bytes, int]]:
    """(chunk of whole lines, offset after it) from `offset` to the last newline; raises
    `_FileReplaced` when `path` no longer names the file of inode `inode`."""
    with open(str(path), "rb") as f:
        if inode is not None and os.fstat(f.fileno()).st_ino != inode:
            raise _FileReplaced(str(path))
        f.seek(offset)
        carry = b""
        while True:
            data = f.read(block)
            if not data:
                return
            data = carry + data if carry else data
            nl = data.rfind(b"\n")
            if nl < 0:
                carry = data
                continue
            offset += nl + 1
            carry = data[nl + 1 :]
            yield (data if not carry else data[: nl + 1]), offset
