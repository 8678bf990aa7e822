"""What a refresh reuses must never change what it shows: batched frontiers, remembered
reads and batched spike pins give the same answers as the plain reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.wire.protocol import encode
from cockpit.read.source import build_snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_base import RECORD_TABLES
from tests.read import synthetic as syn

CURSORS = (syn.T0 + 0.5, syn.T0 + 7, syn.T0 + 130, syn.step_ts(260), syn.step_ts(455),
           syn.step_ts(599) - 0.5, None)


def test_frontiers_match_the_table_by_table_probe(reader: StoreReader) -> None:
    for until in CURSORS:
        found = reader.frontiers(until_ts=until)
        with reader._cur() as cur:
            for table in RECORD_TABLES:
                assert found.ts[table] == reader.table_frontier(cur, table, until), (table, until)
                (rows,) = cur.execute(f'SELECT count(*) FROM "{table}"').fetchone()
                assert found.rows[table] == rows


@pytest.mark.slow
def test_a_replay_reader_asks_only_about_tables_its_cursor_moved(recording: Path) -> None:
    """On a read-only store the frontiers of tables whose next row lies beyond the
    cursor are carried over; every answer equals a fresh probe's."""
    import random

    rnd = random.Random(5)
    lo, hi = syn.T0, syn.step_ts(599) + 5
    cursors = [lo + (hi - lo) * i / 80 for i in range(80)]  # forward, small steps
    cursors += [rnd.uniform(lo - 5, hi + 5) for _ in range(40)]  # seeks both ways
    with Store(recording, read_only=True) as store:
        counting = _CountingStore(store)
        kept = StoreReader(counting)
        for until in cursors:
            counting.statements.clear()
            found = kept.frontiers(until_ts=until)
            assert found == StoreReader(store).frontiers(until_ts=until), until
        # Moving forward by a fraction of a second asks about few tables, if any.
        kept.frontiers(until_ts=syn.step_ts(300))
        counting.statements.clear()
        kept.frontiers(until_ts=syn.step_ts(300) + 0.01)
        assert all(s.count("UNION ALL") < len(RECORD_TABLES) - 1 for s in counting.statements)


@pytest.mark.slow
def test_a_long_lived_reader_builds_what_a_fresh_one_builds(recording: Path) -> None:
    """Forward, backward and repeated cursors, as a replay with seeks produces them."""
    with Store(recording, read_only=True) as store:
        kept = StoreReader(store)
        for until in (*CURSORS, syn.step_ts(300), syn.step_ts(300), syn.T0 + 130, None):
            fresh = build_snapshot(StoreReader(store), until_ts=until, label="x")
            assert build_snapshot(kept, until_ts=until, label="x") == fresh, until


def test_memo_recomputes_only_for_a_new_key(reader: StoreReader) -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert reader.memo("n", ("a", 1), compute) == 1
    assert reader.memo("n", ("a", 1), compute) == 1
    assert reader.memo("n", ("a", 2), compute) == 2
    assert reader.memo("other", ("a", 2), compute) == 3
    assert len(calls) == 3


def test_a_new_row_invalidates_what_was_remembered(tmp_path: Path) -> None:
    """A live store: a row that arrives late (older than the newest) still shows."""
    path = tmp_path / "live.duckdb"
    with Store(path) as store:
        reader = StoreReader(store)
        header = encode("stream", 0, {"protocol": 1, "journal_id": "j", "from": 0,
                                      "first": 1}, ts=syn.T0)
        store.ingest("h", header + encode("event", 1, {"kind": "job_started", "job": "j",
                                                       "msg": "go"}, ts=syn.T0 + 10))
        first = build_snapshot(reader, until_ts=None, label="x")
        store.ingest("h", encode("event", 2, {"kind": "checkpoint_saved", "job": "j",
                                              "msg": "late"}, ts=syn.T0 + 5))
        second = build_snapshot(reader, until_ts=None, label="x")
    assert [e.msg for e in first.events] == ["go"]
    assert sorted(e.msg for e in second.events) == ["go", "late"]


def test_peak_steps_pins_each_range_like_peak_step(reader: StoreReader) -> None:
    ranges = [(290.0, 310.0), (0.0, 5.0), (440.0, 460.0), (900.0, 950.0)]
    for until in (None, syn.step_ts(305)):
        batched = reader.peak_steps("job-1", 0, "loss", ranges, until_ts=until)
        single = [reader.peak_step("job-1", 0, "loss", a, b, until_ts=until) for a, b in ranges]
        assert batched == single
    assert reader.peak_steps("job-1", 0, "loss", ranges)[0] == syn.SPIKE_STEP
    assert reader.peak_steps("job-1", 0, "loss", []) == []


