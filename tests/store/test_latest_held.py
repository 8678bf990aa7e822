"""`latest_per_held` folds added rows in and answers what `latest_per` answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_base import NOT_KEPT
from cockpit.store.queries_health import SAMPLE_WINDOWS
from tests.store.wire import TS0, gpu

# What a snapshot reads of a GPU row: build_health, gpu_alerts, host_pressure, the
# efficiency figures, the fault timeline and the busy series.
SNAPSHOT_READS = {"host", "gpu", "ts", "seq", "sim", "util", "temp", "power", "power_limit",
                  "mem_used", "mem_total", "ecc_vol_unc", "ecc_agg_unc", "throttle",
                  "remap_pending"}


class CountingReader(StoreReader):
    full_reads = 0

    def latest_per(self, *args, **kw):  # type: ignore[no-untyped-def]
        self.full_reads += 1
        return super().latest_per(*args, **kw)


def _both(reader: CountingReader, until_ts: float | None) -> None:
    fr = reader.frontiers(until_ts=until_ts)
    held = reader.latest_gpus(until_ts=until_ts, frontiers=fr)
    plain = StoreReader(reader._store)
    with plain._cur() as cur:
        full = plain.latest_per(cur, "gpu", ("host", "gpu"), until_ts=until_ts,
                                windows=SAMPLE_WINDOWS)
    # Every column but those no kept answer reads (a host's detail view reads them
    # itself); those a snapshot reads are kept.
    assert NOT_KEPT["gpu"] and all(set(NOT_KEPT["gpu"]) <= set(row) for row in full)
    assert not SNAPSHOT_READS & set(NOT_KEPT["gpu"])
    assert held == [{k: v for k, v in row.items() if k not in NOT_KEPT["gpu"]} for row in full]


@pytest.mark.slow
def test_replay_and_live_growth_match_a_full_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.duckdb")
    try:
        reader = CountingReader(store)
        # GPU 0..3 every second; GPU 3 falls silent at 100 s, GPU 2 at 700 s.
        lines = [gpu(seq, index=i, ts=TS0 + t)
                 for seq, (t, i) in enumerate(((t, i) for t in range(900) for i in range(4)
                                               if not (i == 3 and t > 100)
                                               and not (i == 2 and t > 700)), start=1)]
        store.ingest("h1", b"".join(lines))
        for until in [TS0 + 50 + 7 * k for k in range(130)]:
            _both(reader, until)
        # Read in full once; the rest folded in (GPUs 3 and 2 leave the window alone).
        assert reader.full_reads == 1
        seq = 100_000
        for t in range(900, 960):
            store.ingest("h1", b"".join(gpu(seq + i, index=i, ts=TS0 + t) for i in range(2)))
            seq += 10
            _both(reader, None)
        assert reader.full_reads == 2  # live after replay: other frontiers
        # A late sample of the silent GPU 3, stamped half a minute before the newest:
        # found by its id and folded in, GPU 3 back in the answer.
        before = reader.full_reads
        store.ingest("h1", gpu(seq, index=3, ts=TS0 + 930))
        _both(reader, None)
        assert reader.full_reads == before
        assert any(r["gpu"] == 3 for r in reader.latest_gpus(frontiers=reader.frontiers()))
    finally:
        store.close()
