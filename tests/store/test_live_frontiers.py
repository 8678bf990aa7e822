"""A live reader finds each table's newest row from the previous frontier on, and its
answer is the whole table's: rows stamped in the past, and the newest rows deleted."""

from __future__ import annotations

from pathlib import Path

from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, gpu, train


def _fresh(store: Store) -> tuple[dict, dict]:
    found = StoreReader(store).frontiers(until_ts=None)
    return dict(found.ts), dict(found.rows)


def _same(reader: StoreReader, store: Store) -> None:
    found = reader.frontiers(until_ts=None)
    assert (dict(found.ts), dict(found.rows)) == _fresh(store)


def test_a_live_reader_answers_what_a_fresh_one_answers(tmp_path: Path) -> None:
    store = Store(tmp_path / "live.duckdb")
    try:
        reader = StoreReader(store)
        _same(reader, store)  # empty: no ts anywhere
        store.ingest("h1", b"".join(gpu(s, ts=TS0 + s) for s in range(1, 50)))
        _same(reader, store)
        store.ingest("h1", b"".join(gpu(s, ts=TS0 + s) for s in range(50, 60))
                     + train(60, 1, ts=TS0 + 59.5))
        _same(reader, store)
        assert reader.frontiers(until_ts=None).ts["gpu"] == TS0 + 59
        # A row stamped before the newest one (a host's clock behind): the newest stays.
        store.ingest("h2", gpu(1, ts=TS0 + 10))
        _same(reader, store)
        assert reader.frontiers(until_ts=None).ts["gpu"] == TS0 + 59
        # The newest rows deleted (as a repair or retention may): asked again whole.
        with store.cursor() as cur:
            cur.execute("DELETE FROM gpu WHERE ts >= ?", [TS0 + 55])
            cur.execute("DELETE FROM train")
        _same(reader, store)
        found = reader.frontiers(until_ts=None)
        assert found.ts["gpu"] == TS0 + 54 and found.ts["train"] is None
        assert found.rows["train"] == 0
        # Rows again after that, and a replay's cursor in between: still the same.
        store.ingest("h1", gpu(70, ts=TS0 + 70))
        reader.frontiers(until_ts=TS0 + 20)
        _same(reader, store)
        assert reader.frontiers(until_ts=None).ts["gpu"] == TS0 + 70
    finally:
        store.close()
