"""The spool lines the agent refused, kept for inspection in a bounded ring.

A refused trainer spool line (agent.journal.spool, agent.wire.record_check) is reported as a
`spool_error` event, which names it; the line itself is kept here so that whoever looks
into it can see exactly what the trainer wrote. The ring is two files in the state dir:
`spool_rejects.ndjson` and, once that would pass `max_bytes`, its older half
`spool_rejects.1.ndjson`, so a trainer writing garbage costs at most twice `max_bytes`.
Each entry is one JSON line (ASCII: control characters in the raw line are escaped, so
reading the file in a terminal interprets nothing).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

REJECTS_FILE = "spool_rejects.ndjson"
OLDER_FILE = "spool_rejects.1.ndjson"
MAX_BYTES = 4 << 20  # per half of the ring
KEEP_RAW = 8192  # bytes of a refused line kept


class RejectRing:
    """Entries are gathered while a poll reads, and written once at its end (`flush`)."""

    def __init__(self, state_dir: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(state_dir) / REJECTS_FILE
        self.older = Path(state_dir) / OLDER_FILE
        self.max_bytes = max_bytes
        self._pending: List[bytes] = []

    def add(self, facts: Dict[str, object], raw: bytes) -> None:
        """Keep one refused line; `facts` name its source (file, line, job, rank, why)."""
        entry = {"ts": time.time(), **facts, "bytes": len(raw),
                 "raw": raw[:KEEP_RAW].decode("utf-8", "backslashreplace")}
        self._pending.append((json.dumps(entry) + "\n").encode("ascii"))

    def mark(self) -> int:
        return len(self._pending)

    def drop_after(self, mark: int) -> None:
        """Forget the entries added since `mark` (their read is undone)."""
        del self._pending[mark:]

    def flush(self) -> Optional[str]:
        """Write the gathered entries; None, or why they could not be kept."""
        lines, self._pending = self._pending, []
        if not lines:
            return None
        try:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            chunk: List[bytes] = []
            for line in lines:
                if size and size + len(line) > self.max_bytes:
                    self._append(chunk)
                    chunk = []
                    os.replace(str(self.path), str(self.older))
                    size = 0
                chunk.append(line)
                size += len(line)
            self._append(chunk)
        except OSError as exc:
            return "cannot write %s: %s" % (self.path, exc)
        return None

    def _append(self, chunk: List[bytes]) -> None:
        if chunk:
            with open(str(self.path), "ab") as f:
                f.write(b"".join(chunk))
