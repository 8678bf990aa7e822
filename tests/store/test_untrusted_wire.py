"""What one host sends cannot cost another host its records, nor its own records twice.

Each test here is a fault found by trying (issue 25): a seq past BIGINT that failed every
flush of the fleet, a stream header that marked a host's future records as duplicates,
seqs out of order within one chunk stored twice, a `ts` that failed every chart fold,
and a writer that dropped a batch while later lines moved the marks past it.
"""

from __future__ import annotations

import duckdb
import pytest

from agent.wire.protocol import encode
from cockpit.ingest.bounds import SEQ_MAX, STEP_MAX, TS_MAX
from cockpit.ingest.route import pregroup, route_chunk
from cockpit.store import Store
from cockpit.store import database as database_module
from cockpit.store.writer import HostStoreError, StoreWriter, WriterBacklogError
from tests.store.wire import TS0, count, gpu, header, train, trains

HUGE = 99999999999999999999  # past 64 bits


def _errors(store: Store, host: str) -> list[tuple[str, str]]:
    with store.cursor() as cur:
        return [(str(e), str(s)) for e, s in cur.execute(
            "SELECT error, sample FROM wire_errors WHERE host = $h", {"h": host}).fetchall()]


def _seqs(store: Store, host: str) -> list[int]:
    with store.cursor() as cur:
        return [int(r[0]) for r in cur.execute(
            "SELECT seq FROM train WHERE host = $h ORDER BY seq", {"h": host}).fetchall()]


@pytest.mark.parametrize("canonical", [True, False])
def test_a_seq_past_bigint_is_refused_and_the_other_hosts_are_stored(
        store: Store, canonical: bool) -> None:
    bad = train(HUGE, 5)
    if not canonical:  # the same record with its keys in another order: the slow route
        bad = b'{"seq":%d,"t":"train","ts":%r,"job":"j1","rank":0,"step":5}\n' % (
            HUGE, TS0)
    result = store.ingest_many([("bad", trains(1, 3) + bad + train(4, 4)),
                                ("good", trains(1, 5))])
    assert result.failed == ()
    assert store.high_water("good") == 5 and count(store, "train", "host = 'good'") == 5
    assert store.high_water("bad") == 4 and _seqs(store, "bad") == [1, 2, 3, 4]
    assert result.malformed == 1
    (error, sample), = _errors(store, "bad")
    assert f"`seq` in 0..{SEQ_MAX}" in error and str(HUGE) in sample
    # The next flush goes in as usual (the mark in the hosts table fits its column).
    assert store.ingest_many([("bad", trains(5, 6)), ("good", trains(6, 6))]).stored == 3


def test_seqs_that_repeat_or_go_back_within_a_chunk_are_stored_once(store: Store) -> None:
    chunk = train(30, 1) + train(30, 2) + train(25, 3) + train(31, 4)
    result = store.ingest("h1", chunk)
    assert _seqs(store, "h1") == [30, 31]
    assert result.stored == 2 and result.duplicates == 2
    # The grouping done ahead of a flush (on the transport's thread) refuses it too,
    # and so does a chunk whose repeat is of another type.
    assert pregroup(chunk) is None
    assert pregroup(train(40, 5) + gpu(41) + train(41, 6) + gpu(42)) is None
    writer = StoreWriter(store, interval=60.0)
    writer.put("h2", chunk)
    writer.put("h2", train(32, 5) + gpu(32) + train(33, 6))
    writer.flush()
    assert _seqs(store, "h2") == [30, 31, 32, 33] and count(store, "gpu", "host = 'h2'") == 0


def test_a_stream_header_from_past_what_is_stored_is_refused(store: Store) -> None:
    store.ingest("h1", header("J1") + trains(1, 3))
    # Out of range; in range but past the mark.
    for start, first in ((10**18, 4), (10**12, 6)):
        result = store.ingest("h1", header("J1", start=start, head=start)
                              + trains(first, first + 1))
        assert result.duplicates == 0 and result.stored == 2
    assert _seqs(store, "h1") == [1, 2, 3, 4, 5, 6, 7]
    errors = [e for e, _ in _errors(store, "h1")]
    assert any(f"0..{SEQ_MAX}" in e for e in errors)
    assert any("starts after seq 1000000000000, past the 5" in e for e in errors)
    # A new host's first header may not skip its records either, nor count a gap
    # beyond its own journal as lost.
    store.ingest("h2", header("J2", start=10**12, first=10**14, head=5) + trains(1, 5))
    assert _seqs(store, "h2") == [1, 2, 3, 4, 5]
    assert {r.host: r.lost for r in store.hosts()}["h2"] == 0


