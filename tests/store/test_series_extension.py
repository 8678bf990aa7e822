"""A remembered series brought up to date from the added rows equals a full read.

`StoreReader.series_columns_held` extends its last answer when the table only grew
past it (a replay cursor moving forward, a live store gaining steps) and reads in full
otherwise: every answer here is compared with a fresh `series_columns` read.
"""

from __future__ import annotations

import math
import random

import duckdb
import pytest

from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.downsample import added_buckets, merge_buckets
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0

COLUMNS = ("loss", "lr")
WHERE = {"job": "j1", "rank": 0}


def _train_lines(steps: range, seq0: int, *, rank: int = 0, ts_of=None) -> bytes:
    rnd = random.Random(steps.start)
    lines = []
    for i, step in enumerate(steps):
        loss = None if rnd.random() < 0.05 else rnd.uniform(0, 10)
        ts = ts_of(step) if ts_of else TS0 + step * 0.5
        lines.append(encode("train", seq0 + i, {"job": "j1", "rank": rank, "step": step,
                                                "loss": loss, "lr": 0.1 / (1 + step)},
                            ts=ts))
    return b"".join(lines)


def _gpu_lines(seconds: range, seq0: int) -> bytes:
    return b"".join(
        encode("gpu", seq0 + i, {"gpu": i % 4, "util": float((i * 37) % 100)},
               ts=TS0 + t)
        for i, t in enumerate(seconds)
    )


def _held(reader: StoreReader, until_ts: float | None, name: str = "s", table: str = "train",
          columns: tuple[str, ...] = COLUMNS, where=None, x: str = "step", buckets: int = 40):
    fr = reader.frontiers(until_ts=until_ts)
    where = WHERE if where is None else where
    got = reader.series_columns_held(name, table, columns, where=where, x=x,
                                     buckets=buckets, until_ts=until_ts, frontiers=fr)
    want = reader.series_columns(table, columns, where=where, x=x, buckets=buckets,
                                 until_ts=until_ts)
    assert got == want
    held = reader.recall(name)
    assert held is not None
    return held[0][2]  # extensions since the last full read


@pytest.fixture()
def recorded(tmp_path):
    store = Store(tmp_path / "rec.duckdb")
    for start in range(0, 6000, 500):
        store.ingest("h1", _train_lines(range(start, start + 500), start + 1))
    store.ingest("h1", _gpu_lines(range(0, 12_000), 100_000))
    yield store
    store.close()


@pytest.mark.slow
def test_replay_moving_forward_extends_and_matches_a_full_read(recorded: Store) -> None:
    reader = StoreReader(recorded)
    extensions = [_held(reader, TS0 + 1500.0 + i * 3.7) for i in range(40)]
    assert extensions[0] == 0
    assert max(extensions) > 30  # almost every refresh was an extension


@pytest.mark.slow
def test_series_against_time_over_all_gpus_extends_too(recorded: Store) -> None:
    reader = StoreReader(recorded)
    # Long enough a span for the level rows to answer (a shorter one reads raw rows,
    # `test_a_live_series_over_time_is_carried_across_its_widths`).
    found = [_held(reader, TS0 + 8000.0 + i * 2.5, name="g", table="gpu", columns=("util",),
                   where={}, x="ts") for i in range(30)]
    assert max(found) > 20


@pytest.mark.slow
def test_seeking_back_reads_in_full(recorded: Store) -> None:
    reader = StoreReader(recorded)
    assert _held(reader, TS0 + 2000.0) == 0
    assert _held(reader, TS0 + 2010.0) == 1
    assert _held(reader, TS0 + 1200.0) == 0


