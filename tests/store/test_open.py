"""Opening recordings: migrations, version checks, read-only behaviour, file locks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from cockpit.store import (
    Store,
    StoreError,
    StoreLockedError,
    StoreReadOnlyError,
    StoreVersionError,
    schema,
)
from tests.store.wire import count, header, trains


def test_new_file_gets_every_table_and_the_schema_version(tmp_store_path: Path) -> None:
    with Store(tmp_store_path) as store, store.cursor() as cur:
        tables = {r[0] for r in cur.execute("SHOW TABLES").fetchall()}
        versions = cur.execute("SELECT version FROM schema_version").fetchall()
    expected = {*schema.RECORD_COLUMNS, "other", "hosts", "wire_errors", "gpu_rollup",
                "host_sample_rollup", *(schema.levels_table(t) for t in schema.LEVEL_SERIES)}
    assert expected <= tables
    assert versions == [(schema.SCHEMA_VERSION,)]


def test_an_empty_file_becomes_a_new_recording(tmp_store_path: Path) -> None:
    """`touch rec.duckdb; cockpit watch … --store rec.duckdb`: nothing in it to keep."""
    tmp_store_path.write_bytes(b"")
    with Store(tmp_store_path) as store:
        store.ingest("h1", header() + trains(1, 3))
        assert store.high_water("h1") == 3


def test_reopening_keeps_data_and_high_water(tmp_store_path: Path) -> None:
    with Store(tmp_store_path) as store:
        store.ingest("a", header() + trains(1, 5))
    with Store(tmp_store_path) as store:
        assert store.high_water("a") == 5
        assert count(store, "train") == 5
        assert count(store, "schema_version") == 1


def test_a_version_1_recording_is_upgraded_and_keeps_its_data(tmp_store_path: Path) -> None:
    con = duckdb.connect(str(tmp_store_path))
    for ddl in schema.MIGRATIONS[0]:
        con.execute(ddl)
    con.execute("INSERT INTO schema_version VALUES (1)")
    con.execute("INSERT INTO hosts (host, high_water) VALUES ('a', 5)")
    con.close()
    with pytest.raises(StoreVersionError, match="without read-only to upgrade"):
        Store(tmp_store_path, read_only=True)
    with Store(tmp_store_path) as store:
        store.ingest("a", header() + trains(1, 8))
        assert count(store, "train") == 3  # seqs 6..8: 1..5 count as stored
        assert count(store, "schema_version", f"version = {schema.SCHEMA_VERSION}") == 1
        assert count(store, schema.pending_table("train")) == 0  # the table exists, folded


def test_a_version_2_recording_replays_as_it_is_and_is_upgraded_by_a_writer(
    tmp_store_path: Path,
) -> None:
    """What version 3 added (the filed runs) only the writer needs: a replay or report of
    a recording made by the previous version opens it read-only, unchanged."""
    con = duckdb.connect(str(tmp_store_path))
    for ddl in [*schema.MIGRATIONS[0], *schema.MIGRATIONS[1]]:
        con.execute(ddl)
    con.execute("INSERT INTO schema_version VALUES (2)")
    con.execute("INSERT INTO hosts (host, high_water) VALUES ('a', 5)")
    con.close()
    with Store(tmp_store_path, read_only=True) as store:
        assert store.high_water("a") == 5
    assert count_version(tmp_store_path) == 2
    with Store(tmp_store_path) as store:
        store.ingest("a", header() + trains(1, 8))
        assert count(store, "train") == 3
    assert count_version(tmp_store_path) == schema.SCHEMA_VERSION


def count_version(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0])
    finally:
        con.close()


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_store_path: Path) -> None:
    Store(tmp_store_path).close()
    con = duckdb.connect(str(tmp_store_path))
    con.execute("UPDATE schema_version SET version = $v", {"v": schema.SCHEMA_VERSION + 1})
    con.close()
    with pytest.raises(StoreVersionError, match="newer cockpit"):
        Store(tmp_store_path)


def test_a_duckdb_file_that_is_no_recording_is_named_so_and_left_untouched(
        tmp_path: Path) -> None:
    other = tmp_path / "sales.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE orders (id INTEGER)")
    con.close()
    for read_only in (True, False):  # replay / report, and watch --store
        with pytest.raises(StoreVersionError, match=r"not a cockpit recording \(it holds "
                                                    r"orders\)"):
            Store(other, read_only=read_only)
    con = duckdb.connect(str(other), read_only=True)
    assert [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables")
            .fetchall()] == ["orders"]  # no cockpit table was added to it
    con.close()
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    with pytest.raises(StoreVersionError, match="empty DuckDB database"):
        Store(empty, read_only=True)
    Store(empty).close()  # a new, empty file is fine to record into


def test_read_only_refuses_writes(tmp_store_path: Path) -> None:
    with Store(tmp_store_path) as store:
        store.ingest("a", trains(1, 3))
    with Store(tmp_store_path, read_only=True) as store:
        assert store.high_water("a") == 3
        with pytest.raises(StoreReadOnlyError):
            store.ingest("a", trains(4, 5))
        with pytest.raises(StoreReadOnlyError):
            store.set_host_state("a", "streaming", "ok")


def test_read_only_of_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nope.duckdb", read_only=True)


def test_read_only_while_another_process_writes_names_the_file(tmp_store_path: Path) -> None:
    Store(tmp_store_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, duckdb
            con = duckdb.connect({str(tmp_store_path)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError) as err:
            Store(tmp_store_path, read_only=True)
        assert str(tmp_store_path) in str(err.value)
        assert "another process" in str(err.value)
        assert f"{tmp_store_path.name}.wal" in str(err.value)
        # The holder as "(PROGRAM (PID n))", no link, parentheses balanced.
        said = str(err.value)
        assert f"(PID {holder.pid}))" in said and "See also" not in said
        assert said.count("(") == said.count(")")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def test_a_copy_with_its_log_holds_every_committed_row_of_a_live_writer(
    tmp_path: Path,
) -> None:
    """What the locked-file error tells a user to do: the newest rows are still in the
    write-ahead log, so a copy of the file alone would miss them."""
    live, copy = tmp_path / "live.duckdb", tmp_path / "copy.duckdb"
    with Store(live) as writer:
        writer.ingest("h1", header() + trains(1, 500))
        assert Path(f"{live}.wal").exists()
        copy.write_bytes(live.read_bytes())
        Path(f"{copy}.wal").write_bytes(Path(f"{live}.wal").read_bytes())
        with Store(copy, read_only=True) as reader:
            assert count(reader, "train") == 500


def test_host_state_is_recorded(store: Store) -> None:
    store.set_host_state("a", "connecting", "dialing", address="10.0.0.1")
    store.set_host_state("a", "streaming", "ok")
    (row,) = store.hosts()
    assert (row.host, row.address, row.state, row.detail) == ("a", "10.0.0.1", "streaming", "ok")
    assert row.state_ts is not None
    store.set_host_state("a", "unreachable", "connection lost", ts=1_800_000_000.5)
    (row,) = store.hosts()  # on a recording's own clock where one is given
    assert (row.state, row.state_ts) == ("unreachable", 1_800_000_000.5)


def test_a_writers_duckdb_memory_is_capped_and_a_readers_is_not(tmp_store_path: Path) -> None:
    """A cockpit open for days must not let DuckDB's buffer pool grow to 80 % of a small
    VM's memory (`bench/memory.py` measures it on a long recording)."""
    from cockpit.store.database import WRITER_MEMORY_MAX, writer_memory_limit

    assert writer_memory_limit(64 << 30) == WRITER_MEMORY_MAX == 512 << 20
    assert writer_memory_limit(1 << 30) == 256 << 20  # a quarter of a small machine
    with Store(tmp_store_path) as store, store.cursor() as cur:
        limit = cur.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit == f"{writer_memory_limit() >> 20}.0 MiB", limit
    with Store(tmp_store_path, read_only=True) as reader, reader.cursor() as cur:
        limit = cur.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit != f"{writer_memory_limit() >> 20}.0 MiB", limit  # a report's is DuckDB's