def test_a_header_of_the_same_journal_from_the_mark_still_counts_a_retention_gap(
        store: Store) -> None:
    store.ingest("h1", header("J1") + trains(1, 3))
    store.ingest("h1", header("J1", start=3, first=10, head=12) + trains(10, 12))
    assert {r.host: r.lost for r in store.hosts()}["h1"] == 6
    assert _seqs(store, "h1") == [1, 2, 3, 10, 11, 12]


@pytest.mark.parametrize("line, why", [
    (encode("gpu", 2, {"gpu": 0, "util": 1.0}, ts=1e300), "`ts` out of range"),
    (encode("gpu", 2, {"gpu": 0, "util": 1.0}, ts=-5.0), "`ts` out of range"),
    (train(2, STEP_MAX + 1, ts=TS0), "`step` out of range"),
    (train(2, -1, ts=TS0), "`step` out of range"),
    (encode("mystery", 2, {"x": 1}, ts=TS_MAX * 2), "`ts` out of range"),
])
def test_a_time_or_step_out_of_range_is_malformed_and_folds_go_on(
        store: Store, line: bytes, why: str) -> None:
    result = store.ingest_many([("bad", gpu(1) + line + gpu(3)), ("good", trains(1, 4))])
    assert result.malformed == 1 and result.failed == ()
    assert store.high_water("bad") == 3 and store.high_water("good") == 4
    assert any(why in e for e, _ in _errors(store, "bad"))
    store.fold_levels()  # a ts of 1e300 once failed every fold of the store
    assert store.ingest_many([("bad", gpu(4)), ("good", trains(5, 5))]).stored == 2
    store.fold_levels()


def _failing_for(monkeypatch, host: str) -> None:
    """Loading any piece of `host` fails, line by line too (a fault of that host's data
    the checks do not catch)."""
    real = database_module.load_type

    def load_type(cur, checker, scratch, wire_type, pieces, filings=()):
        if any(p.host == host for p in pieces):
            raise duckdb.ConversionException(f"cannot store {host}'s rows")
        return real(cur, checker, scratch, wire_type, pieces, filings)

    monkeypatch.setattr(database_module, "load_type", load_type)


def test_a_host_failing_line_by_line_costs_only_itself(store: Store, monkeypatch) -> None:
    _failing_for(monkeypatch, "bad")
    result = store.ingest_many([("bad", header("JB") + trains(1, 3)),
                                ("good", header("JG") + trains(1, 5)),
                                ("other", gpu(1) + gpu(2))])
    assert dict(result.failed).keys() == {"bad"}
    assert "cannot store bad's rows" in dict(result.failed)["bad"]
    assert result.by_host == {"good": 5, "other": 2}
    assert store.high_water("bad") == 0 and count(store, "train", "host = 'bad'") == 0
    assert store.high_water("good") == 5 and store.high_water("other") == 2
    # When every host fails, it is the store's failure: the flush raises as before.
    with pytest.raises(duckdb.ConversionException):
        store.ingest_many([("bad", trains(4, 4))])


def test_a_full_disk_fails_the_flush_without_trying_each_host(
        store: Store, monkeypatch) -> None:
    real = database_module.load_type
    calls: list[str] = []

    def load_type(cur, checker, scratch, wire_type, pieces, filings=()):
        calls.append(pieces[0].host)
        raise duckdb.IOException("No space left on device")

    monkeypatch.setattr(database_module, "load_type", load_type)
    with pytest.raises(duckdb.IOException):
        store.ingest_many([(f"h{i}", trains(1, 2)) for i in range(20)])
    assert len(calls) <= 3  # the whole flush, line by line, then one host: not twenty
    monkeypatch.setattr(database_module, "load_type", real)
    assert store.ingest_many([("h0", trains(1, 2))]).stored == 2


