"""downsample(): exact against a Python reference, bounded in points, level and raw paths."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.downsample import downsample, downsample_rows, plan, results
from tests.store.wire import TS0

STEPS = 4000


def _reference(rows, x0, x1, width, until_ts=None):
    """rows: (x, value, ts). Bucket k = floor(x / width) over x0 <= x <= x1."""
    buckets: dict[int, list[tuple[float, float | None]]] = {}
    for x, value, ts in rows:
        if x0 <= x <= x1 and (until_ts is None or ts <= until_ts):
            buckets.setdefault(math.floor(x / width), []).append((x, value))
    xs, last, lo, hi = [], [], [], []
    for k in sorted(buckets):
        points = buckets[k]
        values = [(x, v) for x, v in points if v is not None]
        xs.append(float(max(x for x, _ in points)))
        last.append(max(values)[1] if values else None)
        lo.append(min(v for _, v in values) if values else None)
        hi.append(max(v for _, v in values) if values else None)
    return xs, last, lo, hi


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """Two ranks interleaved (rank 0 on even steps, rank 1 on odd), some null losses."""
    rnd = random.Random(3)
    rows = {0: [], 1: []}
    lines = []
    for seq, step in enumerate(range(STEPS), start=1):
        rank = step % 2
        loss = None if rnd.random() < 0.05 else rnd.uniform(0, 10)
        ts = TS0 + step * 0.5
        rows[rank].append((step, loss, ts))
        lines.append(encode("train", seq, {"job": "j1", "rank": rank, "step": step,
                                           "loss": loss, "stage": "s"}, ts=ts))
    path = tmp_path_factory.mktemp("ds") / "series.duckdb"
    store = Store(path)
    for i in range(0, len(lines), 700):  # several flushes: partial buckets get merged
        store.ingest("h1", b"".join(lines[i:i + 700]))
    yield store, rows
    store.close()


def _check(store, rows, buckets, levels=True, **kw):
    where = kw.pop("where", {"job": "j1"})
    with store.cursor() as cur:
        got = downsample(cur, "train", "loss", x="step", buckets=buckets, where=where, **kw)
    until = kw.get("until_ts")
    visible = [r for r in rows if until is None or r[2] <= until]
    x0, x1 = kw.get("x_range") or (min(r[0] for r in visible), max(r[0] for r in visible))
    level, width = plan(x1 - x0, buckets, integer_x=True, levels=levels)
    assert len(got[0]) <= buckets
    assert got == _reference(rows, x0, x1, width, until), (level, width)
    return level


def test_full_range_from_the_levels_matches_the_reference(series) -> None:
    store, rows = series
    both = sorted(rows[0] + rows[1])
    assert _check(store, both, 20) is not None  # answered from a level table
    assert _check(store, both, 7) is not None


def test_one_rank(series) -> None:
    store, rows = series
    assert _check(store, rows[1], 12, where={"job": "j1", "rank": 1}) is not None


def test_an_explicit_range_reads_its_partial_edges_raw(series) -> None:
    store, rows = series
    both = sorted(rows[0] + rows[1])
    assert _check(store, both, 10, x_range=(333, 3111)) is not None


def test_a_replay_cursor_hides_later_samples(series) -> None:
    store, rows = series
    both = sorted(rows[0] + rows[1])
    until = TS0 + 2345 * 0.5
    assert _check(store, both, 15, until_ts=until) is not None
    assert _check(store, both, 10, until_ts=until, x_range=(100, 3900)) is not None


def test_narrow_ranges_and_non_key_filters_use_raw_rows(series) -> None:
    store, rows = series
    both = sorted(rows[0] + rows[1])
    assert _check(store, both, 120, x_range=(1000, 1500)) is None
    assert _check(store, both, 20, levels=False, where={"job": "j1", "stage": "s"}) is None


def test_never_more_points_than_buckets(series) -> None:
    store, _ = series
    with store.cursor() as cur:
        for buckets in (1, 2, 3, 50, 120, 200, 5000):
            xs, last, lo, hi = downsample(cur, "train", "loss", buckets=buckets,
                                          where={"job": "j1"})
            assert 0 < len(xs) <= buckets
            assert len(xs) == len(last) == len(lo) == len(hi)
            assert xs == sorted(xs)


def test_gpu_series_by_time(tmp_store_path) -> None:
    rnd = random.Random(5)
    rows = []
    lines = []
    for seq in range(1, 3001):
        ts = TS0 + seq * 1.0
        util = rnd.uniform(0, 100)
        rows.append((ts, util, ts))
        lines.append(encode("gpu", seq, {"gpu": 0, "util": util}, ts=ts))
    with Store(tmp_store_path) as store:
        store.ingest("h1", b"".join(lines))
        with store.cursor() as cur:
            got = downsample(cur, "gpu", "util", x="ts", buckets=16,
                             where={"host": "h1", "gpu": 0})
    level, width = plan(rows[-1][0] - rows[0][0], 16, integer_x=False, levels=True)
    assert level is not None
    assert got == _reference(rows, rows[0][0], rows[-1][0], width)


def test_empty_and_bad_names(store) -> None:
    with store.cursor() as cur:
        assert downsample(cur, "train", "loss", where={"job": "none"}) == ([], [], [], [])
        with pytest.raises(ValueError, match="not a column"):
            downsample(cur, "train", "loss; DROP TABLE train")
        with pytest.raises(ValueError, match="not a column"):
            downsample(cur, "train", "loss", where={"nope": 1})


def test_clustering_the_levels_changes_no_answer_and_ingest_goes_on(tmp_store_path) -> None:
    from cockpit.store.levels import cluster_levels

    lines = [encode("train", s, {"job": "j1", "rank": 0, "step": s, "loss": float(s % 97)},
                    ts=TS0 + s) for s in range(1, 3001)]
    with Store(tmp_store_path) as store:
        store.ingest("h1", b"".join(lines[:2000]))
        with store.cursor() as cur:
            before = downsample(cur, "train", "loss", buckets=10, where={"job": "j1"})
        with store.write_cursor() as cur:
            cluster_levels(cur)
        with store.cursor() as cur:
            assert downsample(cur, "train", "loss", buckets=10, where={"job": "j1"}) == before
        store.ingest("h1", b"".join(lines[2000:]))
        rows = [(s, float(s % 97), TS0 + s) for s in range(1, 3001)]
        with store.cursor() as cur:
            got = downsample(cur, "train", "loss", buckets=10, where={"job": "j1"})
    _, width = plan(2999, 10, integer_x=True, levels=True)
    assert got == _reference(rows, 1, 3000, width)


COLUMNS = ("loss", "lr", "grad_norm")


@pytest.fixture(scope="module")
def columns(tmp_path_factory):
    """Three series of one rank whose gaps (null values) fall in different buckets."""
    rnd = random.Random(11)
    rows: dict[str, list[tuple[int, float | None, float]]] = {c: [] for c in COLUMNS}
    lines = []
    for seq, step in enumerate(range(STEPS), start=1):
        ts = TS0 + step * 0.5
        values = {c: None if rnd.random() < p else rnd.uniform(0, 10)
                  for c, p in zip(COLUMNS, (0.05, 0.3, 0.9), strict=True)}
        if 1200 <= step < 1500:
            values["lr"] = None  # a run of whole buckets without a value
        for c in COLUMNS:
            rows[c].append((step, values[c], ts))
        lines.append(encode("train", seq, {"job": "j1", "rank": 0, "step": step,
                                           "stage": "s", **values}, ts=ts))
    path = tmp_path_factory.mktemp("dsc") / "columns.duckdb"
    store = Store(path)
    for i in range(0, len(lines), 900):
        store.ingest("h1", b"".join(lines[i:i + 900]))
    yield store, rows
    store.close()


def downsample_columns(cur, table, columns, **kw):
    """Several columns in one read, split per column as the reader does."""
    return results(downsample_rows(cur, table, columns, **kw).rows, len(columns))


@pytest.mark.parametrize("kw", [
    {"buckets": 40},
    {"buckets": 120},
    {"buckets": 9, "x_range": (333, 3111)},
    {"buckets": 30, "until_ts": TS0 + 2345 * 0.5},
    {"buckets": 12, "until_ts": TS0 + 3001 * 0.5, "x_range": (100, 3900)},
    {"buckets": 120, "x_range": (1000, 1400)},  # narrow: raw rows
])
def test_columns_read_together_equal_each_read_alone(columns, kw) -> None:
    store, rows = columns
    where = {"job": "j1", "rank": 0}
    with store.cursor() as cur:
        together = downsample_columns(cur, "train", COLUMNS, x="step", where=where, **kw)
        alone = [downsample(cur, "train", c, x="step", where=where, **kw) for c in COLUMNS]
    assert together == alone
    until = kw.get("until_ts")
    visible = [r for r in rows["loss"] if until is None or r[2] <= until]
    x0, x1 = kw.get("x_range") or (visible[0][0], visible[-1][0])
    _, width = plan(x1 - x0, kw["buckets"], integer_x=True, levels=True)
    for column, got in zip(COLUMNS, together, strict=True):
        assert got == _reference(rows[column], x0, x1, width, until), column
    assert together[1][0] == together[0][0]  # a bucket without lr still has its point


def test_a_column_without_levels_sends_every_column_to_the_raw_rows(columns) -> None:
    store, rows = columns
    with store.cursor() as cur:
        # ckpt_time is not kept in the level tables: the statement reads raw rows.
        loss, ckpt = downsample_columns(cur, "train", ("loss", "ckpt_time"), x="step",
                                        buckets=25, where={"job": "j1", "rank": 0})
    _, width = plan(STEPS - 1, 25, integer_x=True, levels=False)
    assert loss == _reference(rows["loss"], 0, STEPS - 1, width)
    assert ckpt[0] == loss[0] and set(ckpt[1]) == {None}


def test_columns_are_checked_before_anything_is_read(store) -> None:
    with store.cursor() as cur:
        with pytest.raises(ValueError, match="at least one column"):
            downsample_columns(cur, "train", ())
        with pytest.raises(ValueError, match="not a column"):
            downsample_columns(cur, "train", ("loss", "loss); DROP TABLE train; --"))


def test_step_buckets_stay_put_while_a_run_grows() -> None:
    """Over steps the bucket width is a power of two, changing only when the span has
    doubled, and each width holds whole buckets of the one before: a spike or the
    divergence found in old buckets does not come and go as steps arrive."""
    widths = [plan(span, 120, integer_x=True, levels=True)[1] for span in range(50, 200_000, 7)]
    assert all(w == 2 ** round(math.log2(w)) for w in widths)
    assert all(b >= a and b % a == 0 for a, b in itertools.pairwise(widths))
    changes = sum(1 for a, b in itertools.pairwise(widths) if b != a)
    assert changes <= math.ceil(math.log2(200_000 / 50)) + 1


def test_time_buckets_are_powers_of_two_that_double() -> None:
    """Over time too (raw rows, fractional spans) the width is a power of two that only
    doubles as the span grows: held buckets then merge into the wider ones."""
    spans = [0.01 * 1.013 ** i for i in range(1500)]
    widths = [plan(span, 120, integer_x=False, levels=False)[1] for span in spans]
    assert all(w == 2.0 ** round(math.log2(w)) for w in widths)
    assert all(span / 119 <= w < 2 * span / 119
               for w, span in zip(widths, spans, strict=True))
    assert all(b >= a and (b / a) == 2 ** round(math.log2(b / a))
               for a, b in itertools.pairwise(widths))
