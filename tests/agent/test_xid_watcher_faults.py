"""The XID thread survives a failure of one round: `on_xid` raising on one event, or
NVML's wait failing. It is reported (the daemon journals a `sampler_error`) and the
next XID is still seen. Before, the first exception from `on_xid` ended the thread for
good, in silence, while the hello went on saying the GPUs' XIDs were seen."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agent.samplers.nvml as nvml_module
from agent.daemon import Daemon, DaemonConfig
from agent.journal.journal import JournalReader
from agent.samplers.nvml import Nvml, XidWatcher
from agent.wire.events import SAMPLER_ERROR, XID
from tests.agent.test_agent_nvml import FakeNvml, NVMLError
from tests.harness.waiting import wait_for


def _wait_for(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """`timeout` only bounds a hang (`tests.harness.waiting.wait_for`, polled every 20 ms)."""
    wait_for(cond, timeout, what, poll=0.02)


def _event(gpu: int, xid: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(device=gpu, eventType=0x8, eventData=xid)


def test_an_on_xid_that_raises_once_is_reported_and_the_thread_goes_on() -> None:
    fake = FakeNvml(gpus=1)
    seen: list[tuple[int, int]] = []
    errors: list[tuple[str, dict]] = []

    def on_xid(gpu: int, xid: int, ts: float) -> None:
        if not seen and not errors:
            raise RuntimeError("journal hiccup")
        seen.append((gpu, xid))

    watcher = XidWatcher(Nvml(fake), on_xid, timeout_ms=20,
                         on_error=lambda msg, data: errors.append((msg, data)))
    assert watcher.start()
    try:
        fake.events.put(_event(0, 79))
        _wait_for(lambda: errors, "the failure reported")
        fake.events.put(_event(0, 48))
        _wait_for(lambda: seen, "the next XID")
        assert watcher._thread is not None and watcher._thread.is_alive()
    finally:
        watcher.stop()
    assert seen == [(0, 48)]
    (msg, data), = errors
    assert "XID 79 of GPU 0" in msg and "RuntimeError: journal hiccup" in msg
    assert data == {"sampler": "xid", "gpu": 0, "xid": 79}
    assert fake.calls["nvmlEventSetFree"] == 1


def test_failed_waits_are_reported_and_backed_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait that keeps failing (not its timeout) is said each time and tried again
    ever more slowly, up to a bound: the thread neither spins nor ends."""
    fake = FakeNvml(gpus=1)
    failing = [True]
    real_wait = fake.nvmlEventSetWait

    def wait(event_set: str, timeout_ms: int) -> Any:
        if failing[0]:
            raise NVMLError(15)  # GPU_IS_LOST
        return real_wait(event_set, timeout_ms)

    fake.nvmlEventSetWait = wait  # type: ignore[method-assign]
    waits: list[float] = []

    class Recorded(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if timeout is not None:
                waits.append(timeout)
                timeout = 0.01  # the test need not sit through the back-off
            return super().wait(timeout)

    monkeypatch.setattr(nvml_module, "XID_RETRY_MAX", 4.0)
    errors: list[str] = []
    seen: list[int] = []
    watcher = XidWatcher(Nvml(fake), lambda gpu, xid, ts: seen.append(xid), timeout_ms=20,
                         on_error=lambda msg, data: errors.append(msg))
    watcher._stop = Recorded()
    assert watcher.start()
    try:
        _wait_for(lambda: len(waits) >= 5, "five failed waits")
        failing[0] = False
        fake.events.put(_event(0, 79))
        _wait_for(lambda: seen, "the XID after the failures")
    finally:
        watcher.stop()
    assert waits[:5] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert all("waiting for XID events failed" in msg for msg in errors)


def test_the_daemon_journals_a_failed_xid_and_still_sees_the_next(
        tmp_path: Path) -> None:
    fake = FakeNvml(gpus=1)
    state = tmp_path / "state"
    daemon = Daemon(DaemonConfig(state), gpus=Nvml(fake), log=lambda msg: None)
    calls: list[int] = []
    real_note = daemon.gpu_history.note_xid

    def note_xid(gpu: int, xid: int, ts: float, jobs: list[str]) -> Any:
        calls.append(xid)
        if len(calls) == 1:
            raise RuntimeError("history is broken")
        return real_note(gpu, xid, ts, jobs)

    daemon.gpu_history.note_xid = note_xid  # type: ignore[method-assign]
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()

    def events(kind: str) -> list[dict]:
        return [r for r in JournalReader(state).records()
                if r["t"] == "event" and r.get("kind") == kind]

    try:
        _wait_for(lambda: daemon.xid is not None and daemon.xid._thread is not None,
                  "the XID thread")
        fake.events.put(_event(0, 79))
        _wait_for(lambda: [e for e in events(SAMPLER_ERROR)
                           if e["data"].get("sampler") == "xid"], "the failure journaled")
        fake.events.put(_event(0, 48))
        _wait_for(lambda: len(events(XID)) == 2, "the next XID journaled")
        assert daemon.xid is not None and daemon.xid._thread is not None
        assert daemon.xid._thread.is_alive()
    finally:
        daemon.stop()
        runner.join(30)
    assert [e["data"]["xid"] for e in events(XID)] == [79, 48]
    error, = [e for e in events(SAMPLER_ERROR) if e["data"].get("sampler") == "xid"]
    assert "XID 79 of GPU 0" in error["msg"] and "history is broken" in error["msg"]
    assert error["data"]["gpu"] == 0 and error["data"]["xid"] == 79
