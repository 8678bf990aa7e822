"""StoreWriter: batching from many threads, commit cadence, committed-only high water, and
its failures shown to the operator of a live session."""

from __future__ import annotations

import argparse
import threading

import duckdb

from cockpit.app.cli import _after_live
from cockpit.sessions.live import LiveSession
from cockpit.store import IngestResult, Store
from cockpit.store import writer as writer_module
from cockpit.store.writer import StoreWriter, WriterBacklogError
from tests.store.wire import count, trains


def test_high_water_moves_only_after_the_commit(store: Store) -> None:
    writer = StoreWriter(store, interval=60.0)
    writer.put("h1", trains(1, 10))
    assert writer.high_water("h1") == 0
    assert count(store, "train") == 0
    result = writer.flush()
    assert result is not None and result.stored == 10
    assert writer.high_water("h1") == 10


def test_a_failing_commit_leaves_the_mark_and_keeps_the_batch(store: Store) -> None:
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=60.0, on_error=errors.append)
    real = store.ingest_many
    calls = {"n": 0}

    def failing(items):  # the first commit fails as a full disk would
        calls["n"] += 1
        if calls["n"] == 1:
            raise duckdb.IOException("No space left on device")
        return real(items)

    store.ingest_many = failing  # type: ignore[method-assign]
    writer.put("h1", trains(1, 5))
    assert writer.flush() is None
    assert store.high_water("h1") == 0 and len(errors) == 1
    writer.put("h1", trains(6, 8))
    seen: list = []
    store.ingest_many = lambda items: seen.extend(items) or real(seen)  # type: ignore
    result = writer.flush()
    assert result is not None and result.stored == 8
    assert store.high_water("h1") == 8
    # The kept batch waits as it came (its grouping dropped, to bound a backlog's
    # memory); what arrived since was grouped ahead of the flush.
    assert [grouped is not None for _, _, grouped in seen] == [False, True]


def test_a_large_backlog_is_queued_as_it_came(store: Store, monkeypatch) -> None:
    monkeypatch.setattr(writer_module, "PREGROUP_MAX_PENDING_BYTES", len(trains(1, 5)) + 1)
    writer = StoreWriter(store, interval=60.0)
    seen: list = []
    real = store.ingest_many
    store.ingest_many = lambda items: seen.extend(items) or real(seen)  # type: ignore
    for first in (1, 6, 11):
        writer.put("h1", trains(first, first + 4))
    result = writer.flush()
    assert result is not None and result.stored == 15
    assert [grouped is not None for _, _, grouped in seen] == [True, True, False]


def test_the_backlog_is_bounded_and_dropping_is_reported(store: Store) -> None:
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=60.0, on_error=errors.append, max_backlog_lines=5)

    def failing(items):
        raise duckdb.IOException("No space left on device")

    store.ingest_many = failing  # type: ignore[method-assign]
    writer.put("h1", trains(1, 10))
    writer.flush()
    assert any(isinstance(e, WriterBacklogError) and "h1" in str(e) for e in errors)
    assert writer.flush() is None  # nothing was kept


