from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cockpit.errors import CockpitError
from cockpit.read.report import render_report
from cockpit.sessions.replay import ReplaySource
from cockpit.store.database import Store
from tests.read import synthetic as syn


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def replay(recording: Path, clock: FakeClock):
    source = ReplaySource(recording, speed=10.0, clock=clock)
    yield source
    source.stop()


def test_clock_starts_at_the_first_record_and_runs_at_speed(replay: ReplaySource,
                                                            clock: FakeClock) -> None:
    assert replay.position == syn.T0 and replay.label == "REPLAY 10x"
    assert replay.controller is None
    clock.now += 3.0
    assert replay.position == pytest.approx(syn.T0 + 30.0)


def test_pause_freezes_resume_continues(replay: ReplaySource, clock: FakeClock) -> None:
    clock.now += 1.0
    replay.pause()
    assert replay.label == "REPLAY 10x PAUSED" and not replay.playing
    clock.now += 100.0
    assert replay.position == pytest.approx(syn.T0 + 10.0)
    replay.resume()
    clock.now += 1.0
    assert replay.position == pytest.approx(syn.T0 + 20.0)


def test_speed_change_keeps_the_position(replay: ReplaySource, clock: FakeClock) -> None:
    clock.now += 1.0
    replay.set_speed(100.0)
    assert replay.position == pytest.approx(syn.T0 + 10.0)
    clock.now += 1.0
    assert replay.position == pytest.approx(syn.T0 + 110.0)
    assert replay.label == "REPLAY 100x"
    with pytest.raises(ValueError, match="positive"):
        replay.set_speed(0)


def test_seek_is_relative_and_clamped(replay: ReplaySource) -> None:
    replay.pause()
    replay.seek(60.0)
    assert replay.position == pytest.approx(syn.T0 + 60.0)
    replay.seek(-1e6)
    assert replay.position == syn.T0
    replay.seek_to(0.5)
    assert replay.fraction == pytest.approx(0.5)
    replay.seek_to(7.0)
    assert replay.position == replay.end_ts


def test_reaching_the_end_pauses_and_resume_restarts(replay: ReplaySource,
                                                     clock: FakeClock) -> None:
    clock.now += 1e6
    assert replay.position == replay.end_ts and not replay.playing
    replay.resume()
    assert replay.position == syn.T0 and replay.playing


def test_the_end_is_shown_once_reached_whoever_noticed_it(recording: Path,
                                                        clock: FakeClock) -> None:
    """At 200x a tick moves the cursor by 40 s: the tick that crosses the end must still
    show the end, paused, even when a label read noticed it first. The screen stayed on
    the tick before, marked playing, and space then restarted from the start."""
    shown: list[float] = []
    source = ReplaySource(recording, speed=200.0, clock=clock, tick=0.01)
    try:
        source.seek_to(0.99)
        source.pause()
        source.start(lambda: shown.append(source.position))
        pause = threading.Event()
        for _ in range(500):  # the seek shown: nothing left to show while paused
            if len(shown) >= 2:
                break
            pause.wait(0.01)
        source.resume()
        for _ in range(500):  # the resume shown
            if len(shown) >= 3:
                break
            pause.wait(0.01)
        clock.now += 1e6  # the end passed between two ticks ...
        assert "PAUSED" in source.label  # ... and noticed here, not by the clock thread
        for _ in range(500):
            if shown[-1] == source.end_ts:
                break
            pause.wait(0.01)
        assert shown[-1] == source.end_ts
    finally:
        source.stop()


def test_snapshot_and_details_see_only_up_to_the_cursor(replay: ReplaySource) -> None:
    replay.pause()
    replay.seek_to(0.0)
    replay.seek(syn.step_ts(100) - syn.T0 + 0.5)
    snap = replay.snapshot(buckets=30)
    assert snap.progress.step == 100 and snap.source_label == "REPLAY 10x PAUSED"
    assert snap.ts == replay.position and not snap.controllable
    log = replay.details("log")
    assert all(line.ts <= replay.position for line in log.lines)


def test_timer_thread_calls_on_data(replay: ReplaySource) -> None:
    called = threading.Event()
    replay.start(called.set)
    assert called.wait(timeout=10)


def test_empty_or_missing_recordings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CockpitError, match="does not exist"):
        ReplaySource(tmp_path / "nope.duckdb")
    Store(tmp_path / "empty.duckdb").close()
    with pytest.raises(CockpitError, match="no records to replay"):
        ReplaySource(tmp_path / "empty.duckdb")


def test_a_replay_caps_the_database_memory(replay: ReplaySource) -> None:
    """Without a cap DuckDB keeps every block the replay walks past: memory would grow
    with the part of the recording played so far."""
    import duckdb

    from cockpit.sessions.replay import MEMORY_LIMIT

    reference = duckdb.connect()
    (default,) = reference.execute("SELECT current_setting('memory_limit')").fetchone()
    reference.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    (capped,) = reference.execute("SELECT current_setting('memory_limit')").fetchone()
    with replay._store.cursor() as cur:
        (actual,) = cur.execute("SELECT current_setting('memory_limit')").fetchone()
    assert actual == capped != default


@pytest.mark.slow
def test_at_its_end_a_replay_shows_the_links_as_the_report_does(tmp_path: Path) -> None:
    """The session that recorded the run closed its links ("stopped"): a replay that
    reached the end reads that too, not "streaming" as if the hosts still sent."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        for host in syn.HOSTS:
            store.set_host_state(host, "stopped", "the cockpit closed the link")
    reported = {h["host"]: h["state"]
                for h in json.loads(render_report(path, fmt="json"))["health"]["hosts"]}
    assert reported == dict.fromkeys(syn.HOSTS, "stopped")
    source = ReplaySource(path, speed=10.0, clock=FakeClock())
    try:
        source.seek_to(0.5)  # mid-recording: what the records say
        assert {h.state for h in source.snapshot().health.hosts} == {"streaming"}
        source.seek_to(1.0)
        shown = {h.host: h.state for h in source.snapshot().health.hosts}
        assert shown == reported
        assert source.details("host", host=syn.HOSTS[0]).state == "stopped"
        assert not any(a.code.startswith("host_") for a in source.snapshot().alerts)
    finally:
        source.stop()


def test_stop_waits_for_a_snapshot_in_flight_then_refuses_reads(
        recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app quits while its worker still builds a snapshot: the recording is closed
    once that read returns (DuckDB refuses to close a connection in use), not under it."""
    import cockpit.sessions.replay as replay_module

    source = ReplaySource(recording, speed=1.0)
    reading, release = threading.Event(), threading.Event()
    real = replay_module.build_snapshot

    def slow(*args: Any, **kw: Any) -> Any:
        reading.set()
        assert release.wait(10)
        return real(*args, **kw)

    monkeypatch.setattr(replay_module, "build_snapshot", slow)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(source.snapshot()))
    worker.start()
    assert reading.wait(10)
    stopper = threading.Thread(target=source.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "stop must wait for the snapshot being built"
    release.set()
    worker.join(10)
    stopper.join(10)
    assert not stopper.is_alive() and len(results) == 1  # the snapshot came back whole
    with pytest.raises(CockpitError, match="the replay has stopped"):
        source.snapshot()