def test_the_writer_retries_a_failing_host_on_its_own(store: Store, monkeypatch) -> None:
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=60.0, on_error=errors.append)
    with monkeypatch.context() as patch:
        _failing_for(patch, "bad")
        writer.put("bad", trains(1, 3))
        writer.put("good", trains(1, 3))
        writer.flush()
        assert store.high_water("good") == 3 and store.high_water("bad") == 0
        assert [type(e) for e in errors] == [HostStoreError] and "bad" in str(errors[0])
        writer.put("bad", trains(4, 5))
        writer.put("good", trains(4, 5))
        writer.flush()
        assert store.high_water("good") == 5 and store.high_water("bad") == 0
    writer.put("good", trains(6, 6))
    writer.flush()  # the fault is gone: the kept lines go in, in order
    assert _seqs(store, "bad") == [1, 2, 3, 4, 5] and store.high_water("good") == 6


def test_lines_given_up_at_the_backlog_limit_are_fetched_again_not_skipped(
        store: Store) -> None:
    errors: list[Exception] = []
    resend: list[str] = []
    writer = StoreWriter(store, interval=60.0, on_error=errors.append,
                         max_backlog_lines=5, on_resend=resend.append)
    real = store.ingest_many

    def failing(items):
        raise duckdb.IOException("No space left on device")

    writer.put("h1", trains(1, 2))
    writer.put("h2", trains(1, 2))
    writer.flush()
    store.ingest_many = failing  # type: ignore[method-assign]
    writer.put("h1", trains(3, 10))
    writer.put("h2", trains(3, 4))
    writer.flush()  # over the limit: dropped
    assert any(isinstance(e, WriterBacklogError) and "restart" in str(e) for e in errors)
    writer.put("h1", trains(11, 12))  # the same stream goes on: refused, or it would
    writer.put("h2", trains(5, 6))    # move the marks past the dropped lines
    store.ingest_many = real  # type: ignore[method-assign]
    writer.flush()
    assert store.high_water("h1") == 2 and store.high_water("h2") == 2
    assert sorted(resend) == ["h1", "h2"] and writer.discarded_lines == 14
    # The streams restart from the mark, as asked: everything arrives, once.
    writer.put("h1", header("J1", start=2) + trains(3, 12))
    writer.put("h2", header("J2", start=2) + trains(3, 6))
    writer.flush()
    assert _seqs(store, "h1") == list(range(1, 13)) and _seqs(store, "h2") == list(range(1, 7))


def test_a_header_past_the_mark_does_not_end_a_gap(store: Store) -> None:
    resend: list[str] = []
    writer = StoreWriter(store, interval=60.0, on_error=lambda e: None,
                         max_backlog_lines=1, on_resend=resend.append)
    real = store.ingest_many
    store.ingest_many = lambda items: (_ for _ in ()).throw(  # type: ignore[method-assign]
        duckdb.IOException("No space left on device"))
    writer.put("h1", trains(1, 3))
    writer.flush()
    store.ingest_many = real  # type: ignore[method-assign]
    # A retention gap header of the old stream, from past the mark: still refused.
    writer.put("h1", header("J1", start=3, first=4) + trains(4, 5))
    writer.flush()
    assert store.high_water("h1") == 0 and resend == ["h1"]
    writer.put("h1", header("J1", start=0) + trains(1, 5))
    writer.flush()
    assert _seqs(store, "h1") == [1, 2, 3, 4, 5]


def test_the_router_keeps_only_increasing_seqs_within_bounds() -> None:
    chunk = (train(5, 1) + train(SEQ_MAX + 1, 2) + train(3, 3) + train(6, 4)
             + b'{"t":"train","seq":-4,"ts":1.0}\n' + train(6, 5) + train(7, 6))
    segment, = route_chunk(chunk, 0, lambda header, mark: mark)
    assert list(segment.seqs["train"]) == [5, 6, 7]
    assert segment.duplicates == 2 and len(segment.malformed) == 2
