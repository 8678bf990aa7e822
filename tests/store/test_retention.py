"""Retention: old raw samples become 1-minute roll-ups; other records stay; logs capped."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.sessions.live import LiveSession
from cockpit.store import Store
from cockpit.store.retention import RetentionPolicy, apply_retention
from tests.harness.waiting import wait_for
from tests.store.wire import count, header

DAY = 86400.0
T0 = 1_700_000_040.0  # a minute boundary


def _gpu(seq: int, ts: float, util: float, temp: float, throttle: int) -> bytes:
    return encode("gpu", seq, {"gpu": 1, "util": util, "temp": temp, "power": 100.0 + seq,
                               "mem_used": seq, "throttle": throttle, "ecc_agg_unc": 0}, ts=ts)


def test_old_samples_are_rolled_up_and_deleted(store: Store) -> None:
    lines = []
    expected: dict[float, list[tuple[float, float, int]]] = {}
    seq = 0
    for minute in range(3):
        for second in range(0, 60, 10):
            seq += 1
            ts = T0 + minute * 60 + second
            util, temp, throttle = float(seq * 3 % 17), 30.0 + seq, 1 << (seq % 3)
            expected.setdefault(T0 + minute * 60, []).append((util, temp, throttle))
            lines.append(_gpu(seq, ts, util, temp, throttle))
    recent = T0 + 10 * DAY
    lines.append(_gpu(seq + 1, recent, 50.0, 40.0, 0))
    lines.append(encode("host", seq + 2, {"cpu": 10.0, "mem_used": 5}, ts=T0 + 5))
    lines.append(encode("host", seq + 3, {"cpu": 30.0, "mem_used": 7}, ts=T0 + 6))
    lines.append(encode("train", seq + 4, {"job": "j", "rank": 0, "step": 1, "loss": 1.0},
                        ts=T0))
    lines.append(encode("event", seq + 5, {"kind": "pause", "msg": "paused"}, ts=T0))
    store.ingest("h1", b"".join(lines))

    result = apply_retention(store, RetentionPolicy(raw_window=7 * DAY), now=recent)
    assert (result.gpu_rolled, result.host_rolled) == (18, 2)
    assert count(store, "gpu") == 1  # only the recent sample stays raw
    assert count(store, "host_sample") == 0
    assert count(store, "train") == 1 and count(store, "event") == 1
    with store.cursor() as cur:
        rows = cur.execute(
            "SELECT minute, n, util_min, util_mean, util_max, temp_min, temp_max, throttle_or "
            "FROM gpu_rollup WHERE host = 'h1' AND gpu = 1 ORDER BY minute").fetchall()
        host = cur.execute("SELECT n, cpu_min, cpu_mean, cpu_max, mem_used_max "
                           "FROM host_sample_rollup").fetchall()
    assert [r[0] for r in rows] == sorted(expected)
    for (minute, n, umin, umean, umax, tmin, tmax, thr) in rows:
        values = expected[minute]
        utils = [u for u, _, _ in values]
        assert n == len(values)
        assert (umin, umax) == (min(utils), max(utils))
        assert abs(umean - statistics.mean(utils)) < 1e-9
        assert (tmin, tmax) == (min(t for _, t, _ in values), max(t for _, t, _ in values))
        thr_or = 0
        for _, _, bits in values:
            thr_or |= bits
        assert thr == thr_or
    assert host == [(2, 10.0, 20.0, 30.0, 7)]


def test_a_late_row_for_a_folded_minute_is_merged(store: Store) -> None:
    store.ingest("h1", _gpu(1, T0 + 1, 10.0, 30.0, 0) + _gpu(2, T0 + 2, 20.0, 30.0, 0))
    apply_retention(store, now=T0 + 8 * DAY)
    store.ingest("h1", _gpu(3, T0 + 3, 60.0, 30.0, 0))
    apply_retention(store, now=T0 + 8 * DAY)
    with store.cursor() as cur:
        rows = cur.execute("SELECT n, util_min, util_mean, util_max FROM gpu_rollup").fetchall()
    assert rows == [(3, 10.0, 30.0, 60.0)]
    assert count(store, "gpu") == 0


def test_logs_are_capped_newest_kept(store: Store) -> None:
    lines = b"".join(encode("log", i, {"job": "j", "rank": 0, "stream": "stdout",
                                       "line": f"line {i}"}, ts=T0 + i) for i in range(1, 11))
    store.ingest("h1", lines)
    result = apply_retention(store, RetentionPolicy(log_max_rows=4), now=T0)
    assert result.logs_deleted == 6
    with store.cursor() as cur:
        kept = [r[0] for r in cur.execute("SELECT seq FROM log ORDER BY seq").fetchall()]
    assert kept == [7, 8, 9, 10]


def test_levels_keep_old_charts_after_raw_rows_go(store: Store) -> None:
    from cockpit.store.downsample import downsample

    lines = b"".join(_gpu(i, T0 + i * 10, float(i), 30.0, 0) for i in range(1, 2001))
    store.ingest("h1", lines)
    with store.cursor() as cur:
        before = downsample(cur, "gpu", "util", x="ts", buckets=10, where={"host": "h1", "gpu": 1})
    apply_retention(store, now=T0 + 2000 * 10 + 7 * DAY + 120)
    assert count(store, "gpu") == 0
    with store.cursor() as cur:
        after = downsample(cur, "gpu", "util", x="ts", buckets=10, where={"host": "h1", "gpu": 1})
    assert after == before and len(after[0]) > 1


def test_a_live_session_applies_its_retention_window_while_it_records(tmp_path: Path) -> None:
    """`cockpit watch --keep-raw`: the writer applies the policy between flushes."""
    now = time.time()
    old = [_gpu(seq, now - 2 * 3600 - seq, 40.0, 50.0, 0) for seq in range(1, 11)]
    recent = _gpu(11, now, 60.0, 55.0, 0)
    session = LiveSession([], tmp_path / "live.duckdb",
                          retention=RetentionPolicy(raw_window=3600), maintenance_every=0.2)
    with session:
        session.writer.put("h1", header() + b"".join(old) + recent)

        def rolled_up() -> bool:
            with session.store.cursor() as cur:
                return cur.execute("SELECT count(*) FROM gpu_rollup").fetchall()[0][0] > 0

        wait_for(rolled_up, what="the old samples rolled up")
        assert count(session.store, "gpu") == 1  # only the sample inside the window stays
        with session.store.cursor() as cur:
            assert cur.execute("SELECT sum(n) FROM gpu_rollup").fetchall()[0][0] == 10
        # After retention, the chart levels are re-clustered off the writer thread.
        wait_for(lambda: "gpu_levels" in session.store.clustered_levels,
                 what="the gpu level table re-clustered")


def _step(seq: int, rank: int, step: int, ts: float, loss: float,
          nonfinite: str | None = None) -> bytes:
    return encode("train", seq, {"job": "j", "rank": rank, "step": step, "loss": loss,
                                 "step_time": 0.5 + rank / 100, "nonfinite": nonfinite}, ts=ts)


def test_other_ranks_steps_past_the_window_go_rank_0_and_nonfinite_stay(store: Store) -> None:
    """128 ranks at a step a second would be most of a month's recording: past the
    window only rank 0's steps (and any NaN/Inf step) stay raw; the charts of every rank
    come from the level tables, which keep them."""
    from cockpit.store.downsample import downsample

    lines, seq = [], 0
    for step in range(1, 2001):
        for rank in range(3):
            seq += 1
            bad = "nan" if (rank, step) == (2, 700) else None
            lines.append(_step(seq, rank, step, T0 + step * 10, float(step % 37 + rank), bad))
    recent = T0 + 10 * DAY
    for rank in range(3):
        seq += 1
        lines.append(_step(seq, rank, 2001, recent, 1.0))
    store.ingest("h1", b"".join(lines))

    def chart(rank: int) -> object:
        with store.cursor() as cur:
            return downsample(cur, "train", "loss", buckets=10, where={"job": "j", "rank": rank})

    before = [chart(rank) for rank in range(3)]
    result = apply_retention(store, RetentionPolicy(raw_window=3 * DAY), now=recent)
    assert result.train_deleted == 2 * 2000 - 1
    with store.cursor() as cur:
        kept = cur.execute("SELECT rank, count(*) FROM train GROUP BY rank ORDER BY rank"
                           ).fetchall()
        nan_step = cur.execute("SELECT rank, step FROM train WHERE nonfinite IS NOT NULL"
                               ).fetchall()
    assert kept == [(0, 2001), (1, 1), (2, 2)]
    assert nan_step == [(2, 700)]
    assert [chart(rank) for rank in range(3)] == before
    assert RetentionPolicy().raw_window == 3 * DAY


@pytest.mark.slow
def test_the_month_estimate_costs_each_table_from_its_own_measured_size() -> None:
    """`bench/storage.py` and `python -m cockpit.store.retention` rest on this."""
    from cockpit.store.retention import estimate_month, measure_bytes_per_row

    per_row = measure_bytes_per_row(rows=30_000)
    assert set(per_row) == {"gpu", "gpu_levels", "host_sample", "host_sample_levels", "train",
                            "train_levels", "gpu_rollup", "host_sample_rollup"}
    assert all(size > 0 for size in per_row.values())
    kept = estimate_month(per_row=per_row)
    everything = estimate_month(per_row=per_row, keep_all=True)
    parts = kept["gib"]
    assert isinstance(parts, dict)
    assert abs(sum(parts.values()) - float(kept["total_gib"])) < 0.01  # type: ignore[arg-type]
    assert everything["gib"]["roll-ups"] == 0  # type: ignore[index]
    # Raw rows are kept for 3 of the 30 days; levels and rank 0 for all of them.
    assert parts["gpu raw"] * 10 == pytest.approx(everything["gib"]["gpu raw"], rel=0.01)  # type: ignore[index]
    assert parts["chart levels"] == everything["gib"]["chart levels"]  # type: ignore[index]


@pytest.mark.slow
def test_a_long_backlog_is_trimmed_an_hour_at_a_time_to_the_same_result(tmp_path: Path) -> None:
    """The first pass over an old recording folds and deletes hours of raw rows, with a
    gap of days between them: one transaction per slice of raw rows (each followed by a
    checkpoint, which frees what DuckDB held of the deleted rows), none for the gap, and
    the same roll-ups, steps and counts as one pass over everything."""
    data = _backlog()
    tables = ("gpu_rollup", "host_sample_rollup", "gpu", "host_sample", "train")
    results, contents = [], []
    for slice_s in (3600.0, 1e12):
        with Store(tmp_path / f"{slice_s:.0f}.duckdb") as store:
            store.ingest("h1", data)
            checkpoints = 0
            real = store.checkpoint

            def counted(real=real) -> None:
                nonlocal checkpoints
                checkpoints += 1
                real()

            store.checkpoint = counted  # type: ignore[method-assign]
            results.append(apply_retention(store, RetentionPolicy(raw_window=DAY),
                                           now=T0 + 10 * DAY, slice_s=slice_s))
            with store.cursor() as cur:
                contents.append({t: cur.execute(f"SELECT * FROM {t} ORDER BY ALL"
                                                ).fetchall() for t in tables})
            results.append(checkpoints)
    sliced, sliced_checkpoints, whole, whole_checkpoints = results
    assert (sliced_checkpoints, whole_checkpoints) == (6, 1)  # 3 + 3 hours; no day of the gap
    assert sliced == whole
    assert (whole.gpu_rolled, whole.host_rolled, whole.train_deleted) == (1080, 1080, 1080)
    assert contents[0] == contents[1]
    assert contents[0]["gpu"] == [] and len(contents[0]["train"]) == 1080


def _backlog() -> bytes:
    """Three hours of samples and two ranks' steps, and three more five days later."""
    lines, seq = [], 0
    for start in (T0, T0 + 5 * DAY):
        for second in range(0, 3 * 3600, 20):
            ts = start + second
            seq += 1
            lines.append(_gpu(seq, ts, float(seq % 97), 30.0 + seq % 11, seq % 4))
            seq += 1
            lines.append(encode("host", seq, {"cpu": float(seq % 50), "mem_used": seq}, ts=ts))
            for rank in range(2):
                seq += 1
                lines.append(_step(seq, rank, second // 20 + 1, ts, 1.0 + rank))
    return b"".join(lines)


@pytest.mark.slow
def test_a_backlog_is_worked_through_in_parts_within_a_time_budget(store: Store) -> None:
    """A live session holds up ingest while retention runs, so it asks for a part at a
    time: each call does at least one slice and says whether rows are left."""
    store.ingest("h1", _backlog())
    policy = RetentionPolicy(raw_window=DAY)
    parts = []
    while True:
        result = apply_retention(store, policy, now=T0 + 10 * DAY, budget_s=0.0)
        parts.append(result)
        if result.done:
            break
    assert len(parts) == 6  # one slice a part: six hours of rows
    assert [p.done for p in parts] == [False] * 5 + [True]
    assert sum(p.gpu_rolled for p in parts) == sum(p.host_rolled for p in parts) == 1080
    assert sum(p.train_deleted for p in parts) == 1080 and count(store, "gpu") == 0