@pytest.mark.slow
def test_live_growth_extends_and_a_late_row_in_an_old_bucket_reads_in_full(
    tmp_path,
) -> None:
    store = Store(tmp_path / "live.duckdb")
    try:
        reader = StoreReader(store)
        store.ingest("h1", _train_lines(range(0, 3000), 1))
        assert _held(reader, None) == 0
        seq = 3001
        for start in range(3000, 3400, 50):
            store.ingest("h1", _train_lines(range(start, start + 50), seq))
            seq += 50
        assert _held(reader, None) == 1
        for start in range(3400, 3600, 50):
            store.ingest("h1", _train_lines(range(start, start + 50), seq))
            seq += 50
            assert _held(reader, None) > 1
        # A lagging host's row, stamped long ago, for a step far back: full read.
        store.ingest("h2", _train_lines(range(100, 101), 1, ts_of=lambda s: TS0 + 10.0))
        assert _held(reader, None) == 0
        # A rolled-back job re-trains steps of an old bucket with new timestamps.
        store.ingest("h1", _train_lines(range(200, 210), seq, ts_of=lambda s: TS0 + 5000 + s))
        assert _held(reader, None) == 0
    finally:
        store.close()


@pytest.mark.slow
def test_a_span_that_doubles_the_bucket_width_merges_the_held_buckets(tmp_path) -> None:
    store = Store(tmp_path / "grow.duckdb")
    try:
        reader = StoreReader(store)
        store.ingest("h1", _train_lines(range(0, 100), 1))
        widths = []
        extensions = []
        seq = 101
        for start in range(100, 2000, 100):
            store.ingest("h1", _train_lines(range(start, start + 100), seq))
            seq += 100
            extensions.append(_held(reader, None, buckets=8))
            widths.append(reader.recall("s")[1].width)
        assert len(set(widths)) > 2  # the width grew with the span...
        assert extensions == list(range(len(extensions)))  # ...and was never read again
    finally:
        store.close()


@pytest.mark.slow
def test_a_live_series_over_time_is_carried_across_its_widths(tmp_path) -> None:
    """GPU utilisation over time, every GPU of a host (the raw rows: the span is short),
    a second of samples at a time: each width change merges what was held."""
    store = Store(tmp_path / "gpu.duckdb")
    try:
        reader = StoreReader(store)
        store.ingest("h1", _gpu_lines(range(0, 10), 1))
        widths = []
        extensions = []
        for t in range(10, 400, 3):
            store.ingest("h1", _gpu_lines(range(t, t + 3), 100 + t))
            extensions.append(_held(reader, None, name="g", table="gpu", columns=("util",),
                                    where={}, x="ts", buckets=40))
            widths.append(reader.recall("g")[1].width)
        assert len(set(widths)) >= 4 and all(w == 2 ** round(math.log2(w)) for w in widths)
        assert extensions == list(range(len(extensions)))
    finally:
        store.close()


@pytest.mark.slow
def test_a_fleets_late_samples_fold_into_the_series_over_time(tmp_path) -> None:
    """Hosts sample at their own phase and their records arrive with their own delay,
    so each refresh finds samples stamped before the newest (late rows), some without a
    value, some tied at one instant: they are merged into the held buckets as the
    statements group them (the last value by its x), a bucket read as a whole read
    again alone, and the series is not read in full."""
    rnd = random.Random(11)
    store = Store(tmp_path / "late.duckdb")
    try:
        reader = StoreReader(store)
        hosts = [f"h{i}" for i in range(6)]
        phase = {h: rnd.random() for h in hosts}
        delay = {h: d for h, d in zip(hosts, (0.0, 0.3, 1.2, 2.5, 0.05, 3.5), strict=True)}
        seq = dict.fromkeys(hosts, 0)
        pending: dict[str, list[tuple[float, bytes]]] = {h: [] for h in hosts}
        extensions: dict[str, list[int]] = {"all": [], "gpu1": []}
        for second in range(80):
            now = TS0 + second + 1
            flush = []  # what arrived this second, stored in one flush as the writer does
            for h in hosts:
                for g in range(4):
                    seq[h] += 1
                    ts = TS0 + second + phase[h]
                    util = None if rnd.random() < 0.1 else rnd.choice(
                        (10.0, 90.0, rnd.uniform(0, 100)))
                    pending[h].append((ts, encode("gpu", seq[h], {"gpu": g, "util": util},
                                                  ts=ts)))
                due = [line for ts, line in pending[h] if ts + delay[h] <= now]
                pending[h] = [(ts, line) for ts, line in pending[h] if ts + delay[h] > now]
                if due:
                    flush.append((h, b"".join(due)))
            store.ingest_many(flush)
            if second >= 5:
                for name, where in (("all", {}), ("gpu1", {"gpu": 1})):
                    extensions[name].append(_held(reader, None, name=name, table="gpu",
                                                  columns=("util",), where=where, x="ts",
                                                  buckets=40))
        for name, found in extensions.items():
            assert max(found) > 50, (name, found)
        # A host's backlog after a reconnect, stamped a minute before the newest: found
        # by its id as any late row, folded in (its bucket read again alone), and right.
        seq["h0"] += 1
        store.ingest("h0", encode("gpu", seq["h0"], {"gpu": 1, "util": 99.0}, ts=TS0 + 20.5))
        for name, where in (("all", {}), ("gpu1", {"gpu": 1})):
            assert _held(reader, None, name=name, table="gpu", columns=("util",),
                         where=where, x="ts", buckets=40) == extensions[name][-1] + 1
    finally:
        store.close()


