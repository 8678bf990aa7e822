"""Replaying a period whose other ranks' steps retention has dropped.

Past the raw window only rank 0's steps stay (`cockpit.store.retention`). A replay
cursor there must not show rank 0's share of the job as the job's: the totals and
throughput are counted for every rank, the spread is unknown, and the screen says so.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.read.report import collect
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Series, Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.store.retention import RetentionPolicy, apply_retention
from cockpit.ui.widgets.efficiency_pane import stragglers_line
from tests.read import synthetic as syn

WINDOW = 3600.0
TRIM_AT_STEP = 200


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """The synthetic recording twice: as recorded, and after retention cut it at
    about step 200. Returns both paths and the oldest kept step of rank 1."""
    tmp = tmp_path_factory.mktemp("trim")
    whole = syn.write_recording(tmp / "whole.duckdb")
    trimmed = syn.write_recording(tmp / "trimmed.duckdb")
    with Store(trimmed) as store:
        result = apply_retention(store, RetentionPolicy(raw_window=WINDOW),
                                 now=syn.step_ts(TRIM_AT_STEP) + WINDOW)
        assert result.train_deleted > 0
        with store.cursor() as cur:
            first = cur.execute("SELECT min(ts) FROM train WHERE rank = 1").fetchone()[0]
    return whole, trimmed, float(first)


def _snap(path: Path, until_ts: float) -> Snapshot:
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=until_ts, label="REPLAY",
                              buckets=60)


def test_before_the_kept_steps_rank_0_stands_for_every_rank(stores) -> None:
    whole, trimmed, first = stores
    at = syn.step_ts(100) + 0.5
    assert at < first
    full, thin = _snap(whole, at), _snap(trimmed, at)
    assert thin.progress.step == full.progress.step == 100
    assert thin.progress.samples == full.progress.samples  # 100 steps x 4 ranks x 32
    assert thin.efficiency.samples_per_s == pytest.approx(full.efficiency.samples_per_s)
    assert thin.efficiency.tokens_per_s == pytest.approx(full.efficiency.tokens_per_s)
    assert thin.efficiency.step_time_spread is None and thin.efficiency.slowest_ranks == ()
    note = thin.efficiency.note
    assert note is not None and "rank 0 only" in note and "x 4" in note
    assert "rank 0 only" in stragglers_line(thin.efficiency).plain
    assert full.efficiency.note is None


def test_after_the_kept_steps_begin_nothing_is_estimated(stores) -> None:
    whole, trimmed, first = stores
    at = syn.step_ts(400) + 0.5
    assert at > first
    full, thin = _snap(whole, at), _snap(trimmed, at)
    # (The GPU-busy history differs: the GPU samples before the cut became roll-ups.)
    assert replace(thin.efficiency, gpu_busy_history=Series()) == \
        replace(full.efficiency, gpu_busy_history=Series())
    assert thin.progress == full.progress
    assert thin.efficiency.note is None


def test_the_report_carries_the_note(stores) -> None:
    _, trimmed, _ = stores
    with Store(trimmed, read_only=True) as store:
        data = collect(StoreReader(store), str(trimmed), syn.step_ts(100) + 0.5)
    assert "rank 0 only" in data["efficiency"]["note"]


@pytest.mark.slow
def test_a_replay_moving_across_the_cut_reads_the_same_as_fresh_ones(stores) -> None:
    """One reader, as a replay uses it: its held reads must not carry rank 0's stand-in
    across the cut, nor the other way."""
    _, trimmed, _ = stores
    cursors = [syn.step_ts(step) + 0.5 for step in (100, 150, 400, 450, 120)]
    with Store(trimmed, read_only=True) as store:
        reader = StoreReader(store)
        moving = [build_snapshot(reader, until_ts=at, label="REPLAY", buckets=60)
                  for at in cursors]
    for at, snap in zip(cursors, moving, strict=True):
        fresh = _snap(trimmed, at)
        assert snap.efficiency == fresh.efficiency
        assert snap.progress == fresh.progress