def test_the_writer_thread_flushes_on_its_interval_and_reports(store: Store) -> None:
    flushed: list[IngestResult] = []
    arrived = threading.Event()

    def on_flush(result: IngestResult) -> None:
        flushed.append(result)
        arrived.set()

    writer = StoreWriter(store, on_flush=on_flush, interval=0.05).start()
    try:
        threads = [
            threading.Thread(target=writer.put, args=(f"h{i}", trains(1, 20))) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert arrived.wait(10), "no flush reported"
    finally:
        writer.stop()
    assert sum(r.stored for r in flushed) == 80
    assert {h for r in flushed for h in r.by_host} == {"h0", "h1", "h2", "h3"}
    assert all(store.high_water(f"h{i}") == 20 for i in range(4))


def test_a_full_buffer_is_flushed_before_the_interval(store: Store) -> None:
    arrived = threading.Event()
    writer = StoreWriter(store, on_flush=lambda r: arrived.set(), interval=3600.0,
                         max_lines=50).start()
    try:
        writer.put("h1", trains(1, 60))
        assert arrived.wait(10), "a full buffer did not trigger a flush"
    finally:
        writer.stop()
    assert store.high_water("h1") == 60


def test_stop_flushes_what_is_queued(store: Store) -> None:
    writer = StoreWriter(store, interval=3600.0).start()
    writer.put("h1", trains(1, 3))
    writer.stop()
    assert store.high_water("h1") == 3


def test_a_flush_waits_for_the_commit_the_writer_thread_has_under_way(store: Store) -> None:
    """An operation's wait flushes on its own thread while the writer thread commits: a
    later batch committed first would move the mark past the earlier one's lines, and
    those would be dropped as already stored."""
    first_entered, release, second_entered = (threading.Event() for _ in range(3))
    real = store.ingest_many
    calls = {"n": 0}

    def gated(items):
        calls["n"] += 1
        if calls["n"] == 1:  # the writer thread's batch, held mid-commit
            first_entered.set()
            assert release.wait(10)
        else:
            second_entered.set()
        return real(items)

    store.ingest_many = gated  # type: ignore[method-assign]
    writer = StoreWriter(store, interval=0.01).start()
    try:
        writer.put("h1", trains(1, 10))
        assert first_entered.wait(10), "the writer thread took no batch"
        writer.put("h1", trains(11, 20))
        flusher = threading.Thread(target=writer.flush)
        flusher.start()
        # Given the chance, a flush that did not wait would commit its batch now.
        started_early = second_entered.wait(0.3)
        release.set()
        flusher.join(10)
    finally:
        release.set()
        writer.stop()
    assert count(store, "train") == 20 and store.high_water("h1") == 20
    assert not started_early, "the flush committed while an earlier batch was under way"


def test_expensive_flushes_are_spaced_out_but_never_beyond_the_cap(store: Store) -> None:
    writer = StoreWriter(store, interval=0.5, max_interval=1.0, quiet_factor=4.0)
    assert writer.next_wait() == 0.5
    writer._last_flush_s = 0.2  # what the writer thread measured of its last flush
    assert writer.next_wait() == 0.8
    writer._last_flush_s = 3.0
    assert writer.next_wait() == 1.0


def test_a_live_session_shows_a_failing_store_as_a_critical_alert(tmp_path, capsys) -> None:
    """The writer's failures happen on its thread, under the UI: the screen (an alert)
    and a headless run's exit status are where the operator learns the recording has
    gaps, since a log line is drawn over by the UI."""
    session = LiveSession([], tmp_path / "live.duckdb")
    try:
        assert session.source.snapshot().alerts == ()
        assert session.store_problem() is None

        def failing(items):
            raise duckdb.IOException("No space left on device")

        session.store.ingest_many = failing  # type: ignore[method-assign]
        session.writer.put("h1", trains(1, 5))
        session.writer.flush()
        (alert,) = [a for a in session.source.snapshot().alerts if a.code == "store-write"]
        assert alert.severity == "critical" and "live.duckdb" in alert.where
        assert "failed 1 time; latest: IOException: No space left on device" in alert.what
    finally:
        session.stop()
    args = argparse.Namespace(headless=1.0)
    assert _after_live(session.store_path, args, {}, session.store_problem()) == 1
    assert "No space left on device" in capsys.readouterr().err


def test_a_host_state_the_store_cannot_take_is_reported_not_dropped(tmp_path) -> None:
    session = LiveSession([], tmp_path / "live.duckdb")
    try:
        def failing(*_args, **_kwargs):
            raise duckdb.IOException("No space left on device")

        session.store.set_host_state = failing  # type: ignore[method-assign]
        session._on_state("h1", "streaming", "")
        problem = session.store_problem()
        assert problem is not None and "No space left on device" in problem
    finally:
        session.stop()


def test_a_store_failure_retried_with_success_clears_but_lost_lines_stay(tmp_path) -> None:
    """A failed flush is retried with the next one: once that stores the queued lines,
    nothing is missing and the alert goes; lines given up past the backlog limit are a gap
    for good, and the alert stays."""
    session = LiveSession([], tmp_path / "live.duckdb")
    try:
        real = session.store.ingest_many

        def failing(items):
            raise duckdb.IOException("No space left on device")

        session.store.ingest_many = failing  # type: ignore[method-assign]
        session.writer.put("h1", trains(1, 5))
        session.writer.flush()
        assert session.store_problem() is not None
        session.store.ingest_many = real  # type: ignore[method-assign]
        session.writer.put("h1", trains(6, 8))
        session.writer.flush()
        assert session.store.high_water("h1") == 8
        assert session.store_problem() is None and session.store_alert() is None
        session._on_store_error(WriterBacklogError("the store kept failing; dropped 5 lines"))
        session.writer.put("h1", trains(9, 9))
        session.writer.flush()
        problem = session.store_problem()
        assert problem is not None and "dropped 5 lines" in problem
    finally:
        session.stop()


def test_maintenance_with_work_left_runs_again_after_the_next_flush(store: Store) -> None:
    """Retention of a long backlog goes in parts (it holds up the flushes): a part that
    says more is left is followed by the next one after a flush, not an hour later."""
    calls: list[int] = []
    done = threading.Event()
    writer = StoreWriter(store, interval=0.05, maintenance_every=0.0)

    def maintain(_store: Store) -> bool:
        writer.maintenance_every = 3600.0  # the first part at once, then hourly
        calls.append(count(store, "train"))
        if len(calls) == 3:
            done.set()
        return len(calls) < 3  # two parts with work left, then done

    writer.maintenance = maintain
    writer.start()
    try:
        writer.put("h1", trains(1, 5))
        assert done.wait(10), calls
        assert calls[-1] == 5  # the flushes went on between the parts
        threading.Event().wait(0.3)  # several flush waits: no fourth part
    finally:
        writer.stop(timeout=10)
    assert len(calls) == 3
