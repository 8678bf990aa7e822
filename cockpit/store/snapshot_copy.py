"""A consistent copy of a recording that this process is writing, for a reader elsewhere.

DuckDB lets one process open a file for writing and no other process open it at all
while it does, so a second terminal's `cockpit report` cannot read the recording of a
running `cockpit watch`. The live process can: it copies what is committed into a new
DuckDB file with DuckDB's own `COPY FROM DATABASE` (tables, views, sequences and
indexes, in DuckDB's format, so the copy is a recording like any other) and the reader
opens the copy read-only (`cockpit.store.live_socket` carries the request).

The copy is one transaction: its snapshot is taken under the store's write lock (no
flush half done; `Store` flushes in transactions anyway), then the lock is let go, so
flushes go on while the rows are copied and the copy holds exactly what was committed
at that moment (DuckDB's MVCC keeps the old versions for it).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from cockpit.store.database import Store, StoreError


@dataclass(frozen=True)
class CopyResult:
    path: Path
    bytes: int
    seconds: float


class SnapshotCopier:
    """Copies `store` on request, one copy at a time; `interrupt()` stops one in
    progress (the session is ending)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._busy = threading.Lock()
        self._cur: duckdb.DuckDBPyConnection | None = None
        self._stopped = False

    def copy(self, dest: Path) -> CopyResult:
        """Write what is committed now to `dest`, a file that must not exist yet.
        Raises StoreError saying why, and leaves no partial `dest` behind."""
        dest = Path(dest)
        if dest.exists() or Path(f"{dest}.wal").exists():
            raise StoreError(f"{dest} exists already: a snapshot goes to a new file")
        started = time.monotonic()
        with self._busy:
            if self._stopped:
                raise StoreError("the live session is ending: no snapshot")
            try:
                self._copy(dest)
            except (duckdb.Error, StoreError) as exc:
                for leftover in (dest, Path(f"{dest}.wal")):
                    with contextlib.suppress(OSError):
                        leftover.unlink()
                if isinstance(exc, StoreError):
                    raise
                first = str(exc).split("\n", 1)[0]
                raise StoreError(f"copying {self._store.path} failed: {first}") from None
        return CopyResult(dest, dest.stat().st_size, time.monotonic() - started)

    def _copy(self, dest: Path) -> None:
        alias = f"cockpit_snapshot_{secrets.token_hex(6)}"
        quoted = str(dest).replace("'", "''")
        with self._store.read_cursor() as cur:
            source = cur.execute("SELECT current_database()").fetchall()[0][0]
            cur.execute(f"ATTACH '{quoted}' AS {alias}")
            try:
                # The store's own lock (this package's): no flush is between its
                # statements when the transaction's snapshot is taken.
                with self._store._lock:
                    cur.execute("BEGIN")
                    cur.execute("SELECT count(*) FROM schema_version").fetchall()
                self._cur = cur
                try:
                    name = str(source).replace('"', '""')
                    cur.execute(f'COPY FROM DATABASE "{name}" TO {alias}')
                    cur.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(duckdb.Error):
                        cur.execute("ROLLBACK")
                    raise
                finally:
                    self._cur = None
            finally:
                with contextlib.suppress(duckdb.Error):
                    cur.execute(f"DETACH {alias}")

    def interrupt(self) -> None:
        """No more copies; one in progress is interrupted (its caller gets StoreError)."""
        self._stopped = True
        # An interrupt stops only the statement running at that moment: repeated until
        # the copy in progress has given up and cleaned up.
        while not self._busy.acquire(timeout=0.05):
            cur = self._cur
            if cur is not None:
                with contextlib.suppress(duckdb.Error):
                    cur.interrupt()
        self._busy.release()
