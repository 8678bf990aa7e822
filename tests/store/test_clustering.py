"""Re-clustering the chart levels of a live recording without holding up ingest.

`Store.recluster_levels` copies a level table in chart order in a transaction of its own
while flushes go on, then swaps the copy in under the write lock. These tests run a flush
in the middle of the copy (by wrapping the copy step) and check that nothing it wrote is
lost, that a copy made stale by a late merge is dropped, and that closing the store
interrupts a rewrite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import cockpit.store.database as database
from cockpit.store import Store
from cockpit.store.downsample import downsample
from tests.store.wire import header, train, trains

LEVEL_ORDER = "level, job, rank, bucket"


def _levels(store: Store, order: str = LEVEL_ORDER) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute(f"SELECT * FROM train_levels ORDER BY {order}").fetchall()


def _in_table_order(store: Store) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute("SELECT level, job, rank, bucket FROM train_levels "
                           "ORDER BY rowid").fetchall()


def _tables(store: Store) -> set[str]:
    with store.cursor() as cur:
        return {r[0] for r in cur.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}


def _during_copy(monkeypatch: pytest.MonkeyPatch,
                 action: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
    """Run `action` right after the ordered copy of train_levels is written."""
    original = database.copy_clustered

    def copy(cur: duckdb.DuckDBPyConnection, table: str) -> None:
        original(cur, table)
        if table == "train":
            action(cur)

    monkeypatch.setattr(database, "copy_clustered", copy)


def _store(path: Path) -> Store:
    return Store(path, fold_interval=0.0)  # fold every flush: level rows close at once


@pytest.mark.slow
def test_level_tables_are_rewritten_only_once_they_have_grown_by_a_row_group(
    tmp_path: Path,
) -> None:
    """A rewrite costs the whole table: an hour that added a few thousand level rows
    must not cost a rewrite of a month's worth."""
    with _store(tmp_path / "c.duckdb") as store:
        store.ingest("h1", header() + trains(1, 2000))
        assert store.recluster_levels(min_new_rows=20) == ["train_levels"]  # others empty
        assert store.recluster_levels(min_new_rows=20) == []  # nothing new
        store.ingest("h1", trains(2001, 2100))  # a level-0 bucket or two: under the limit
        assert store.recluster_levels(min_new_rows=20) == []
        store.ingest("h1", trains(2101, 6000))  # 60 more finest buckets
        assert store.recluster_levels(min_new_rows=20) == ["train_levels"]
        keys = _in_table_order(store)
        assert keys == sorted(keys)  # the rewrite left the table in chart order


@pytest.mark.slow
def test_rows_closed_while_the_copy_is_written_are_kept_by_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _store(tmp_path / "ref.duckdb") as reference:
        reference.ingest("h1", header() + trains(1, 6000))
        expected = _levels(reference)
    with _store(tmp_path / "c.duckdb") as store:
        store.ingest("h1", header() + trains(1, 4000))
        copied = len(_levels(store))
        # A flush that closes level buckets commits while the copy's transaction is open.
        _during_copy(monkeypatch, lambda cur: store.ingest("h1", trains(4001, 6000)))
        assert store.recluster_levels() == ["train_levels"]
        assert _levels(store) == expected  # every row, each bucket once, none stale
        keys = _in_table_order(store)
        assert len(keys) > copied  # the flush did close buckets during the copy
        assert keys[:copied] == sorted(keys[:copied])  # the copy in chart order,
        assert keys[copied:] == sorted(keys[copied:])  # then what closed meanwhile
        assert "train_levels__clustered" not in _tables(store)
        with store.cursor() as cur:
            loss = downsample(cur, "train", "loss", buckets=10, where={"job": "j1"})
        with _store(tmp_path / "ref.duckdb") as reference, reference.cursor() as cur:
            assert loss == downsample(cur, "train", "loss", buckets=10, where={"job": "j1"})


def test_a_late_row_merged_during_the_copy_makes_it_stale_and_it_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relaunched run repeats steps: their rows merge into closed buckets in place,
    which a copy taken before the merge would undo."""
    # Steps 100-199 again (seqs 2001-2100), with another loss: buckets long closed.
    repeat = b"".join(train(2000 + i, 99 + i, loss=5.0) for i in range(1, 101))
    with _store(tmp_path / "ref.duckdb") as reference:
        reference.ingest("h1", header() + trains(1, 2000))
        reference.ingest("h1", repeat)
        expected = _levels(reference)
    with _store(tmp_path / "c.duckdb") as store:
        store.ingest("h1", header() + trains(1, 2000))
        _during_copy(monkeypatch, lambda cur: store.ingest("h1", repeat))
        assert store.recluster_levels() == []  # the stale copy was not swapped in
        assert _levels(store) == expected  # the merged values are there
        assert "train_levels__clustered" not in _tables(store)
        monkeypatch.undo()
        assert store.recluster_levels() == ["train_levels"]  # the next pass does it
        assert _levels(store) == expected


def test_closing_the_store_interrupts_a_rewrite_and_keeps_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()

    def endless(cur: duckdb.DuckDBPyConnection) -> None:
        started.set()
        cur.execute("SELECT count(*) FROM range(1000000000000)")  # until interrupted

    path = tmp_path / "c.duckdb"
    store = _store(path)
    store.ingest("h1", header() + trains(1, 2000))
    before = _levels(store)
    _during_copy(monkeypatch, endless)
    result: list[list[str]] = []
    worker = threading.Thread(target=lambda: result.append(store.recluster_levels()))
    worker.start()
    assert started.wait(60), "the rewrite never reached its copy"
    store.close()
    worker.join(60)
    assert not worker.is_alive() and result == [[]]
    with Store(path) as reopened:
        assert _levels(reopened) == before
        assert "train_levels__clustered" not in _tables(reopened)


def test_a_copy_left_by_an_interrupted_swap_is_dropped_when_the_store_opens(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.duckdb"
    with _store(path) as store:
        store.ingest("h1", header() + trains(1, 2000))
        with store.write_cursor() as cur:
            database.copy_clustered(cur, "train")
        assert "train_levels__clustered" in _tables(store)
    with Store(path) as store:
        assert "train_levels__clustered" not in _tables(store)
        assert len(_levels(store)) > 0


def test_a_level_table_written_with_a_primary_key_loses_it_when_rewritten(
    tmp_path: Path,
) -> None:
    """Stores written before the key was dropped carry it until their next rewrite."""
    with _store(tmp_path / "c.duckdb") as store:
        with store.write_cursor() as cur:
            ddl = database.schema.levels_ddl("train")
            cur.execute("DROP TABLE train_levels")
            cur.execute(ddl[:-1] + ", PRIMARY KEY (job, rank, level, bucket))")
        store.ingest("h1", header() + trains(1, 2000))

        def keys() -> list[tuple]:
            with store.cursor() as cur:
                return cur.execute(
                    "SELECT constraint_type FROM duckdb_constraints() "
                    "WHERE table_name = 'train_levels' AND constraint_type = 'PRIMARY KEY'"
                ).fetchall()

        assert keys() == [("PRIMARY KEY",)]
        rows = _levels(store)
        assert store.recluster_levels() == ["train_levels"]
        assert keys() == []
        assert _levels(store) == rows
