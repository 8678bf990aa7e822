"""The GPU busy history under the Efficiency pane's figure is the job's GPUs', as the
figure is: on a shared fleet, the idle GPUs of hosts that run none of the job's ranks
stay out of it, whether the history is read in full or extended refresh by refresh."""

from __future__ import annotations

from pathlib import Path

from cockpit.read.source import build_snapshot
from cockpit.store import Store
from cockpit.store.downsample import selected
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, gpu, train

BUSY, IDLE = 90.0, 0.0


def _second(store: Store, s: int) -> None:
    """Second `s`: a training step on host `job`, and both hosts' two GPUs sampled (the
    job's busy, the other host's idle)."""
    store.ingest("job", train(3 * s + 1, s, ts=TS0 + s) + gpu(3 * s + 2, 0, BUSY, TS0 + s)
                 + gpu(3 * s + 3, 1, BUSY, TS0 + s))
    store.ingest("other", gpu(2 * s + 1, 0, IDLE, TS0 + s) + gpu(2 * s + 2, 1, IDLE, TS0 + s))


def _busy(reader: StoreReader) -> tuple[tuple[float, ...], ...]:
    history = build_snapshot(reader, until_ts=None, label="LIVE", buckets=30) \
        .efficiency.gpu_busy_history
    return history.x, history.last, history.lo, history.hi


def test_the_busy_history_is_the_job_hosts_gpus(tmp_path: Path) -> None:
    with Store(tmp_path / "fleet.duckdb") as store:
        for s in range(1, 40):
            _second(store, s)
        live = StoreReader(store)
        xs, last, lo, hi = _busy(live)  # read in full
        assert xs and set(last) == set(lo) == set(hi) == {BUSY}
        for s in range(40, 50):
            _second(store, s)
            extended = _busy(live)  # the held history extended by the rows added
            assert extended == _busy(StoreReader(store))
            assert set(extended[2]) == {BUSY}  # no idle GPU of the other host in it


def test_a_frozenset_selects_its_members_as_the_statement_does() -> None:
    row = {"host": "a", "rank": None}
    other = {"host": "c", "rank": 0}
    assert selected([row, other], {"host": frozenset({"a", "b"}), "rank": None}) == [row]
    assert selected([row, other], {"host": frozenset({"b"})}) == []
    assert selected([row, other], {"host": frozenset()}) == []
    assert selected([row, other], {"host": "a", "rank": 0}) == []
    assert selected([row, other], {"rank": 0}) == [other]
    rows = [row, other]
    assert selected(rows, {}) is rows  # nothing to select by: no copy