def test_added_rows_fold_per_bucket_as_duckdb_groups_them() -> None:
    """The added rows are folded in Python (`added_buckets`); DuckDB's GROUP BY over the
    same rows, with the statements' rule for the last value (the largest of those at
    the largest x), is the reference: NULL, NaN, infinities and repeated x included."""
    rnd = random.Random(7)
    specials = [None, math.nan, math.inf, -math.inf]
    rows = []
    for x in [rnd.randrange(0, 2000) for _ in range(600)]:  # repeated x: ties
        rows.append({"x": x, "k": rnd.choice(["a", "b", None]),
                     **{c: rnd.choice(specials) if rnd.random() < 0.2 else rnd.uniform(-5, 5)
                        for c in ("v0", "v1")}})
    rows.append({"x": None, "k": "a", "v0": 1.0, "v1": 2.0})  # no x: in no bucket
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x BIGINT, k VARCHAR, v0 DOUBLE, v1 DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                    [(r["x"], r["k"], r["v0"], r["v1"]) for r in rows])
    for width, where, cond in ((64.0, {"k": "a"}, "k = 'a'"), (7, {"k": None}, "k IS NULL"),
                               (1000.0, {}, "TRUE")):
        want = con.execute(
            "SELECT floor(x / $w)::BIGINT AS tb, max(x), min(x), "
            "arg_max(v0, (x, v0)), min(v0), max(v0), arg_max(v1, (x, v1)), min(v1), max(v1) "
            f"FROM t WHERE {cond} AND x IS NOT NULL GROUP BY tb ORDER BY tb",
            {"w": width}).fetchall()
        got = added_buckets(rows, ("v0", "v1"), x="x", width=width, where=where)
        assert repr(got) == repr(want), (width, where)  # repr: NaN equals NaN


def test_held_buckets_merge_into_a_wider_width_as_duckdb_groups_them() -> None:
    """Buckets at a width merged `factor` at a time (`merge_buckets`) are DuckDB's GROUP
    BY at `factor` times the width: NULL, NaN, infinities, repeated x and gaps
    included, over integer and fractional x."""
    rnd = random.Random(11)
    specials = [None, math.nan, math.inf, -math.inf]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x DOUBLE, v0 DOUBLE, v1 DOUBLE)")
    for scale in (1.0, 0.37):
        rows = []
        for x in [rnd.randrange(0, 3000) * scale for _ in range(500)]:
            rows.append({"x": x, **{c: rnd.choice(specials) if rnd.random() < 0.25
                                    else rnd.uniform(-5, 5) for c in ("v0", "v1")}})
        con.execute("DELETE FROM t")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                        [(r["x"], r["v0"], r["v1"]) for r in rows])
        for width in (0.25, 1.0, 16.0):
            narrow = [(r[0], r[1], *r[3:]) for r in
                      added_buckets(rows, ("v0", "v1"), x="x", width=width, where={})]
            for factor in (2, 4, 32):
                want = con.execute(
                    "SELECT floor(x / $w)::BIGINT AS tb, max(x), arg_max(v0, (x, v0)), "
                    "min(v0), max(v0), arg_max(v1, (x, v1)), min(v1), max(v1) FROM t "
                    "GROUP BY tb ORDER BY tb", {"w": width * factor}).fetchall()
                got = merge_buckets(narrow, 2, factor)
                assert repr(got) == repr(want), (scale, width, factor)
