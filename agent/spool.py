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
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from agent.journal import Journal, JournalReader
from agent.protocol import MAX_LINE_BYTES

SPOOL_VERSION = 1
ROTATE_BYTES = 64 << 20
_NAME = re.compile(r"^rank-(\d+)(?:\.([0-9A-Za-z_-]+))?\.ndjson$")
_SRC = re.compile(rb',"src":"([0-9A-Za-z_.-]+):(\d+)"\}\n')
_READ_LIMIT = 8 << 20
_NOT_IN_SPOOL = ("stream", "spool")

Record = Tuple[str, dict]


class SpoolFile:
    """One spool file as identified by its header (not by its name or inode alone)."""

    __slots__ = ("created", "dev", "file_id", "head", "ino", "job", "lineno", "offset",
                 "path", "pid", "rank", "run_dir")

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

    def sort_key(self) -> Tuple[float, int, str]:
        return (self.created, self.ino, self.path.name)


def _event(kind: str, job: Optional[str], rank: Optional[int], msg: str, data: dict) -> dict:
    return {"kind": kind, "job": job, "rank": rank, "step": None, "msg": msg, "data": data}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(".%s.%d.tmp" % (path.name, os.getpid()))
    with open(str(tmp), "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(str(tmp), str(path))


def _same_head(sf: SpoolFile) -> bool:
    """Whether the file still starts with the line it had when it was identified."""
    try:
        with open(str(sf.path), "rb") as f:
            return f.read(len(sf.head)) == sf.head
    except FileNotFoundError:
        return False


class SpoolTailer:
    """Moves spool records into the journal, each exactly once.

    `settle` (s) is how long a finished file must stay unchanged before its unterminated
    last line is declared torn, or the file deleted: a process still writing to an old
    file (a slow exit during a relaunch) is not cut short.
    """

    def __init__(self, journal: Journal, run_dirs: Iterable[Path] = (), settle: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
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

    def checkpoint(self) -> None:
        """Persist positions (cheap; the journal stays the source of truth)."""
        if not self._dirty:
            return
        _atomic_write(self.positions_path, json.dumps(
            {"v": 1, "seq": self._checkpoint_seq, "files": self._positions}))
        self._dirty = False

    # -- discovery -------------------------------------------------------------------
    def _discover(self) -> List[SpoolFile]:
        seen = {}
        for run_dir in self.run_dirs:
            spool = run_dir / "spool"
            try:
                jobs = [e for e in os.scandir(str(spool)) if e.is_dir()]
            except FileNotFoundError:
                continue
            for job_entry in jobs:
                try:
                    entries = list(os.scandir(job_entry.path))
                except FileNotFoundError:
                    continue
                for entry in entries:
                    match = _NAME.match(entry.name)
                    if not match:
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    known = self._files.get(entry.path)
                    if known is None or (known.dev, known.ino) != (
                            st.st_dev, st.st_ino) or not _same_head(known):
                        known = SpoolFile(Path(entry.path), run_dir, job_entry.name,
                                          int(match.group(1)), st.st_dev, st.st_ino)
                        if not self._identify(known, st.st_mtime):
                            continue
                    seen[entry.path] = known
        self._files = seen
        return list(seen.values())

    def _identify(self, sf: SpoolFile, mtime: float) -> bool:
        """Read the header; False while the writer has not finished writing it."""
        try:
            with open(str(sf.path), "rb") as f:
                first = f.readline(MAX_LINE_BYTES + 1)
        except FileNotFoundError:
            return False
        if not first.endswith(b"\n"):
            return False
        sf.head = first
        header = None
        try:
            header = json.loads(first)
        except ValueError:
            pass
        if isinstance(header, dict) and header.get("t") == "spool" and isinstance(
                header.get("file_id"), str) and header["file_id"]:
            sf.file_id = header["file_id"]
            sf.created = float(header.get("ts") or mtime)
            sf.pid = header.get("pid") if isinstance(header.get("pid"), int) else None
            if isinstance(header.get("job"), str):
                sf.job = header["job"]
            if isinstance(header.get("rank"), int):
                sf.rank = header["rank"]
            start, lineno = len(first), 1
        else:
            # No header: fall back on device and inode, and read the first line as data.
            sf.file_id = "i%x.%x" % (sf.dev, sf.ino)
            sf.created = mtime
            start, lineno = 0, 0
            self._pending_errors.append(self._error(sf, 1, "no spool header line "
                                                    "(expected {\"t\":\"spool\",…})", 0))
        position = self._positions.get(sf.file_id)
        if position is not None and position > start:
            with open(str(sf.path), "rb") as f:
                lineno += f.read(position)[start:].count(b"\n")
            start = position
        sf.offset, sf.lineno = start, lineno
        return True

    def _error(self, sf: SpoolFile, lineno: int, error: str, end: int) -> Record:
        fields = _event("spool_error", sf.job, sf.rank,
                        "spool line %d of %s skipped: %s" % (lineno, sf.path, error),
                        {"file": str(sf.path), "line": lineno, "error": error})
        if end:
            fields["src"] = "%s:%d" % (sf.file_id, end)
        return ("event", fields)

    # -- tailing ---------------------------------------------------------------------
    def pid_ranks(self) -> Dict[int, Tuple[str, int]]:
        """Trainer pids named by the spool headers: pid -> (job, rank)."""
        return {sf.pid: (sf.job, sf.rank) for sf in self._files.values() if sf.pid}

    def poll(self) -> int:
        """Journal every complete new spool line; returns how many records were written."""
        self._pending_errors = []
        files = self._discover()
        groups: Dict[Tuple[str, str, int], List[SpoolFile]] = {}
        for sf in files:
            groups.setdefault((str(sf.run_dir), sf.job, sf.rank), []).append(sf)
        now = self._clock()
        batch: List[Record] = list(self._pending_errors)
        advanced: List[Tuple[SpoolFile, int, int]] = []
        finished: List[SpoolFile] = []
        for group in groups.values():
            group.sort(key=SpoolFile.sort_key)
            for index, sf in enumerate(group):
                newer_exists = index < len(group) - 1
                result = self._read(sf, newer_exists, now, batch)
                if result is None:
                    continue
                offset, lineno, done = result
                advanced.append((sf, offset, lineno))
                if done and newer_exists:
                    finished.append(sf)
        if batch:
            seqs = self.journal.append_many(batch)
            self._checkpoint_seq = seqs[-1]
            self._dirty = True
        for sf, offset, lineno in advanced:
            sf.offset, sf.lineno = offset, lineno
            if self._positions.get(sf.file_id) != offset:
                self._positions[sf.file_id] = offset
                self._dirty = True
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
            f = open(str(sf.path), "rb")  # noqa: SIM115 - closed by the `with` below
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
                out.append(self._convert(sf, data[pos:nl], lineno, end))
                pos = nl + 1
            rest = len(data) - pos
            offset += pos
            if rest == 0:
                return offset, lineno, offset == st.st_size and settled
            if rest > MAX_LINE_BYTES:
                skipped = self._skip_long_line(f, offset)
                if skipped is not None:
                    lineno += 1
                    out.append(self._error(sf, lineno, "line longer than %d bytes"
                                           % MAX_LINE_BYTES, skipped))
                    return skipped, lineno, False
            elif newer_exists and settled and offset + rest == st.st_size:
                lineno += 1
                out.append(self._error(sf, lineno, "incomplete last line (the writer "
                                       "stopped mid-line)", st.st_size))
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

    def _convert(self, sf: SpoolFile, line: bytes, lineno: int, end: int) -> Record:
        if len(line) > MAX_LINE_BYTES:
            return self._error(sf, lineno, "line longer than %d bytes" % MAX_LINE_BYTES, end)
        try:
            record = json.loads(line)
        except ValueError as exc:
            return self._error(sf, lineno, "not valid JSON: %s" % exc, end)
        if not isinstance(record, dict):
            return self._error(sf, lineno, "not a JSON object", end)
        t = record.pop("t", None)
        if not isinstance(t, str) or not t:
            return self._error(sf, lineno, "no record type ('t')", end)
        if t in _NOT_IN_SPOOL:
            return self._error(sf, lineno, "record type %r is not allowed in a spool" % t,
                               end)
        record.pop("seq", None)
        record.pop("src", None)
        record.setdefault("job", sf.job)
        record.setdefault("rank", sf.rank)
        record["src"] = "%s:%d" % (sf.file_id, end)
        return (t, record)
