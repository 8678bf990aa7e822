"""The store writer's thread outlives an unexpected failure of one of its iterations: the
batch it took is queued again at the front (nothing recorded is lost), the failure is
reported through `on_error`, and the next try waits a bounded back-off."""

from __future__ import annotations

import threading
import time

import duckdb
import pytest

from cockpit.store import Store
from cockpit.store import writer as writer_module
from cockpit.store.writer import StoreWriter, WriterFaultError
from tests.harness.waiting import wait_for
from tests.store.wire import count, trains


def test_a_fault_after_the_batch_was_taken_keeps_it_and_the_thread(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "BACKOFF_MIN_S", 0.3)
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=0.01, on_error=errors.append)
    calls: list[float] = []
    real = writer._ask_resend

    def ask_resend() -> None:  # the first thing `_commit` does once the batch is taken
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("an unexpected fault")
        real()

    writer._ask_resend = ask_resend  # type: ignore[method-assign]
    writer.put("h1", trains(1, 5))
    writer.start()
    try:
        assert wait_for(lambda: store.high_water("h1") == 5), errors
        assert writer._thread is not None and writer._thread.is_alive()
        (error,) = errors
        assert isinstance(error, WriterFaultError)
        assert "RuntimeError: an unexpected fault" in str(error) and "kept" in str(error)
        assert calls[1] - calls[0] >= 0.25  # backed off, not tried again at once
        writer.put("h1", trains(6, 8))  # and it goes on flushing
        assert wait_for(lambda: store.high_water("h1") == 8)
    finally:
        writer.stop()
    assert count(store, "train") == 8


def test_a_repeating_fault_backs_off_up_to_the_cap(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "BACKOFF_MIN_S", 0.05)
    monkeypatch.setattr(writer_module, "BACKOFF_MAX_S", 0.2)
    errors: list[Exception] = []
    writer = StoreWriter(store, interval=0.001, on_error=errors.append,
                         max_lines=1)  # a full buffer must not cut the back-off short
    broken = threading.Event()
    broken.set()
    real = writer._ask_resend

    def ask_resend() -> None:
        if broken.is_set():
            raise RuntimeError("still broken")
        real()

    writer._ask_resend = ask_resend  # type: ignore[method-assign]
    writer.put("h1", trains(1, 5))
    writer.start()
    try:
        time.sleep(1.2)
        # 0.05 + 0.1 + 0.2 + 0.2 ...: a handful of tries, not a spin.
        assert 3 <= len(errors) <= 10, len(errors)
        assert all(isinstance(e, WriterFaultError) for e in errors)
        assert "tried again in 0.2 s" in str(errors[-1])
        assert writer.backlog_lines == 5
        broken.clear()
        assert wait_for(lambda: store.high_water("h1") == 5)
    finally:
        writer.stop()


def test_an_on_error_that_raises_loses_no_line_and_no_thread(store: Store) -> None:
    reported: list[Exception] = []

    def on_error(exc: Exception) -> None:
        reported.append(exc)
        if len(reported) == 1:
            raise RuntimeError("the screen's handler failed")

    writer = StoreWriter(store, interval=0.01, on_error=on_error)
    real = store.ingest_many
    calls = {"n": 0}

    def failing_once(items):
        calls["n"] += 1
        if calls["n"] == 1:
            raise duckdb.IOException("No space left on device")
        return real(items)

    store.ingest_many = failing_once  # type: ignore[method-assign]
    writer.put("h1", trains(1, 5))
    writer.start()
    try:
        assert wait_for(lambda: store.high_water("h1") == 5), reported
        assert writer._thread is not None and writer._thread.is_alive()
        assert "No space left on device" in str(reported[0])
    finally:
        writer.stop()


def test_a_flush_that_raises_keeps_its_batch(store: Store) -> None:
    writer = StoreWriter(store, interval=60.0)
    real = writer._ask_resend

    def ask_resend() -> None:
        writer._ask_resend = real  # type: ignore[method-assign]
        raise RuntimeError("an unexpected fault")

    writer._ask_resend = ask_resend  # type: ignore[method-assign]
    writer.put("h1", trains(1, 5))
    with pytest.raises(RuntimeError):
        writer.flush()
    assert writer.backlog_lines == 5
    writer.put("h1", trains(6, 7))
    result = writer.flush()
    assert result is not None and result.stored == 7 and store.high_water("h1") == 7
