"""Tailing the trainer ranks' spool files into the journal.

Each rank's `Reporter` writes `RUN_DIR/spool/JOB/rank-R.<file_id>.ndjson`: a header line
`{"t":"spool","v":1,"file_id":…,"job":…,"rank":R,"pid":P,"ts":…}` and then one record
per line without `seq`. A new file starts with every process and whenever the current
one passes 64 MiB, so a rank's files are read oldest first and a file is deleted once it
is fully journaled and a newer one exists.

Exactly-once across a `kill -9` of the daemon: every record journaled from a spool
carries `src` = `"FILE_ID:OFFSET"`, the byte position just after its line. The journal
append is the commit point, so the journal itself says how far each file was read. A
small checkpoint (`STATE_DIR/spool_positions.json`, positions plus the seq they are
valid at) only bounds how much of the journal a restart has to scan.

A spool is untrusted input (the trainer is user code): every header and line is checked
against the protocol here, where it enters (agent.wire.record_check). A line that fails is
refused, counted, reported as a `spool_error` event naming its file and line, and kept
for inspection in a bounded ring in the state dir (`spool_rejects.ndjson`, then `.1`);
a flood of them is reported one by one up to `REPORT_EACH` per file, then summed once
per poll. A file that cannot be read is reported and skipped; nothing in one spool stops
the reading of another.

The module is over 500 lines because discovery, reading, refusal and the exactly-once
positions all work on one file's read state (`SpoolFile`) within one poll, whose batch
is committed or undone as a whole; the checks themselves (record_check) and the ring of
kept lines (spool_rejects) live apart.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Tuple

from agent.journal.journal import JournalReader
from agent.journal.spool_rejects import KEEP_RAW, RejectRing
from agent.wire import atomic, paths
from agent.wire.events import SPOOL_ERROR
from agent.wire.protocol import EVENT, MAX_LINE_BYTES, SPOOL_HEADER
from agent.wire.record_check import (
    MAX_RANK,
    Rejected,
    check_spool_header,
    check_spool_record,
    name_problem,
    show,
    visible,
)

ROTATE_BYTES = 64 << 20
_SRC = re.compile(rb',"src":"([0-9A-Za-z_.-]+):(\d+)"\}\n')
_READ_LIMIT = 8 << 20
REPORT_EACH = 100  # refused lines of one file reported one by one; later ones are summed

Record = Tuple[str, dict]


class SpoolFile:
    """One spool file as identified by its header (not by its name or inode alone)."""

    __slots__ = ("created", "dev", "file_id", "head", "ino", "job", "lineno", "looked",
                 "offset", "path", "pid", "quiet", "rank", "rejected", "run_dir", "summary")

    def __init__(self, path: Path, run_dir: Path, job: str, rank: int, dev: int,
                 ino: int) -> None:
        self.path = path
        self.run_dir = run_dir
        self.job = job
        self.rank = rank
        self.dev = dev
        self.ino = ino
        self.file_id = ""
        self.head = b""  # the first line, to notice a replaced file on a reused inode
        self.pid: Optional[int] = None
        self.created = 0.0
        self.offset = 0
        self.lineno = 0
        self.rejected = 0  # lines refused in this daemon's life
        self.summary: Optional[List[Any]] = None  # [count, first, last, error, end] summed
        # (size, mtime_ns) as this poll's listing saw it, and as it was when the file was
        # last read to its end: a file unchanged since is neither opened nor read again.
        # A rank that went away leaves its last file until a newer one of its rank comes,
        # and on a shared mount two opens of each per poll, five polls a second, for
        # every job that ever ran there, were most of the agent's I/O.
        self.looked: Optional[Tuple[int, int]] = None
        self.quiet: Optional[Tuple[int, int]] = None

    def sort_key(self) -> Tuple[float, int, str]:
        return (self.created, self.ino, self.path.name)


def _event(kind: str, job: Optional[str], rank: Optional[int], msg: str, data: dict) -> dict:
    return {"kind": kind, "job": job, "rank": rank, "step": None, "msg": msg, "data": data}


def _open(path: Path) -> BinaryIO:
    """A spool file opened for reading (`FileNotFoundError` once it is gone). Neither a
    FIFO (whose open would block the daemon) nor a link to elsewhere is read: `OSError`
    says so."""
    return atomic.open_regular(path, follow=False)


def _count_lines(f: BinaryIO, start: int, end: int) -> int:
    """The line ends in bytes [start, end) of `f` (fewer where the file ends sooner),
    counted `_READ_LIMIT` bytes at a time: a resumed file's journaled part, which the
    trainer may have made any size, is never held whole."""
    f.seek(start)
    count = 0
    left = end - start
    while left > 0:
        data = f.read(min(left, _READ_LIMIT))
        if not data:
            break
        count += data.count(b"\n")
        left -= len(data)
    return count


def _same_head(sf: SpoolFile) -> bool:
    """Whether the file still starts with the line it had when it was identified."""
    try:
        with _open(sf.path) as f:
            return f.read(len(sf.head)) == sf.head
    except OSError:
        return False


class SpoolJournal(Protocol):
    """What the tailer needs of the journal: where it keeps its state, its newest seq, and
    appending a batch. The daemon passes the journal wrapped so its jobs see each batch."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def head(self) -> int: ...

    def append_many(self, records: Iterable[Tuple[str, Mapping]], ts: Optional[float] = None
                    ) -> List[int]: ...


