"""The Slurm watcher's thread outlives a failure that is not Slurm's (handing a node on to
the fleet, say): it is said as text (never a traceback under the screen), the watch
backs off and goes on, and the nodes whose hand-on failed are handed on again."""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path

import pytest

from cockpit.control.slurm import SlurmJob
from cockpit.control.slurm_watch import SlurmWatcher
from tests.harness.waiting import wait_for
from tests.slurm.test_slurm_records import _Queue, _spec

HOSTILE = "fleet.add failed: \x1b]0;PWN\x07\u009b2J\u202e"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")
RUNNING = ("JobId=41 JobState=RUNNING Reason=None NodeList=g[1-2] Partition=gpu "
           "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:00:09")




def _job(tmp_path: Path, queue: _Queue, events: list[dict]) -> SlurmJob:
    return SlurmJob(_spec(tmp_path), queue, emit=lambda host, chunk: events.extend(
        json.loads(line) for line in chunk.splitlines() if b'"event"' in line))


def test_a_failing_hand_on_of_the_nodes_does_not_end_the_watch(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    queue = _Queue()
    events: list[dict] = []
    job = _job(tmp_path, queue, events)
    queue.current, queue.job = "41\n", RUNNING
    told: list[tuple[str, ...]] = []
    failures = {"left": 3}

    def on_nodes(nodes: tuple[str, ...]) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError(HOSTILE)
        told.append(nodes)

    watcher = SlurmWatcher(job, on_nodes, every=0.01)
    with caplog.at_level(logging.WARNING, logger="cockpit.control.slurm_watch"):
        watcher.start()
        try:
            # Handed on again once the fault passed, after backing off.
            assert wait_for(lambda: told == [("g1", "g2")]), told
            assert watcher._thread is not None and watcher._thread.is_alive()
            assert watcher.problem is None
            # And it goes on watching: a resume's new submission is followed.
            queue.current = "42\n"
            queue.job = RUNNING.replace("JobId=41", "JobId=42")
            assert wait_for(lambda: told == [("g1", "g2"), ("g1", "g2")]), told
            assert job.job_id == "42"
        finally:
            watcher.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages  # the same fault said once while it repeats
    assert "RuntimeError: fleet.add failed" in messages[0]
    for message in messages:
        for control in CONTROLS:
            assert control not in message, message
    assert "Traceback" not in capsys.readouterr().err
    assert [e["kind"] for e in events][:1] == ["slurm_running"]


def test_a_repeating_fault_backs_off(tmp_path: Path) -> None:
    queue = _Queue()
    events: list[dict] = []
    job = _job(tmp_path, queue, events)
    queue.current, queue.job = "41\n", RUNNING
    tries: list[float] = []

    def on_nodes(nodes: tuple[str, ...]) -> None:
        tries.append(time.monotonic())
        raise RuntimeError("the fleet is broken")

    watcher = SlurmWatcher(job, on_nodes, every=0.02)
    watcher.start()
    try:
        time.sleep(1.0)
        assert watcher._thread is not None and watcher._thread.is_alive()
    finally:
        watcher._stop.set()  # no last look: it would fail the same way
        assert watcher._thread is not None
        watcher._thread.join(10)
    # 0.04 + 0.08 + 0.16 + 0.32 ...: a handful of tries, not one every 0.02 s.
    assert 3 <= len(tries) <= 8, len(tries)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert max(gaps) >= 0.15, gaps  # the waits grew
    assert watcher.problem == "RuntimeError: the fleet is broken"


def test_the_last_look_failing_unexpectedly_does_not_break_the_teardown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    queue = _Queue()
    job = _job(tmp_path, queue, [])
    queue.current, queue.job = "41\n", RUNNING

    def on_nodes(nodes: tuple[str, ...]) -> None:
        raise RuntimeError(HOSTILE)

    watcher = SlurmWatcher(job, on_nodes)  # never started: only the last look
    with caplog.at_level(logging.WARNING, logger="cockpit.control.slurm_watch"):
        watcher.stop()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "last look failed unexpectedly" in message and "RuntimeError" in message
    for control in CONTROLS:
        assert control not in message
