"""A full disk under the recording is the store's failure, never a host's.

DuckDB 2.0 reports a write-ahead log it cannot write as a TransactionException raised at
COMMIT ("Failed to commit: Could not write file ...wal: No space left on device"), not as
an IOException. Such a flush must raise (no host's lines are blamed, none stored on the
slow host-by-host path), the writer must keep every line queued for the next flush, and
the operator must be told the disk is full. A fault of one host's own lines (whose
message may quote anything that host sent) stays that host's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from cockpit.sessions.live import LiveSession
from cockpit.store import Store
from cockpit.store import database as database_module
from cockpit.store.database import store_failure
from cockpit.store.writer import HostStoreError, StoreWriter
from tests.store.wire import count, header, trains

HOSTS = [f"h{i}" for i in range(8)]


def _full_message(path: Path) -> str:
    """What DuckDB 2.0.1 says when the WAL cannot be written (seen on a full tmpfs)."""
    return (f'TransactionContext Error: Failed to commit: Could not write file '
            f'"{path}.wal": No space left on device')


class _Disk:
    """A disk with room for `room` more train rows (None: unbounded): a commit that
    would pass it fails as DuckDB's does on a full disk (the write-ahead log is written
    at COMMIT, and the failed commit leaves nothing of its transaction). Every commit
    attempted is counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path,
                 room: int | None = 0) -> None:
        self.room = room
        self.commits = 0
        self.path = path

        @contextlib.contextmanager
        def transaction(cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
            cur.execute("BEGIN")
            before = _train_rows(cur)
            try:
                yield
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self.commits += 1
            added = _train_rows(cur) - before
            if self.room is not None and added > self.room:
                cur.execute("ROLLBACK")
                raise duckdb.TransactionException(_full_message(self.path))
            cur.execute("COMMIT")
            if self.room is not None:
                self.room -= added

        monkeypatch.setattr(database_module, "_transaction", transaction)

    def free(self) -> None:
        self.room = None


def _train_rows(cur: duckdb.DuckDBPyConnection) -> int:
    row = cur.execute("SELECT count(*) FROM train").fetchone()
    return int(row[0]) if row else 0


def _round(writer: StoreWriter, first: int, last: int) -> None:
    for host in HOSTS:
        writer.put(host, (header(f"J{host}") if first == 1 else b"") + trains(first, last))


def test_the_commit_failure_of_a_full_disk_is_classified_as_the_stores() -> None:
    path = Path("/data/run.duckdb")
    assert store_failure(duckdb.TransactionException(_full_message(path)))
    assert store_failure(duckdb.TransactionException(
        "TransactionContext Error: Failed to commit: Could not fsync file"))
    assert store_failure(duckdb.IOException('Could not write file "x": Read-only file system'))
    assert store_failure(duckdb.Error("Could not write file: disk full"))
    assert store_failure(OSError(28, "No space left on device"))
    # A host's data at fault, whatever its message quotes.
    assert not store_failure(duckdb.ConversionException(
        "Could not convert string 'No space left on device' to INT64"))
    assert not store_failure(duckdb.InvalidInputException(
        "Malformed JSON: Could not write file read-only"))
    assert not store_failure(duckdb.TransactionException(
        "TransactionContext Error: Failed to commit: PRIMARY KEY or UNIQUE constraint "
        "violated: duplicate key \"h1\""))
    assert not store_failure(ValueError("No space left on device"))


def test_a_full_disk_at_commit_raises_and_blames_no_host(
        store: Store, tmp_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Room for one host's lines alone (as on the real disk): that must not make the
    # others' failures look like their own.
    disk = _Disk(monkeypatch, tmp_store_path, room=20)
    with pytest.raises(duckdb.TransactionException, match="No space left on device"):
        store.ingest_many([(host, header(f"J{host}") + trains(1, 20)) for host in HOSTS])
    assert disk.commits == 1  # not again line by line, nor once per host
    assert all(store.high_water(host) == 0 for host in HOSTS)
    assert count(store, "train") == 0
    disk.free()
    result = store.ingest_many([(host, header(f"J{host}") + trains(1, 20)) for host in HOSTS])
    assert result.failed == () and result.stored == 8 * 20


def test_the_writer_keeps_every_line_of_a_full_disk_and_blames_no_host(
        store: Store, tmp_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=60.0, on_error=errors.append)
    _round(writer, 1, 10)
    writer.flush()
    disk = _Disk(monkeypatch, tmp_store_path, room=10)  # one host's lines would fit
    _round(writer, 11, 20)
    assert writer.flush() is None
    assert disk.commits == 1
    assert not any(isinstance(e, HostStoreError) for e in errors), errors
    (error,) = errors
    assert isinstance(error, duckdb.TransactionException)
    assert "No space left on device" in str(error)
    assert writer.backlog_lines == 8 * 10  # all kept for the next flush
    assert all(store.high_water(host) == 10 for host in HOSTS)
    _round(writer, 21, 25)
    assert writer.flush() is None and disk.commits == 2  # still one flush for all hosts
    assert not any(isinstance(e, HostStoreError) for e in errors)
    disk.free()  # space freed: everything queued goes in, in order, at once
    result = writer.flush()
    assert result is not None and result.stored == 8 * 15 and result.failed == ()
    assert disk.commits == 3
    assert all(store.high_water(host) == 25 for host in HOSTS)
    assert count(store, "train") == 8 * 25 and writer.backlog_lines == 0


def test_a_live_session_says_the_disk_is_full_and_names_no_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = LiveSession([], tmp_path / "live.duckdb")
    try:
        disk = _Disk(monkeypatch, session.store_path, room=5)  # one host's lines fit
        for host in HOSTS:
            session.writer.put(host, trains(1, 5))
        session.writer.flush()
        problem = session.store_problem()
        assert problem is not None and "No space left on device" in problem
        assert "TransactionException" in problem
        assert not any(f"host {host}" in problem for host in HOSTS)
        (alert,) = [a for a in session.source.snapshot().alerts if a.code == "store-write"]
        assert alert.severity == "critical" and "free space" in alert.hint
        disk.free()
        session.writer.flush()
        assert all(session.store.high_water(host) == 5 for host in HOSTS)
        assert session.store_problem() is None
    finally:
        session.stop()


def test_a_host_whose_data_error_quotes_a_full_disk_is_still_blamed_alone(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The words of a full disk in a conversion error (the host's value quoted) must not
    make one host's bad lines hold up every other host's flush."""
    real = database_module.load_type

    def load_type(cur, checker, scratch, wire_type, pieces, filings=()):
        if any(p.host == "bad" for p in pieces):
            raise duckdb.ConversionException(
                "Could not convert string 'No space left on device' to INT64")
        return real(cur, checker, scratch, wire_type, pieces, filings)

    monkeypatch.setattr(database_module, "load_type", load_type)
    result = store.ingest_many([("bad", trains(1, 3)), ("good", trains(1, 3))])
    assert dict(result.failed).keys() == {"bad"}
    assert store.high_water("good") == 3 and store.high_water("bad") == 0


# -- a real full file system ---------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: only root may mount one (a container may refuse even root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount(8) here to make a small file system")
    if os.geteuid() != 0:
        pytest.skip("mounting a 3 MiB tmpfs to fill needs root; the full disk is "
                    "tested without a mount in the other tests of this file")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mounting a 3 MiB tmpfs is not permitted here "
                    f"({done.stderr.strip() or done.returncode}); the full disk is "
                    "tested without a mount in the other tests of this file")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def test_a_real_full_disk_blames_no_host_and_loses_no_line(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1 << 20))  # freed below, as an operator would
    errors: list[Exception] = []
    with Store(small_disk / "r.duckdb") as store:
        writer = StoreWriter(store, interval=60.0, on_error=errors.append)
        stored = 0
        for _ in range(100):
            _round(writer, stored + 1, stored + 500)
            writer.flush()
            if errors:
                break
            stored += 500
        assert errors, "the 3 MiB file system never filled"
        assert not any(isinstance(e, HostStoreError) for e in errors), errors
        assert any("No space left on device" in str(e) for e in errors), errors
        assert writer.backlog_lines == 8 * 500  # the flush that failed: all kept
        assert [store.high_water(host) for host in HOSTS] == [stored] * 8
        filler.unlink()
        result = writer.flush()
        assert result is not None and result.failed == ()
        assert [store.high_water(host) for host in HOSTS] == [stored + 500] * 8
        assert count(store, "train") == 8 * (stored + 500)
        assert writer.backlog_lines == 0
