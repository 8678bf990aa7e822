"""Append-only NDJSON spool files of one trainer rank, with size-capped rotation.

The agent daemon tails these files while the trainer writes them, so the contract is
strict: every file starts with a header line naming a random `file_id`; a file is never
rewritten, truncated or reused; lines are only appended whole (a reader that meets a
line without its newline waits for it). A new file begins at every process start and
whenever the current one has passed the size cap. File layout:

    RUN_DIR/spool/JOB/rank-R.<file_id>.ndjson
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from typing import Any, List, Optional

from agent.hook.lazy_values import INT64_MAX, INT64_MIN
from agent.wire import paths
from agent.wire.protocol import SPOOL_HEADER, SPOOL_VERSION

DEFAULT_MAX_FILE_BYTES = 64 << 20


def spool_dir(run_dir: str, job: str) -> str:
    return str(paths.spool_dir(run_dir, job))


class SpoolWriter:
    """Owns the current spool file of one (job, rank) in this process."""

    def __init__(
        self,
        run_dir: str,
        job: str,
        rank: int,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        if max_file_bytes <= 0:
            raise ValueError("max_file_bytes must be positive, got %r" % (max_file_bytes,))
        self.directory = spool_dir(run_dir, job)
        self.job = job
        self.rank = rank
        self.max_file_bytes = max_file_bytes
        self.part = -1
        self.path: str = ""
        self.file_id: str = ""
        self._fd: Optional[int] = None
        self._size = 0
        self._torn = False
        os.makedirs(self.directory, exist_ok=True)
        self._open_next()

    def _open_next(self) -> None:
        self._close_fd()
        self.part += 1
        self.file_id = uuid.uuid4().hex
        self.path = str(paths.spool_file(self.directory, self.rank, self.file_id))
        # O_EXCL: a file id names exactly one file, never an older one reused.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._size = 0
        self._torn = False
        header = {
            "t": SPOOL_HEADER,
            "v": SPOOL_VERSION,
            "file_id": self.file_id,
            "job": self.job,
            "rank": self.rank,
            "pid": os.getpid(),
            "ts": time.time(),
            "part": self.part,
        }
        self._write_all((json.dumps(header, separators=(",", ":")) + "\n").encode("utf-8"))

    def write_lines(self, lines: List[bytes]) -> None:
        """Append complete newline-terminated lines; rotate once the file passed the cap."""
        if not lines:
            return
        if self._fd is None:
            raise ValueError("spool file %s is closed" % self.path)
        if self._torn:
            # The last write failed part-way (disk full...): its partial line must not
            # be glued to the next one, so continue in a fresh file.
            self._open_next()
        self._write_all(b"".join(lines))
        if self._size >= self.max_file_bytes:
            self._open_next()

    def _write_all(self, data: bytes) -> None:
        fd = self._fd
        if fd is None:
            raise ValueError("spool file %s is closed" % self.path)
        view = memoryview(data)
        while view:
            try:
                written = os.write(fd, view)
            except OSError:
                self._torn = len(view) != len(data)
                raise
            view = view[written:]
            self._size += written

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_fd()


_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str
).encode


# Nineteen digits in a row: the shortest integer outside the 64-bit range (2**63) has
# them, a float's repr never does; a match in a string only costs the slower encoding.
_LONG_DIGITS = re.compile(r"\d{19}")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode_line(record: dict) -> bytes:
    """One spool line: `t` first (the caller builds the dict in that order).

    JSON has no NaN/Inf: a record holding one (in a config, in event data) is written
    with null there, the protocol's "n/a". So is an integer outside the 64-bit range,
    which the cockpit reads as a double (10**400: infinity, and the line is lost).
    """
    try:
        text = _encode(record)
    except ValueError:  # NaN/Inf, or an integer too long for str()
        text = _encode(_finite(record))
    else:
        if _LONG_DIGITS.search(text):
            text = _encode(_finite(record))
    return (text + "\n").encode("utf-8")
