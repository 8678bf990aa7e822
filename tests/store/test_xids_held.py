"""The XIDs a refresh holds (`gpu_events_held`, `xid_history_held`) are brought up to date
from the events added since, and say what a fresh read says: after every batch of a
live store's events, whatever the XIDs' GPUs, codes, times and order."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_health import fold_xids
from tests.store.wire import TS0, header


class CountingReader(StoreReader):
    """Counts the full reads a held answer falls back to."""

    history_reads = 0
    recent_reads = 0

    def xid_history(self, **kw: Any) -> list[dict[str, Any]]:
        self.history_reads += 1
        return super().xid_history(**kw)

    def gpu_events(self, **kw: Any) -> list[dict[str, Any]]:
        self.recent_reads += 1
        return super().gpu_events(**kw)


def xid(seq: int, ts: float, data: Any, kind: str = "xid") -> bytes:
    return encode("event", seq, {"kind": kind, "job": None, "rank": None, "step": None,
                                 "msg": f"event {seq}", "data": data}, ts=ts)


def _same(kept: CountingReader, store: Store, before_ts: float | None) -> None:
    fr = kept.frontiers(until_ts=None)
    fresh = StoreReader(store)
    assert kept.xid_history_held(until_ts=None, before_ts=before_ts, frontiers=fr) == \
        fresh.xid_history(before_ts=before_ts)
    assert kept.gpu_events_held(until_ts=None, frontiers=fr) == \
        fresh.gpu_events(frontiers=fresh.frontiers(until_ts=None))


def test_a_live_fleets_xids_fold_into_what_a_fresh_read_finds(tmp_path: Path) -> None:
    rnd = random.Random(7)
    codes = [13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95]  # more than 8
    with Store(tmp_path / "x.duckdb") as store:
        kept = CountingReader(store)
        seqs = {f"h{i}": 0 for i in range(4)}
        for host in seqs:
            store.ingest(host, header(journal_id=f"J-{host}"))
        t = TS0
        batches = 0
        for batch in range(60):
            # Seconds to minutes apart: the first window (two minutes) slides past XIDs,
            # and now and then holds none, so the read looks further back.
            t += rnd.choice((1.0, 5.0, 30.0, 90.0, 200.0))
            for host in seqs:
                lines = []
                for _ in range(rnd.randrange(3)):
                    seqs[host] += 1
                    t += 0.01
                    if rnd.random() < 0.5:
                        lines.append(xid(seqs[host], t, {"gpu": rnd.randrange(2),
                                                         "xid": rnd.choice(codes)}))
                    else:  # the events of everything else a fleet journals
                        lines.append(xid(seqs[host], t, {"checkpoint_step": batch},
                                         kind="checkpoint_saved"))
                if lines:
                    store.ingest(host, b"".join(lines))
            batches += 1
            _same(kept, store, before_ts=TS0 + 600)
        # Read in full a few times at most (the window widening past what was held);
        # the rest folded in.
        assert kept.history_reads <= 2, kept.history_reads
        assert kept.recent_reads < batches // 3, kept.recent_reads


def test_xids_only_the_sql_can_read_are_read_again_and_still_match(tmp_path: Path) -> None:
    """A GPU or code that is no plain whole number (a string, a fraction, a boolean, a
    number past 32 bits), an XID no newer than its GPU's last, one older than the newest
    event (a lagging host): each is left to the full read, and counted as it counts."""
    odd = [{"gpu": "3", "xid": 79}, {"gpu": 3, "xid": 79.0}, {"gpu": True, "xid": 48},
           {"gpu": 3, "xid": 2**40}, {"gpu": None, "xid": 79}, {"xid": 79}, None,
           {"gpu": 3, "xid": 48}]
    with Store(tmp_path / "x.duckdb") as store:
        kept = CountingReader(store)
        store.ingest("h", header())
        t, seq = TS0, 0
        for data in odd:
            seq += 1
            t += 1.0
            store.ingest("h", xid(seq, t, data))
            _same(kept, store, before_ts=None)
        # An XID at the very time of that GPU's last, and one stamped in the past.
        store.ingest("h", xid(seq + 1, t, {"gpu": 3, "xid": 13}))
        _same(kept, store, before_ts=None)
        store.ingest("h", xid(seq + 2, t - 50.0, {"gpu": 5, "xid": 31}))
        _same(kept, store, before_ts=None)
        history = {r["gpu"]: r for r in StoreReader(store).xid_history()}
        assert history[3]["count"] >= 2 and history[5]["count"] == 1


def test_the_recent_xids_window_slides_and_widens_as_a_fresh_read_does(
        tmp_path: Path) -> None:
    """The recent XIDs are those of the first window (two minutes, half an hour, ...)
    before the newest event that holds any: an XID leaves it as newer events come, and
    when none is left the read looks further back, past what was held."""
    with Store(tmp_path / "x.duckdb") as store:
        kept = CountingReader(store)
        store.ingest("h", header())
        store.ingest("h", xid(1, TS0, {"gpu": 0, "xid": 79}))
        store.ingest("h", xid(2, TS0 + 1000, {"gpu": 1, "xid": 48}))
        _same(kept, store, before_ts=None)
        seq = 2
        for t in (1050, 1110, 1130, 1300, 2500, 2900, 3000):  # other events only
            seq += 1
            store.ingest("h", xid(seq, TS0 + t, {"step": t}, kind="checkpoint_saved"))
            _same(kept, store, before_ts=None)
        fr = kept.frontiers(until_ts=None)
        # Both XIDs are older than two minutes and than half an hour: six hours back.
        assert [e["data"]["xid"] for e in kept.gpu_events_held(until_ts=None,
                                                                frontiers=fr)] == [48, 79]


def test_a_fleet_without_xids_reads_them_once(tmp_path: Path) -> None:
    with Store(tmp_path / "x.duckdb") as store:
        kept = CountingReader(store)
        store.ingest("h", header())
        for seq in range(1, 40):
            store.ingest("h", xid(seq, TS0 + seq * 10.0, {"step": seq}, kind="checkpoint_saved"))
            _same(kept, store, before_ts=None)
        assert kept.history_reads == 1 and kept.recent_reads == 1


def test_fold_xids_counts_codes_and_the_earlier_run() -> None:
    held = [{"host": "h", "gpu": 1, "count": 9, "earlier": 9, "newest": 95,
             "first_ts": 10.0, "last_ts": 90.0, "earlier_last_ts": 90.0,
             "codes": [13, 31, 43, 45, 48, 61, 62, 95]}]
    added = [{"host": "h", "seq": 5, "ts": 150.0, "kind": "xid", "data": {"gpu": 1, "xid": 14}},
             {"host": "g", "seq": 2, "ts": 120.0, "kind": "xid", "data": {"gpu": 0, "xid": 79}},
             {"host": "h", "seq": 4, "ts": 110.0, "kind": "xid", "data": {"gpu": 1, "xid": 99}}]
    rows = fold_xids(held, added, before_ts=100.0)
    assert rows == [
        {"host": "g", "gpu": 0, "count": 1, "earlier": 0, "newest": 79, "first_ts": 120.0,
         "last_ts": 120.0, "earlier_last_ts": None, "codes": [79]},
        # The eight lowest codes stay (99 is not among them); the newest is the last one.
        {"host": "h", "gpu": 1, "count": 11, "earlier": 9, "newest": 14, "first_ts": 10.0,
         "last_ts": 150.0, "earlier_last_ts": 90.0,
         "codes": [13, 14, 31, 43, 45, 48, 61, 62]},
    ]
    assert held[0]["count"] == 9  # the held rows are shared: never changed
    tie = [{"host": "h", "seq": 6, "ts": 90.0, "kind": "xid", "data": {"gpu": 1, "xid": 14}}]
    assert fold_xids(held, tie, before_ts=100.0) is None
