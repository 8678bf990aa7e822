"""Parked rows: a busy store folds its level tables every few seconds, not every flush.

Between folds the new rows wait in `<table>_levels_pending`; every chart query must
still see them (it reads them raw next to the level rows), a fold must end in the
same level rows as folding every flush, and rows parked by a process that stopped
without folding must be folded by the next one to write.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import cockpit.store.database as database
from cockpit.store import Store
from cockpit.store.downsample import downsample
from cockpit.store.schema import pending_table
from tests.store.test_levels import _check_split, _flushes, _ingest, _levels, _reference, _streams

TABLES = ("train", "gpu")


def _pending(store: Store, table: str) -> int:
    with store.cursor() as cur:
        return cur.execute(f'SELECT count(*) FROM "{pending_table(table)}"').fetchall()[0][0]


def _charts(store: Store) -> list[object]:
    """What the UI's charts ask for: whole runs, a zoomed range, and a replay cursor."""
    with store.cursor() as cur:
        return [
            downsample(cur, "train", "loss", buckets=50, where={"job": "j1", "rank": 1}),
            downsample(cur, "train", "loss", buckets=7, where={"job": "j1", "rank": 2},
                       x_range=(100, 700)),
            downsample(cur, "train", "loss", buckets=20, where={"job": "j1", "rank": 0},
                       until_ts=1_700_000_400.0),
            downsample(cur, "gpu", "util", x="ts", buckets=30, where={"host": "b", "gpu": 1}),
        ]


def _fill(tmp_path: Path, name: str, fold_interval: float) -> Store:
    store = Store(tmp_path / f"{name}.duckdb", fold_interval=fold_interval)
    for flush in _flushes(_streams()):
        _ingest(store, flush)
    return store


@pytest.mark.slow
def test_charts_see_parked_rows_and_a_late_fold_equals_folding_every_flush(
    tmp_path: Path,
) -> None:
    parked = _fill(tmp_path, "parked", math.inf)
    eager = _fill(tmp_path, "eager", 0)
    try:
        for table in TABLES:
            assert _pending(parked, table) > 100, table
            assert _pending(eager, table) == 0, table
        # The first flush folds (nothing folded yet); the rest are parked, but charts
        # read the same points as from a store that folded every flush.
        assert _charts(parked) == _charts(eager)
        assert _charts(eager)[0][0]  # the charts are not empty
        parked.fold_levels()
        for table in TABLES:
            assert _pending(parked, table) == 0, table
            assert _levels(parked, table) == _reference(parked, table) == _levels(eager, table)
            _check_split(parked, table)
        assert _charts(parked) == _charts(eager)
    finally:
        parked.close()
        eager.close()


@pytest.mark.slow
def test_rows_parked_by_a_writer_that_stopped_are_folded_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stopped.duckdb"
    flushes = list(_flushes(_streams()))
    store = Store(path, fold_interval=math.inf)
    for flush in flushes[:-1]:
        _ingest(store, flush)
    with monkeypatch.context() as patch:  # as if the process died before closing cleanly
        patch.setattr(Store, "_fold_all", lambda self: None)
        store.close()
    with Store(path, read_only=True) as reader:
        assert _pending(reader, "train") > 0
    with Store(path) as store:
        _ingest(store, flushes[-1])
        for table in TABLES:
            assert _pending(store, table) == 0, table
            assert _levels(store, table) == _reference(store, table), table


@pytest.mark.slow
def test_a_large_backlog_is_folded_without_waiting_for_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "FOLD_MAX_PENDING", 40)
    with Store(tmp_path / "backlog.duckdb", fold_interval=math.inf) as store:
        sizes = []
        for flush in _flushes(_streams()):
            _ingest(store, flush)
            sizes.append(_pending(store, "train"))
        assert max(sizes) < 40 + 150 * 2  # never more than one flush past the limit
        assert sizes.count(0) > 1  # folded more than once, with no time passing


@pytest.mark.slow
def test_a_flush_that_reaches_the_limit_is_folded_without_being_parked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog's flush goes straight from the load into the level tables: parking its
    rows only to read them back in the same transaction would cost a copy of each."""
    monkeypatch.setattr(database, "FOLD_MAX_PENDING", 1)
    parked: list[str] = []

    def park(cur: object, table: str, rows: object) -> int:
        parked.append(table)
        return 0

    monkeypatch.setattr(database, "defer_staged", park)
    monkeypatch.setattr(database, "defer_levels", park)
    with Store(tmp_path / "straight.duckdb", fold_interval=math.inf) as store:
        for flush in _flushes(_streams()):
            _ingest(store, flush)
        assert parked == []
        for table in TABLES:
            assert _levels(store, table) == _reference(store, table), table


@pytest.mark.slow
def test_closing_folds_what_is_parked(tmp_path: Path) -> None:
    path = tmp_path / "closed.duckdb"
    _fill(tmp_path, "closed", math.inf).close()
    with Store(path, read_only=True) as reader:
        for table in TABLES:
            assert _pending(reader, table) == 0, table
            assert _levels(reader, table) == _reference(reader, table), table
