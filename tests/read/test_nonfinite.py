"""NaN/Inf steps: every one counted, the newest known, however long a run stays NaN."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.source import build_snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_train import NONFINITE_LIMIT, NonFinite
from tests.store.wire import TS0


def _nan_steps(first: int, last: int, seq0: int, ranks: int = 2) -> bytes:
    """Each rank's step record with a NaN loss (stored as `nonfinite`, loss null)."""
    return b"".join(
        encode("train", seq0 + (step - first) * ranks + rank, {
            "job": "j", "rank": rank, "step": step, "loss": None, "nonfinite": "nan",
            "step_time": 0.5, "samples": 8}, ts=TS0 + step + rank * 0.01)
        for step in range(first, last + 1) for rank in range(ranks))


def test_extending_counts_new_steps_once() -> None:
    held = NonFinite((5, 6, 7), 3, 7)
    assert held.extended(set()) is held
    assert held.extended({7, 8, 9}) == NonFinite((5, 6, 7, 8, 9), 5, 9)  # 7: another rank
    assert held.extended({2, 8}) == NonFinite((2, 5, 6, 7, 8), 5, 8)  # a relaunch's repeat
    capped = NonFinite(tuple(range(NONFINITE_LIMIT)), NONFINITE_LIMIT + 50, 5000)
    assert capped.extended({6000}) == NonFinite(capped.steps, NONFINITE_LIMIT + 51, 6000)
    assert capped.extended({4000}) is None  # NaN before or not: only a fresh read can tell


@pytest.mark.slow
def test_a_run_that_stays_nan_is_counted_to_its_newest_step(tmp_path: Path) -> None:
    last = NONFINITE_LIMIT + 300
    with Store(tmp_path / "nan.duckdb") as store:
        store.ingest("h1", _nan_steps(1, last // 2, seq0=1))
        reader = StoreReader(store)
        build_snapshot(reader, until_ts=None, label="LIVE")  # held from here on
        store.ingest("h1", _nan_steps(last // 2 + 1, last, seq0=10**6))
        live = build_snapshot(reader, until_ts=None, label="LIVE").effect
        fresh = build_snapshot(StoreReader(store), until_ts=None, label="LIVE")
    effect = fresh.effect
    assert (effect.nonfinite_count, effect.nonfinite_last) == (last, last)
    assert effect.nonfinite_steps == tuple(range(1, NONFINITE_LIMIT + 1))
    assert (live.nonfinite_count, live.nonfinite_last, live.nonfinite_steps) == (
        last, last, effect.nonfinite_steps)
    alert = next(a for a in fresh.alerts if a.code == "nonfinite_loss")
    assert alert.ts == TS0 + 1  # when the first NaN was recorded, not the refresh
    assert f"at {last:,} steps, first at step 1, last at step {last:,}" in alert.what