class SpoolTailer:
    """Moves spool records into the journal, each exactly once.

    `settle` (s) is how long a finished file must stay unchanged before its unterminated
    last line is declared torn, or the file deleted: a process still writing to an old
    file (a slow exit during a relaunch) is not cut short.
    """

    def __init__(self, journal: SpoolJournal, run_dirs: Iterable[Path] = (),
                 settle: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.journal = journal
        self.run_dirs: List[Path] = []
        for run_dir in run_dirs:
            self.add_run_dir(run_dir)
        self.settle = settle
        self._clock = clock
        self.positions_path = journal.state_dir / "spool_positions.json"
        self._files: Dict[str, SpoolFile] = {}  # by path
        self._positions: Dict[str, int] = {}  # file_id -> byte offset journaled up to
        self._checkpoint_seq = 0
        self._dirty = False
        self._reported: set = set()  # (path, reason) reported once per daemon life
        self._pending_errors: List[Record] = []
        self.rejected = 0  # lines and headers refused in this daemon's life, all files
        self.kept = RejectRing(journal.state_dir)
        self._kept_events: List[dict] = []  # this poll's reports of kept lines
        self.notes: List[str] = []  # recovery remarks for the daemon's log
        self.recover()

    def add_run_dir(self, run_dir: Path) -> None:
        run_dir = Path(run_dir).resolve()
        if run_dir not in self.run_dirs:
            self.run_dirs.append(run_dir)

    # -- crash recovery --------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild read positions: the checkpoint, then every `src` journaled after it."""
        after = 0
        try:
            saved = json.loads(self.positions_path.read_text(encoding="utf-8"))
            after = int(saved["seq"])
            self._positions = {str(k): int(v) for k, v in saved["files"].items()}
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.notes.append("unreadable %s (%s): positions rebuilt from the journal"
                              % (self.positions_path, exc))
            after, self._positions = 0, {}
        if after > self.journal.head:
            after, self._positions = 0, {}  # checkpoint from a journal that was reset
        for chunk in JournalReader(self.journal.state_dir).chunks(after):
            for match in _SRC.finditer(chunk):
                file_id = match.group(1).decode("ascii")
                offset = int(match.group(2))
                if offset > self._positions.get(file_id, 0):
                    self._positions[file_id] = offset
        self._checkpoint_seq = self.journal.head

    def resync(self) -> None:
        """Forget every read position held in memory and take them from the journal again:
        after a failure whose effect on them is unknown, the journal (the commit point)
        still says exactly how far each file was read."""
        self._files = {}
        self._positions = {}
        self._dirty = False
        self.recover()

    def checkpoint(self) -> None:
        """Persist positions (cheap; the journal stays the source of truth)."""
        if not self._dirty:
            return
        # Rewritten at every poll while records flow, and only a shortcut: the journal
        # says how far each file was read (`recover`), so no fsync is spent on it.
        atomic.write_text(self.positions_path, json.dumps(
            {"v": 1, "seq": self._checkpoint_seq, "files": self._positions}), durable=False)
        self._dirty = False

    # -- discovery -------------------------------------------------------------------
    def _discover(self) -> List[SpoolFile]:
        seen: Dict[str, SpoolFile] = {}
        for run_dir in self.run_dirs:
            spool = paths.spool_root(run_dir)
            try:
                jobs = [e for e in os.scandir(str(spool)) if e.is_dir(follow_symlinks=False)]
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._once(str(spool), "unreadable", None, None, "cannot list %s: %s"
                           % (spool, exc))
                continue
            for job_entry in jobs:
                problem = name_problem(job_entry.name)
                if problem is not None:
                    self._once(job_entry.path, "name", None, None, "spool folder %s is "
                               "not read: %s is no job id (%s)" % (
                                   show(job_entry.path, 200), show(job_entry.name), problem))
                    continue
                try:
                    entries = list(os.scandir(job_entry.path))
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    self._once(job_entry.path, "unreadable", job_entry.name, None,
                               "cannot list %s: %s" % (job_entry.path, exc))
                    continue
                for entry in entries:
                    try:
                        self._discover_one(run_dir, job_entry.name, entry, seen)
                    except OSError as exc:
                        self._once(entry.path, "unreadable", job_entry.name, None,
                                   "spool file %s is not read: %s" % (entry.path, exc))
        self._files = seen
        return list(seen.values())

    def _discover_one(self, run_dir: Path, job: str, entry: os.DirEntry,
                      seen: Dict[str, SpoolFile]) -> None:
        match = paths.SPOOL_FILE.match(entry.name)
        if not match:
            return
        rank = int(match.group(1)) if len(match.group(1)) <= 10 else MAX_RANK + 1
        if rank > MAX_RANK:
            self._once(entry.path, "rank", job, None, "spool file %s is not read: its "
                       "rank is over %d" % (show(entry.path, 200), MAX_RANK))
            return
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            self._once(entry.path, "kind", job, rank, "spool file %s is not read: it is "
                       "not a regular file" % entry.path)
            return
        known = self._files.get(entry.path)
        looked = (st.st_size, st.st_mtime_ns)
        if known is None or (known.dev, known.ino) != (st.st_dev, st.st_ino) or (
                known.quiet != looked and not _same_head(known)):
            known = SpoolFile(Path(entry.path), run_dir, job, rank, st.st_dev, st.st_ino)
            if not self._identify(known, st.st_mtime, seen):
                return
        known.looked = looked
        seen[entry.path] = known

    def _once(self, path: str, reason: str, job: Optional[str], rank: Optional[int],
              msg: str) -> None:
        """Report a file or folder that cannot be read, once per daemon life."""
        key = (path, reason)
        if key in self._reported:
            return
        self._reported.add(key)
        self._pending_errors.append((EVENT, _event(
            SPOOL_ERROR, job, rank, msg, {"file": visible(path), "line": None,
                                            "error": msg})))

    def _identify(self, sf: SpoolFile, mtime: float,
                  seen: Optional[Dict[str, SpoolFile]] = None) -> bool:
        """Read the header; False while the writer has not finished writing it."""
        try:
            with _open(sf.path) as f:
                first = f.readline(MAX_LINE_BYTES + 1)
        except FileNotFoundError:
            return False
        if not first.endswith(b"\n"):
            return False
        sf.head = first
        header = None
        try:
            header = json.loads(first)
        except (ValueError, RecursionError):
            pass
        rejected = None
        if isinstance(header, dict) and header.get("t") == SPOOL_HEADER:
            try:
                facts = check_spool_header(header, sf.job, sf.rank)
                others = [*(seen or {}).values(), *self._files.values()]
                for other in others:
                    if other.file_id == facts["file_id"] and other.path != sf.path:
                        raise Rejected("header 'file_id' %r is already %s's" % (
                            facts["file_id"], other.path))
            except Rejected as exc:
                rejected = "spool header refused: %s" % exc
            else:
                sf.file_id = facts["file_id"]
                sf.created = float(facts["ts"] if facts["ts"] is not None else mtime)
                sf.pid = facts["pid"]
                start, lineno = len(first), 1
        if rejected is not None or not (isinstance(header, dict)
                                        and header.get("t") == SPOOL_HEADER):
            # No usable header: the file is known by device and inode, and its records
            # by its folder and name.
            sf.file_id = "i%x.%x" % (sf.dev, sf.ino)
            sf.created = mtime
        position = self._positions.get(sf.file_id)
        if rejected is not None:
            start, lineno = len(first), 1  # the header line itself is no record
            if position is None:  # not told yet (a restart has journaled it)
                record = self._reject(sf, 1, rejected, len(first), first[:-1])
                if record is not None:
                    self._pending_errors.append(record)
        elif not (isinstance(header, dict) and header.get("t") == SPOOL_HEADER):
            start, lineno = 0, 0
            if position is None:
                self._pending_errors.append(self._error(
                    sf, 1, "no spool header line (expected {\"t\":\"spool\",…})", 0))
        if position is not None and position > start:
            with _open(sf.path) as f:
                lineno += _count_lines(f, start, position)
            start = position
        sf.offset, sf.lineno = start, lineno
        return True

    def _error(self, sf: SpoolFile, lineno: int, error: str, end: int) -> Record:
        fields = _event(SPOOL_ERROR, sf.job, sf.rank,
                        "spool line %d of %s skipped: %s" % (lineno, sf.path, error),
                        {"file": str(sf.path), "line": lineno, "error": error})
        if end:
            fields["src"] = "%s:%d" % (sf.file_id, end)
        return (EVENT, fields)

    # -- refused lines ---------------------------------------------------------------
    def _reject(self, sf: SpoolFile, lineno: int, error: str, end: int, raw: bytes
                ) -> Optional[Record]:
        """Count a refused line, keep it for inspection and report it: one by one up to
        REPORT_EACH per file, then summed in one report at the end of the file's read
        (`_flush_summary`), so a trainer writing garbage cannot flood the journal."""
        sf.rejected += 1
        self.rejected += 1
        self.kept.add({"file": str(sf.path), "line": lineno, "job": sf.job, "rank": sf.rank,
                       "pid": sf.pid, "file_id": sf.file_id, "error": error}, raw)
        if sf.rejected <= REPORT_EACH:
            record = self._error(sf, lineno, error, end)
            record[1]["data"].update(rejected=sf.rejected, kept=str(self.kept.path))
            self._kept_events.append(record[1])
            return record
        if sf.summary is None:
            sf.summary = [1, lineno, lineno, error, end]
        else:
            sf.summary[0] += 1
            sf.summary[2:] = [lineno, error, end]
        return None

    def _flush_summary(self, sf: SpoolFile, out: List[Record]) -> None:
        summary, sf.summary = sf.summary, None
        if summary is None:
            return
        count, first, last, error, end = summary
        fields = _event(SPOOL_ERROR, sf.job, sf.rank,
                        "%d more spool lines of %s skipped (lines %d-%d; %d refused in "
                        "all), the last because: %s" % (count, sf.path, first, last,
                                                        sf.rejected, error),
                        {"file": str(sf.path), "line": first, "lines": [first, last],
                         "count": count, "error": error, "rejected": sf.rejected,
                         "kept": str(self.kept.path)})
        fields["src"] = "%s:%d" % (sf.file_id, end)
        self._kept_events.append(fields)
        out.append((EVENT, fields))

    def _write_kept(self) -> None:
        """Write this poll's refused lines to the ring; a ring that cannot be written is
        said in their reports, which then name no file."""
        events, self._kept_events = self._kept_events, []
        problem = self.kept.flush()
        if problem is not None:
            for fields in events:
                fields["data"]["kept"] = None
                fields["data"]["kept_error"] = problem

    # -- tailing ---------------------------------------------------------------------
    def pid_ranks(self) -> Dict[int, Tuple[str, int]]:
        """Trainer pids named by the spool headers: pid -> (job, rank). Called from the
        sampler thread while the main loop's `poll` changes `_files`: it reads a copy of
        the files, taken at once (no thread runs while `list` copies a dict's values)."""
        return {sf.pid: (sf.job, sf.rank) for sf in list(self._files.values()) if sf.pid}

    def poll(self) -> int:
        """Journal every complete new spool line; returns how many records were written.

        A file whose reading fails is reported (once per distinct error) and read again
        from the same place at the next poll; the other files carry on. Only a failure
        to journal the batch (a full disk) raises: then nothing of it counts as read."""
        self._pending_errors = []
        self.kept.drop_after(0)
        self._kept_events = []
        rejected, reported, previous = self.rejected, set(self._reported), self._files
        files = self._discover()
        counts = [(sf, sf.rejected) for sf in files]
        groups: Dict[Tuple[str, str, int], List[SpoolFile]] = {}
        for sf in files:
            groups.setdefault((str(sf.run_dir), sf.job, sf.rank), []).append(sf)
        now = self._clock()
        read: List[Record] = []
        advanced: List[Tuple[SpoolFile, int, int]] = []
        finished: List[SpoolFile] = []
        for group in groups.values():
            group.sort(key=SpoolFile.sort_key)
            for index, sf in enumerate(group):
                newer_exists = index < len(group) - 1
                if not newer_exists and sf.quiet is not None and sf.quiet == sf.looked:
                    continue  # read to its end and unchanged since
                records: List[Record] = []
                before = (sf.rejected, self.kept.mark(), len(self._kept_events))
                try:
                    result = self._read(sf, newer_exists, now, records)
                except Exception as exc:  # this file's failure is its own
                    self.rejected -= sf.rejected - before[0]
                    sf.rejected, sf.summary = before[0], None
                    self.kept.drop_after(before[1])
                    del self._kept_events[before[2]:]
                    text = "%s: %s" % (type(exc).__name__, exc)
                    self._once(str(sf.path), "failed: " + text, sf.job, sf.rank,
                               "spool file %s: reading failed (%s); tried again at every "
                               "poll" % (sf.path, text))
                    continue
                self._flush_summary(sf, records)
                read.extend(records)
                if result is None:
                    continue
                offset, lineno, done = result
                advanced.append((sf, offset, lineno))
                if done and newer_exists:
                    finished.append(sf)
        batch = self._pending_errors + read
        self._write_kept()
        if batch:
            try:
                seqs = self.journal.append_many(batch)
            except BaseException:
                # Nothing of it was read: the next poll reads and reports it all again
                # (positions only move below), and identifies anew the files first met
                # now, so that a refused header is reported again too.
                for sf, count in counts:
                    sf.rejected, sf.summary = count, None
                self.rejected, self._reported = rejected, reported
                self._files = {path: sf for path, sf in self._files.items()
                               if previous.get(path) is sf}
                raise
            self._checkpoint_seq = seqs[-1]
            self._dirty = True
        for sf, offset, lineno in advanced:
            sf.offset, sf.lineno = offset, lineno
            if self._positions.get(sf.file_id) != offset:
                self._positions[sf.file_id] = offset
                self._dirty = True
        for sf in files:
            sf.quiet = sf.looked if sf.looked and sf.offset == sf.looked[0] else None
        for sf in finished:
            try:
                sf.path.unlink()
            except FileNotFoundError:
                pass
            self._files.pop(str(sf.path), None)
            self._positions.pop(sf.file_id, None)
            self._dirty = True
        return len(batch)

    def _read(self, sf: SpoolFile, newer_exists: bool, now: float,
              out: List[Record]) -> Optional[Tuple[int, int, bool]]:
        """Parse new lines of one file into `out`: (new offset, new lineno, fully read)."""
        try:
            f = _open(sf.path)
        except FileNotFoundError:
            return None
        with f:
            st = os.fstat(f.fileno())
            settled = now - st.st_mtime >= self.settle
            if st.st_size < sf.offset:
                key = (str(sf.path), "shrank")
                if key not in self._reported:
                    self._reported.add(key)
                    out.append(self._error(sf, sf.lineno, "file shrank from %d to %d bytes "
                                           "(spool files must only grow)"
                                           % (sf.offset, st.st_size), 0))
                return None
            if st.st_size == sf.offset:
                return sf.offset, sf.lineno, settled
            f.seek(sf.offset)
            data = f.read(_READ_LIMIT)
            offset, lineno = sf.offset, sf.lineno
            pos = 0
            while True:
                nl = data.find(b"\n", pos)
                if nl < 0:
                    break
                lineno += 1
                end = offset + nl + 1
                record = self._convert(sf, data[pos:nl], lineno, end)
                if record is not None:
                    out.append(record)
                pos = nl + 1
            rest = len(data) - pos
            offset += pos
            if rest == 0:
                return offset, lineno, offset == st.st_size and settled
            if rest > MAX_LINE_BYTES:
                skipped = self._skip_long_line(f, offset)
                if skipped is not None:
                    lineno += 1
                    record = self._reject(sf, lineno, "line longer than %d bytes"
                                          % MAX_LINE_BYTES, skipped, data[pos:pos + KEEP_RAW])
                    if record is not None:
                        out.append(record)
                    return skipped, lineno, False
            elif newer_exists and settled and offset + rest == st.st_size:
                lineno += 1
                record = self._reject(sf, lineno, "incomplete last line (the writer stopped "
                                      "mid-line)", st.st_size, data[pos:])
                if record is not None:
                    out.append(record)
                return st.st_size, lineno, True
            return offset, lineno, False

    @staticmethod
    def _skip_long_line(f, offset: int) -> Optional[int]:
        f.seek(offset)
        pos = offset
        while True:
            data = f.read(1 << 20)
            if not data:
                return None
            nl = data.find(b"\n")
            if nl >= 0:
                return pos + nl + 1
            pos += len(data)

    def _convert(self, sf: SpoolFile, line: bytes, lineno: int, end: int
                 ) -> Optional[Record]:
        """One line as a journal record, or None when it is refused (`_reject`)."""
        if len(line) > MAX_LINE_BYTES:
            return self._reject(sf, lineno, "line longer than %d bytes" % MAX_LINE_BYTES,
                                end, line)
        try:
            value = json.loads(line)
        except RecursionError:
            return self._reject(sf, lineno, "not valid JSON: nested too deeply", end, line)
        except ValueError as exc:
            return self._reject(sf, lineno, "not valid JSON: %s" % exc, end, line)
        try:
            t, record = check_spool_record(value, sf.job, sf.rank)
        except Rejected as exc:
            return self._reject(sf, lineno, str(exc), end, line)
        record["src"] = "%s:%d" % (sf.file_id, end)
        return (t, record)
