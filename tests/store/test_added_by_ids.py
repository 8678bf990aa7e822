"""A live reader finds the rows stored between two refreshes by the ids DuckDB gave them
(`ReaderBase.added_after`): late ones and a host's backlog alike, and never rows that a
checkpoint numbered again after deletes, which it reads in full instead."""

from __future__ import annotations

from pathlib import Path

from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_frontiers import Frontiers
from tests.store.wire import TS0, gpu

ROWS = 400_000
GROUP = 122_880  # DuckDB's rows per row group


def _insert(store: Store, first: int, count: int) -> None:
    """`count` GPU rows of host h1 numbered from `first`, a hundredth of a second
    apart (by SQL: a store this size by the wire would take a minute)."""
    with store.cursor() as cur:
        cur.execute("INSERT INTO gpu (host, seq, ts, gpu, util) SELECT 'h1', i, "
                    "? + i / 100, i % 8, 50.0 FROM range(?, ?) AS r(i)",
                    [TS0, first, first + count])


def _added(reader: StoreReader, before: Frontiers,
           now: Frontiers) -> list[tuple[str, int]] | None:
    after = reader.added_after("gpu", before, now)
    if after is None:
        return None
    rows = reader.added_rows("gpu", after, None, now)
    return None if rows is None else sorted((r["host"], r["seq"]) for r in rows)


def test_late_rows_and_a_backlog_are_the_rows_added(tmp_path: Path) -> None:
    with Store(tmp_path / "ids.duckdb") as store:
        reader = StoreReader(store)
        store.ingest("h1", b"".join(gpu(s, ts=TS0 + s) for s in range(1, 100)))
        before = reader.frontiers()
        # h2 sends what it sampled a minute ago (a backlog), h1 its next second.
        store.ingest("h2", b"".join(gpu(s, ts=TS0 + 30 + s) for s in range(1, 5)))
        store.ingest("h1", gpu(100, ts=TS0 + 100))
        now = reader.frontiers()
        assert _added(reader, before, now) == [("h1", 100), *(("h2", s) for s in range(1, 5))]
        # Nothing stored since: the next refresh's rows are none.
        assert _added(reader, now, reader.frontiers()) == []


def test_rows_numbered_again_after_deletes_are_not_taken_for_added_ones(
        tmp_path: Path) -> None:
    """Retention deletes the older part of a row group, the checkpoint after it merges
    that group with the next two (numbering every later row again), and as many rows
    and ten more are stored: the table grew by ten, and ten rows lie past the old
    newest id, but they are not the ten stored."""
    with Store(tmp_path / "renumbered.duckdb") as store:
        _insert(store, 0, ROWS)
        with store.cursor() as cur:
            cur.execute("CHECKPOINT")
        reader = StoreReader(store)
        reader.frontiers()
        before = reader.frontiers()  # the newest row named (the first probe named it)
        assert before.ids["gpu"] == ROWS - 1
        deleted = 200_000 - GROUP  # groups 1 to 3 then hold 200,000 rows: two groups' worth
        with store.cursor() as cur:
            cur.execute("DELETE FROM gpu WHERE seq >= ? AND seq < ?", [GROUP, GROUP + deleted])
            cur.execute("CHECKPOINT")
        _insert(store, ROWS, deleted + 10)
        now = reader.frontiers()
        assert now.rows["gpu"] - before.rows["gpu"] == 10
        # What makes the case (DuckDB 2.0 merges the three groups): the rows were
        # numbered again, by as many as were deleted, so the count and the ids past the
        # old newest agree on ten rows, and only the old newest row's name tells. A
        # DuckDB that kept the ids would leave 77,130 rows past it: the count tells.
        renumbered = now.ids["gpu"] - before.ids["gpu"] == 10
        assert renumbered or now.ids["gpu"] - before.ids["gpu"] == deleted + 10
        assert _added(reader, before, now) is None
        # A fresh start from there: the held answer is read in full and right.
        latest = reader.latest_gpus(frontiers=now)
        assert latest == StoreReader(store).latest_gpus(frontiers=now)
