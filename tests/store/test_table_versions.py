"""A live reader asks DuckDB only about the record tables a write changed since its last
probe, and its frontiers are still a fresh reader's: after ingests of some tables, after
maintenance writes, writes through a plain cursor, and writes through a second store
open on the same file."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cockpit.store.queries_base as queries_base
from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_base import RECORD_TABLES
from tests.store.wire import TS0, gpu, train


def log(seq: int) -> bytes:
    return encode("log", seq, {"job": "j1", "rank": 0, "stream": "stdout", "line": f"line {seq}"},
                  ts=TS0 + seq)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The tables each live probe asked DuckDB about, probe by probe."""
    probes: list[list[str]] = []
    real = queries_base.probe_frontiers

    def spy(cur: Any, tables: Any, until_ts: Any, *args: Any, **kw: Any) -> Any:
        if until_ts is None:
            probes.append(list(tables))
        return real(cur, tables, until_ts, *args, **kw)

    monkeypatch.setattr(queries_base, "probe_frontiers", spy)
    return probes


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "versions.duckdb") as opened:
        opened.ingest("h1", gpu(1) + train(2, 1) + log(3))
        yield opened


def _same_as_fresh(reader: StoreReader, store: Store) -> None:
    found = reader.frontiers(until_ts=None)
    fresh = StoreReader(store).frontiers(until_ts=None)
    assert (dict(found.ts), dict(found.rows), dict(found.ids)) == \
        (dict(fresh.ts), dict(fresh.rows), dict(fresh.ids))


def test_only_the_tables_a_flush_added_rows_to_are_asked(store: Store,
                                                         asked: list[list[str]]) -> None:
    reader = StoreReader(store)
    first = reader.frontiers(until_ts=None)
    assert asked == [list(RECORD_TABLES)]  # the first probe asks every table
    # Nothing written since: no statement, the same frontiers.
    assert reader.frontiers(until_ts=None) is first
    assert len(asked) == 1
    store.ingest("h1", gpu(4) + gpu(5))
    _same_as_fresh(reader, store)
    assert asked[1] == ["gpu"]
    store.ingest("h2", train(1, 2) + log(2))
    _same_as_fresh(reader, store)
    # (The fresh reader's probe came after it.) The gpu table did not change since,
    # but no read of its added rows named its newest row: this probe names it, once.
    assert asked[-2] == ["gpu", "train", "log"]
    store.ingest("h2", log(3))
    _same_as_fresh(reader, store)
    assert asked[-2] == ["train", "log"]  # the train table's newest named
    store.ingest("h2", log(4))
    _same_as_fresh(reader, store)
    assert asked[-2] == ["log"]
    assert reader.frontiers(until_ts=None).rows == {**first.rows, "gpu": 3, "train": 2,
                                                    "log": 4}


@pytest.mark.parametrize("write", ["cursor", "write_cursor", "checkpoint", "second_store"])
def test_any_other_write_has_every_table_asked_again(store: Store, asked: list[list[str]],
                                                     tmp_path: Path, write: str) -> None:
    reader = StoreReader(store)
    reader.frontiers(until_ts=None)
    if write == "cursor":  # a plain cursor may write anything
        with store.cursor() as cur:
            cur.execute("DELETE FROM log")
    elif write == "write_cursor":  # maintenance (retention) deletes and rewrites
        with store.write_cursor() as cur:
            cur.execute("DELETE FROM train")
    elif write == "checkpoint":  # numbers rows again after deletes
        store.checkpoint()
    else:  # another store open on the same file, in this process, stores rows
        with Store(tmp_path / "versions.duckdb") as other:
            other.ingest("h3", gpu(1))
    reader.frontiers(until_ts=None)
    assert asked == [list(RECORD_TABLES)] * 2
    _same_as_fresh(reader, store)


def test_a_live_reader_over_many_flushes_answers_what_a_fresh_one_answers(
        store: Store) -> None:
    """Flushes of random tables and hosts, with a row stamped in the past now and then,
    a delete and a checkpoint among them."""
    draw = random.Random(7)
    reader = StoreReader(store)
    seqs = {"h1": 10, "h2": 0, "h3": 0}
    for flush in range(40):
        lines = []
        for host in draw.sample(sorted(seqs), draw.randint(1, 3)):
            for _ in range(draw.randint(1, 4)):
                seqs[host] += 1
                seq = seqs[host]
                make = draw.choice((gpu, log, lambda s: train(s, s)))
                lines.append((host, make(seq)))
        for host in {h for h, _ in lines}:
            store.ingest(host, b"".join(line for h, line in lines if h == host))
        if flush == 15:
            with store.write_cursor() as cur:
                cur.execute("DELETE FROM gpu WHERE seq % 3 = 0")
        if flush == 25:
            store.checkpoint()
        _same_as_fresh(reader, store)
