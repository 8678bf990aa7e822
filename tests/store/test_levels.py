"""Chart levels kept flush by flush equal levels aggregated from the raw rows in one go.

A flush merges into each series' open bucket and appends closed buckets; late rows,
flushes spanning bucket boundaries, several hosts per flush and restarts between
flushes must all end in the same level rows as a single aggregation over every raw row.
A usual flush must not read the closed-bucket table at all, whatever its size: checked
on the query plans DuckDB actually ran, not on timings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import cockpit.store.database as database
from cockpit.store import Store
from cockpit.store.schema import (
    LEVEL_BASE_BITS,
    LEVEL_BITS,
    LEVEL_COUNT,
    LEVEL_SERIES,
    levels_open_table,
    levels_relation,
    levels_table,
)
from tests.store.wire import TS0, gpu, header, train

_NULL_KEY = {"VARCHAR": "''", "INTEGER": "-1"}


def _reference_sql(table: str) -> str:
    """Every level row of `table`, aggregated straight from its raw rows."""
    spec = LEVEL_SERIES[table]
    keys: dict[str, str] = spec["keys"]  # type: ignore[assignment]
    x = f'"{spec["x"]}"::DOUBLE'
    values = ", ".join(
        f'min("{c}"::DOUBLE), max("{c}"::DOUBLE), '
        f'arg_max("{c}"::DOUBLE, {x}) FILTER (WHERE "{c}" IS NOT NULL), '
        f'max({x}) FILTER (WHERE "{c}" IS NOT NULL)'
        for c in spec["columns"]  # type: ignore[attr-defined]
    )
    key_cols = ", ".join(f'coalesce("{k}", {_NULL_KEY[t]}) AS "{k}"' for k, t in keys.items())
    groups = ", ".join(f'"{k}"' for k in keys)
    return (
        f"SELECT {key_cols}, l AS level, "
        f"floor({x} / {1 << LEVEL_BASE_BITS})::BIGINT >> ({LEVEL_BITS} * l) AS bucket, "
        f"count(*), min({x}), max({x}), max(ts), {values} "
        f'FROM "{table}", range({LEVEL_COUNT}) AS lv(l) WHERE {x} IS NOT NULL '
        f"GROUP BY {groups}, level, bucket ORDER BY ALL"
    )


def _levels(store: Store, table: str) -> list[tuple[Any, ...]]:
    with store.cursor() as cur:
        return cur.execute(f"SELECT * FROM {levels_relation(table)} ORDER BY ALL").fetchall()


def _reference(store: Store, table: str) -> list[tuple[Any, ...]]:
    with store.cursor() as cur:
        return cur.execute(_reference_sql(table)).fetchall()


def _check_split(store: Store, table: str) -> None:
    """One open row per series and level, holding its newest bucket; the rest closed."""
    keys = ", ".join(f'"{k}"' for k in LEVEL_SERIES[table]["keys"])  # type: ignore[union-attr]
    match = " AND ".join(f'c."{k}" = o."{k}"' for k in [*LEVEL_SERIES[table]["keys"], "level"])  # type: ignore[misc]
    with store.cursor() as cur:
        dup = cur.execute(
            f'SELECT count(*) FROM (SELECT {keys}, level FROM "{levels_open_table(table)}" '
            "GROUP BY ALL HAVING count(*) > 1)").fetchall()[0][0]
        newer = cur.execute(
            f'SELECT count(*) FROM "{levels_table(table)}" c JOIN '
            f'"{levels_open_table(table)}" o ON {match} WHERE c.bucket >= o.bucket'
        ).fetchall()[0][0]
        orphan = cur.execute(
            f'SELECT count(*) FROM "{levels_table(table)}" c WHERE NOT EXISTS '
            f'(SELECT 1 FROM "{levels_open_table(table)}" o WHERE {match})').fetchall()[0][0]
    assert (dup, newer, orphan) == (0, 0, 0), table


def _streams() -> dict[str, list[bytes]]:
    """Per host: train for two ranks (some losses missing), gpu for two GPUs."""
    streams: dict[str, list[bytes]] = {}
    for h, host in enumerate(("a", "b")):
        lines, seq = [header()], 0
        for step in range(0, 900, 3):
            for rank in (0, 1):
                seq += 1
                loss = None if step % 7 == 0 else float((step * 13 + rank + h) % 101)
                lines.append(train(seq, step, loss=loss, rank=rank + 2 * h,
                                   ts=TS0 + step + 0.1 * rank))
            seq += 1
            lines.append(gpu(seq, index=seq % 2, util=float((seq * 7 + h) % 100),
                             ts=TS0 + step * 10.0 + seq % 2))
        streams[host] = lines
    return streams


_SIZES = (1, 2, 40, 7, 150, 1, 64, 100, 3, 30)


def _flushes(streams: dict[str, list[bytes]]) -> Iterator[list[tuple[str, bytes]]]:
    """The streams cut into flushes of varying sizes; some with one host, some with both."""
    pos = dict.fromkeys(streams, 0)
    i = 0
    while any(pos[h] < len(streams[h]) for h in streams):
        size = _SIZES[i % len(_SIZES)]
        hosts = list(streams) if i % 3 else [list(streams)[i // 3 % 2]]
        flush = []
        for host in hosts:
            lines = streams[host][pos[host]:pos[host] + size]
            pos[host] += len(lines)
            if lines:
                flush.append((host, b"".join(lines)))
        if flush:
            yield flush
        i += 1


def _ingest(store: Store, flush: list[tuple[str, bytes]]) -> None:
    if len(flush) == 1:
        store.ingest(*flush[0])
    else:
        store.ingest_many(flush)


@pytest.mark.slow
@pytest.mark.parametrize("reopen_every", [None, 4], ids=["one_store", "reopened"])
def test_levels_after_many_flushes_equal_levels_built_in_one_go(
    tmp_path: Path, reopen_every: int | None
) -> None:
    streams = _streams()
    flushes = list(_flushes(streams))
    assert len(flushes) > 20
    path = tmp_path / "flushed.duckdb"
    store = Store(path, fold_interval=0)
    try:
        for i, flush in enumerate(flushes):
            _ingest(store, flush)
            if reopen_every and i % reopen_every == reopen_every - 1:
                store.close()
                store = Store(path, fold_interval=0)
        with Store(tmp_path / "once.duckdb", fold_interval=0) as once:
            once.ingest_many([(h, b"".join(lines)) for h, lines in streams.items()])
            for table in ("train", "gpu"):
                got = _levels(store, table)
                assert got == _reference(store, table), table
                assert got == _levels(once, table), table
                _check_split(store, table)
                _check_split(once, table)
        with store.cursor() as cur:
            closed = cur.execute('SELECT count(*) FROM "train_levels"').fetchall()[0][0]
        assert closed > 10  # buckets did close and move out of the open table
    finally:
        store.close()


def test_late_rows_merge_into_closed_buckets_and_open_new_ones(tmp_path: Path) -> None:
    # Steps 100..299 arrive after 0..99 and 300..599 (a run resumed from an earlier
    # checkpoint): some fall in closed buckets that exist, some in none yet.
    seqs = iter(range(1, 10_000))
    early = [*range(0, 100), *range(300, 600)]
    late = range(100, 300)
    with Store(tmp_path / "late.duckdb", fold_interval=0) as store:
        store.ingest("a", header() + b"".join(
            train(next(seqs), s, loss=float(s % 17)) for s in early))
        store.ingest("a", b"".join(train(next(seqs), s, loss=float(-s)) for s in late))
        store.ingest("a", b"".join(train(next(seqs), s, loss=float(s % 5))
                                   for s in range(600, 700)))
        assert _levels(store, "train") == _reference(store, "train")
        _check_split(store, "train")
        with store.cursor() as cur:
            lows = dict(cur.execute(
                "SELECT bucket, loss_lo FROM train_levels WHERE level = 0 "
                "AND bucket BETWEEN 1 AND 4").fetchall())
    assert lows == {1: -127.0, 2: -191.0, 3: -255.0, 4: -299.0}


class _Fetched:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


class _Profiled:
    """A cursor that runs each statement with DuckDB's profiler and keeps the tables read.

    A statement's rows are fetched before the profiler is switched off, which would
    otherwise replace them as the cursor's pending result.
    """

    def __init__(self, cur: duckdb.DuckDBPyConnection, scanned: list[str]) -> None:
        self._cur = cur
        self._scanned = scanned

    def execute(self, sql: str, params: object = None) -> _Fetched:
        self._cur.execute("PRAGMA enable_profiling = 'no_output'")
        try:
            rows = self._cur.execute(sql, params or {}).fetchall()
            tree = json.loads(self._cur.get_profiling_information(format="json"))
        finally:
            self._cur.execute("PRAGMA disable_profiling")
        self._scanned.extend(_tables_read(tree))
        return _Fetched(rows)


def _tables_read(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        table = (node.get("extra_info") or {}).get("Table") if "type" in node else None
        if isinstance(table, str):
            yield table.rsplit(".", 1)[-1]
        for value in node.values():
            yield from _tables_read(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tables_read(item)


@pytest.fixture
def tables_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables each level fold of the store's ingest reads, in order."""
    scanned: list[str] = []

    def wrap(fold: Callable[..., None]) -> Callable[..., None]:
        def profiled(cur: duckdb.DuckDBPyConnection, *args: Any) -> None:
            fold(_Profiled(cur, scanned), *args)
        return profiled

    monkeypatch.setattr(database, "update_levels", wrap(database.update_levels))
    monkeypatch.setattr(database, "fold_staged", wrap(database.fold_staged))
    return scanned


@pytest.mark.slow
def test_a_usual_flush_reads_no_closed_level_row(tmp_path: Path, tables_read: list[str]) -> None:
    seqs = iter(range(1, 100_000))

    def steps(first: int, last: int, rank: int = 0) -> bytes:
        return b"".join(train(next(seqs), s, rank=rank) for s in range(first, last))

    with Store(tmp_path / "cost.duckdb", fold_interval=0) as store:
        store.ingest("a", header() + steps(0, 5000))  # hundreds of closed buckets
        store.ingest_many([("a", steps(5000, 5010)), ("b", header() + steps(0, 10, 1))])
        tables_read.clear()
        store.ingest("a", steps(5010, 5020))  # within the open finest bucket
        store.ingest("a", steps(5020, 5200))  # closes buckets at several levels
        store.ingest_many([("a", steps(5200, 5300)), ("b", steps(10, 20, 1))])
        assert "train_levels_open" in tables_read
        assert "train_levels" not in tables_read
        with store.cursor() as cur:
            assert cur.execute("SELECT count(*) FROM train_levels").fetchall()[0][0] > 100
        store.ingest("a", steps(100, 110))  # late: the closed buckets must be read
        assert "train_levels" in tables_read
        assert _levels(store, "train") == _reference(store, "train")