class _CountingStore:
    """The store, with every statement its cursors run written down."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.read_only = store.read_only
        self.statements: list[str] = []

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        with self._store.cursor() as cur:
            yield _CountingCursor(cur, self.statements)


class _CountingCursor:
    def __init__(self, cur: Any, statements: list[str]) -> None:
        self._cur = cur
        self._statements = statements

    def execute(self, sql: str, *args: Any) -> Any:
        self._statements.append(sql)
        return self._cur.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def test_a_refresh_that_finds_nothing_new_reads_almost_nothing(recording: Path) -> None:
    """What a cockpit on a quiet run, or a paused replay, costs per refresh: where the
    tables end, and the host links (whose live state no frontier covers)."""
    with Store(recording, read_only=True) as store:
        counting = _CountingStore(store)
        reader = StoreReader(counting)
        for until in (syn.step_ts(455), None):
            first = build_snapshot(reader, until_ts=until, label="x")
            read_first = len(counting.statements)
            counting.statements.clear()
            again = build_snapshot(reader, until_ts=until, label="x")
            assert again == first
            assert read_first > 10
            assert len(counting.statements) <= 3, counting.statements
            assert not [s for s in counting.statements if "_levels" in s or "step" in s]
            counting.statements.clear()


@pytest.mark.slow
def test_spike_pins_are_looked_up_again_only_when_their_bucket_changes(
    recording: Path,
) -> None:
    with Store(recording, read_only=True) as store:
        kept = StoreReader(store)
        looked_up: list[list[tuple[float, float]]] = []
        peak_steps = kept.peak_steps

        def counting(job: str, rank: int | None, column: str,
                     ranges: list[tuple[float, float]], **kw: Any) -> list[int | None]:
            looked_up.append(ranges)
            return peak_steps(job, rank, column, ranges, **kw)

        kept.peak_steps = counting  # type: ignore[method-assign]
        # 455 -> 470: the spike's bucket is complete at both; 301: it holds one step less.
        for until, lookups in ((syn.step_ts(455), 1), (syn.step_ts(470), 0),
                               (syn.step_ts(301), 1), (syn.step_ts(455), 1)):
            looked_up.clear()
            snapshot = build_snapshot(kept, until_ts=until, label="x")
            assert snapshot == build_snapshot(StoreReader(store), until_ts=until, label="x")
            assert syn.SPIKE_STEP in snapshot.effect.spike_steps
            assert len(looked_up) == lookups, (until, looked_up)


@pytest.mark.slow
def test_a_replay_stepping_forward_builds_what_a_fresh_reader_builds(recording: Path) -> None:
    """A replay's refreshes: the cursor moves a little each time, and the reader folds
    in the rows it read ahead (frontiers, latest samples, steps, series, evaluations);
    every snapshot equals one built from scratch, through evaluations, checkpoints and
    the NaN step."""
    lo, hi = syn.T0, syn.step_ts(599) + 5
    cursors = [lo + (hi - lo) * i / 70 for i in range(71)]
    with Store(recording, read_only=True) as store:
        counting = _CountingStore(store)
        kept = StoreReader(counting)
        for until in cursors:
            built = build_snapshot(kept, until_ts=until, label="x")
            assert built == build_snapshot(StoreReader(store), until_ts=until, label="x"), until
    # Frontiers and added rows come from the rows read ahead, read a few times in all;
    # no table is probed for its frontier, nor read for its added rows, on its own.
    read_ahead = [s for s in counting.statements if "ORDER BY ts, host, seq LIMIT" in s]
    assert 0 < len(read_ahead) < len(cursors) // 2
    assert not [s for s in counting.statements
                if "FILTER (WHERE ts <=" in s or "LIMIT 20001" in s]


def _undated(snapshot: Any) -> Any:
    """A live reader dates a finding when it first saw it (`_first_seen`): a fresh
    reader sees every finding for the first time (and the alerts are ordered by it)."""
    return dataclasses.replace(snapshot, alerts=tuple(sorted(
        (dataclasses.replace(a, ts=0.0) for a in snapshot.alerts), key=repr)))


def test_a_live_reader_kept_across_new_records_builds_what_a_fresh_one_builds(
        tmp_path: Path) -> None:
    """A live store gains each host's records a slice of time at a time: the job's
    start, steps, evaluations, checkpoints, an interruption and its recovery, an XID,
    a spool error, and a late event older than the newest. A reader kept across the
    slices (its answers carried over the events that do not concern them, or extended
    by them) builds, after every slice, what a reader opened then builds."""
    rec = syn.build_recording(steps=200)
    rec.add("node-b", syn.step_ts(120), "event", kind="pause", job="job-1", rank=None,
            step=120, msg="paused by the operator", data={"checkpoint_step": 100})
    rec.add("node-b", syn.step_ts(121), "event", kind="resume", job="job-1", rank=None,
            step=100, msg="resumed", data={})
    rec.add("node-a", syn.step_ts(150), "event", kind="job_started", job="job-2",
            rank=None, step=None, msg="a second job", data={})
    # XIDs folded into the held answers: a GPU's second and third, a repeated code.
    for step, xid in ((60, 79), (110, 48), (170, 79)):
        rec.add("node-a", syn.step_ts(step), "event", kind="xid", job=None, rank=None,
                step=None, msg=f"XID {xid} on GPU 2", data={"gpu": 2, "xid": xid})
    wire = {host: list(rec.wire(host)) for host in syn.HOSTS}
    times = {host: [syn.T0, *sorted(ts for ts, _, _ in rec.lines[host])] for host in syn.HOSTS}
    # A third host's first records arrive late: its XID is older than the newest event.
    late = encode("stream", 0, {"protocol": 1, "journal_id": "j-node-c", "from": 0,
                                "first": 1}, ts=syn.T0) + encode(
        "event", 1, {"kind": "xid", "job": None, "msg": "late XID",
                     "data": {"gpu": 0, "xid": 48}}, ts=syn.step_ts(30))
    end = syn.step_ts(199) + 2
    with Store(tmp_path / "live.duckdb") as store:
        kept = StoreReader(store)
        sent = dict.fromkeys(syn.HOSTS, 0)
        cut = syn.T0
        while cut < end:
            cut += 7.0
            for host in syn.HOSTS:
                upto = sum(1 for t in times[host] if t <= cut)
                if upto > sent[host]:
                    store.ingest(host, b"".join(wire[host][sent[host]:upto]))
                    sent[host] = upto
            if cut > syn.step_ts(90) and late:
                store.ingest("node-c", late)
                late = b""
            built = build_snapshot(kept, until_ts=None, label="x", now=cut)
            fresh = build_snapshot(StoreReader(store), until_ts=None, label="x", now=cut)
            assert _undated(built) == _undated(fresh), cut
        assert "late XID" in {e.msg for e in built.events}
        assert "job-2" in built.jobs
        # The answers about checkpoints were carried over events of other kinds (the
        # pause, the resume, the second job's start) rather than read again, and the
        # jobs over the evaluations of the job they held.
        for slot in ("event-version:checkpoint_costs", "event-version:slurm-summary:job-1",
                     "eval-version:jobs"):
            held = kept.recall(slot)
            assert held is not None and held[1][1] >= 1, (slot, held)
        # The XIDs were brought up to date from the events added, new XIDs among them.
        for name in ("gpu_events_held", "xid_history_held"):
            held = kept.recall(name)
            assert held is not None and held[0][2] >= 1, (name, held[0] if held else None)
        history = {(r["host"], r["gpu"]): r for r in kept.recall("xid_history_held")[1]}
        assert history[("node-a", 2)]["count"] == 3
        assert history[("node-a", 2)]["codes"] == [48, 79]


def test_a_live_reader_given_late_rows_builds_what_a_fresh_one_builds(
        tmp_path: Path) -> None:
    """The hosts' records reach the store with their own delays: node-b's arrive a few
    seconds after node-a's of the same instant, so nearly every refresh finds rows of
    node-b stamped before node-a's newest (late rows, in the GPU, host, training and
    event tables alike). A reader kept across the refreshes finds them by the ids the
    store gave them and folds them in rather than reading every answer again, and
    builds what a reader opened then builds."""
    rec = syn.build_recording(steps=100)
    for step, xid in ((25, 79), (55, 48), (80, 79)):
        rec.add("node-b", syn.step_ts(step) + 0.3, "event", kind="xid", job=None, rank=None,
                step=None, msg=f"XID {xid} on GPU 1", data={"gpu": 1, "xid": xid})
    delay = {"node-a": 0.0, "node-b": 2.6}
    wire = {host: list(rec.wire(host)) for host in syn.HOSTS}
    times = {host: [syn.T0, *sorted(ts for ts, _, _ in rec.lines[host])] for host in syn.HOSTS}
    end = syn.step_ts(99) + 5
    found_late = 0
    with Store(tmp_path / "late.duckdb") as store:
        kept = StoreReader(store)
        by_ids = kept._added_by_ids

        def counting(table: str, before: Any, now: Any, old_end: float, growth: int) -> Any:
            nonlocal found_late
            rows = by_ids(table, before, now, old_end, growth)
            found_late += sum(1 for r in rows or () if r["ts"] <= before.ts[table])
            return rows

        kept._added_by_ids = counting  # type: ignore[method-assign]  # counts, answers
        sent = dict.fromkeys(syn.HOSTS, 0)
        cut = syn.T0
        while cut < end:
            cut += 1.7
            for host in syn.HOSTS:
                upto = sum(1 for t in times[host] if t <= cut - delay[host])
                if upto > sent[host]:
                    store.ingest(host, b"".join(wire[host][sent[host]:upto]))
                    sent[host] = upto
            built = build_snapshot(kept, until_ts=None, label="x", now=cut)
            fresh = build_snapshot(StoreReader(store), until_ts=None, label="x", now=cut)
            assert _undated(built) == _undated(fresh), cut
        assert found_late > 100, found_late  # the late rows were folded in, not re-read
        for name, least in (("latest:gpu", 10), ("gpu_busy", 50)):
            held = kept.recall(name)
            assert held is not None and held[0][2] >= least, (name, held and held[0][2])


def test_the_first_refresh_that_meets_late_rows_folds_them_in(tmp_path: Path) -> None:
    """The refresh right after answers were read afresh finds the rows added since by
    their ids, late ones included, and extends every answer once (the first probe
    named each table's newest row, which the rows read then vouch for); and with the
    hosts in step, each table's added rows are one read and the probe names no row."""
    rec = syn.build_recording(steps=60)
    wire = {host: list(rec.wire(host)) for host in syn.HOSTS}
    times = {host: [syn.T0, *sorted(ts for ts, _, _ in rec.lines[host])] for host in syn.HOSTS}

    def upto(host: str, cut: float) -> int:
        return sum(1 for t in times[host] if t <= cut)

    first, second = syn.step_ts(30), syn.step_ts(40)
    with Store(tmp_path / "late.duckdb") as store:
        kept = StoreReader(store)
        reads: list[tuple[str, int]] = []  # (table, late rows among those read)
        by_ids = kept._added_by_ids

        def counting(table: str, before: Any, now: Any, old_end: float, growth: int) -> Any:
            rows = by_ids(table, before, now, old_end, growth)
            reads.append((table, sum(1 for r in rows or () if r["ts"] <= before.ts[table])))
            return rows

        kept._added_by_ids = counting  # type: ignore[method-assign]  # counts, answers
        lag = {"node-a": 0.0, "node-b": 2.6}  # node-b's records arrive 2.6 s after
        for host in syn.HOSTS:
            store.ingest(host, b"".join(wire[host][:upto(host, first - lag[host])]))
        build_snapshot(kept, until_ts=None, label="x", now=first)
        assert kept.recall("latest:gpu")[0][2] == 0  # read afresh
        assert not reads
        for host in syn.HOSTS:  # node-b's rows of before node-a's newest arrive now
            done = upto(host, first - lag[host])
            store.ingest(host, b"".join(wire[host][done:upto(host, second)]))
        built = build_snapshot(kept, until_ts=None, label="x", now=second)
        assert dict(reads)["gpu"] > 0  # late GPU rows among those read
        for name in ("latest:gpu", "gpu_busy"):
            held = kept.recall(name)
            assert held is not None and held[0][2] == 1, (name, held and held[0][2])
        assert _undated(built) == _undated(build_snapshot(
            StoreReader(store), until_ts=None, label="x", now=second))
        # Both hosts in step: one read of each table's added rows, and every table the
        # refresh read rows of can be extended again without the probe naming a row.
        reads.clear()
        third = syn.step_ts(50)
        for host in syn.HOSTS:
            store.ingest(host, b"".join(wire[host][upto(host, second):upto(host, third)]))
        build_snapshot(kept, until_ts=None, label="x", now=third)
        tables = [table for table, _ in reads]
        assert "gpu" in tables and len(tables) == len(set(tables))
        assert kept.recall("latest:gpu")[0][2] == 2
        assert not set(tables) & set(kept.unanchored(kept.frontiers()))
