"""Stopping races of the agent: a job closed while its thread is busy starts nothing
afterwards, a launch that could not start leaves no job behind, and the SIGTERM handler
takes no lock the daemon's main thread may hold.

Real threads, real processes (a stand-in `python` that only sleeps: the agent starts it
as torchrun, through its wrapper) and real files throughout."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.daemon import POLL, Daemon, DaemonConfig
from agent.job import managed
from agent.job.launch import LaunchSpec
from agent.job.managed import RUNNING, STOPPED, ManagedJob
from agent.journal.control_inbox import append_op
from agent.journal.journal import Journal, JournalReader
from agent.samplers.sim import SimGpus
from agent.wire import jobstate
from tests.harness.waiting import wait_for

# How long close() waits here for the job's thread (the agent's own is 15 s past the
# grace): long enough for a thread that is free to end, short for one held in a look.
CLOSE_WAIT_S = 1.0


def _sleeper(tmp_path: Path) -> Path:
    """A `python` that sleeps whatever it is asked to run: a job that runs until stopped."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 120\n")
    python.chmod(0o755)
    return python


def _raw_spec(tmp_path: Path, run_dir: Path, name: str = "closing") -> dict[str, Any]:
    return {"name": name, "python": str(_sleeper(tmp_path)), "script": "train.py",
            "nproc_per_node": 1, "run_dir": str(run_dir), "stop_grace": 1}


def _events(state: Path, kind: str) -> list[dict]:
    return [r for r in JournalReader(state).records()
            if r["t"] == "event" and r["kind"] == kind]


def _running_job(tmp_path: Path) -> tuple[ManagedJob, Journal]:
    journal = Journal(tmp_path / "state")
    job = ManagedJob(LaunchSpec(_raw_spec(tmp_path, tmp_path / "run")), journal, {},
                     log=lambda msg: None)
    job.start()
    wait_for(lambda: job.state == RUNNING and job.running, 30, "the job to run")
    return job, journal


def _saved_state(state: Path, name: str) -> object:
    saved = jobstate.read(jobstate.path(state, name))
    return saved.get("state") if saved is not None else None


def test_a_job_closed_while_its_thread_looks_for_a_checkpoint_starts_no_new_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A relaunch held in a slow look at the checkpoint dir when the agent stops: close()
    gives up waiting for the job's thread, and when the look ends at last the relaunch
    starts nothing (before, a new torchrun started that no agent watched)."""
    monkeypatch.setattr(managed, "CLOSE_WAIT", CLOSE_WAIT_S)
    job, journal = _running_job(tmp_path)
    state = tmp_path / "state"
    looking, answer = threading.Event(), threading.Event()
    newest = job.newest_checkpoint

    def slow_look() -> tuple:
        looking.set()
        answer.wait(60)
        return newest()

    monkeypatch.setattr(job, "newest_checkpoint", slow_look)
    thread = job._thread
    assert thread is not None
    try:
        job.request("relaunch", {"id": "r-1"})
        assert looking.wait(30), "the relaunch never looked for its checkpoint"
        job.close(0.0)
        assert thread.is_alive()  # still in the look: close() did not wait for it
        assert _saved_state(state, "closing") == STOPPED
        answer.set()
        thread.join(30)
        assert not thread.is_alive()
        assert len(_events(state, "job_started")) == 1  # the first attempt's alone
        assert job.attempt == 1
        assert not job.running
        assert _saved_state(state, "closing") == STOPPED  # nothing for an agent to adopt
    finally:
        answer.set()
        sup = job.supervisor
        if sup is not None and sup.running:
            sup.stop(0.0)
        journal.close()


@pytest.mark.parametrize("follow", [False, True], ids=["checkpoint", "follow"])
def test_a_pause_under_way_gives_up_when_the_agent_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follow: bool,
) -> None:
    """A pause waits up to its timeout for a checkpoint (or, following rank 0's host, for
    this host's part to end); the agent's stop ends that wait at once, says so in the
    pause's event, and stops the job, well within close()'s wait for its thread."""
    monkeypatch.setattr(managed, "CLOSE_WAIT", 20.0)
    job, journal = _running_job(tmp_path)
    state = tmp_path / "state"
    thread = job._thread
    assert thread is not None
    try:
        job.request("pause", {"id": "p-1", "timeout": 120.0, "follow": follow})
        wait_for(lambda: job.state == managed.PAUSING, 30, "the pause to begin")
        began = time.monotonic()
        job.close(0.0)
        took = time.monotonic() - began
        assert not thread.is_alive()
        assert took < 10.0, took
        assert not job.running
        (pause,) = _events(state, "pause")
        assert pause["data"]["ok"] is False and pause["data"]["id"] == "p-1"
        assert "agent is stopping" in pause["msg"]
        assert _saved_state(state, "closing") == STOPPED
    finally:
        sup = job.supervisor
        if sup is not None and sup.running:
            sup.stop(0.0)
        journal.close()


def test_a_launch_that_cannot_make_its_run_dir_leaves_only_its_refusal(
    tmp_path: Path,
) -> None:
    """A regular file where the run dir's parent should be: the launch is refused, and
    no job of that name is left behind (before, one stayed "starting" with no thread:
    the next launch was refused, a stop accepted and never done). With the file gone, a
    second launch is accepted and runs."""
    state = tmp_path / "state"
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where a dir should be\n")
    spec = _raw_spec(tmp_path, blocker / "run")
    daemon = Daemon(DaemonConfig(state), gpus=SimGpus(1), log=lambda msg: None)

    def op(op_id: str, name: str, **args: object) -> dict:
        append_op(state, {"op": name, "id": op_id, "_rx": time.time(), **args})
        daemon.inbox.poll()
        return next(r["data"] for r in _events(state, "control_ack")
                    if r["data"]["id"] == op_id)

    try:
        refused = op("l-1", "launch", spec=spec)
        assert refused["ok"] is False and "blocked" in refused["error"]
        assert "closing" not in daemon.jobs
        assert jobstate.load_all(state) == []  # nothing a next agent would adopt
        stop = op("s-1", "stop", job="closing")
        assert stop["ok"] is False, stop  # refused, not accepted and never carried out
        blocker.unlink()
        accepted = op("l-2", "launch", spec=spec)
        assert accepted["ok"] is True, accepted
        job = daemon.jobs["closing"]
        wait_for(lambda: job.state == RUNNING and job.running, 30, "the second launch")
    finally:
        daemon._shutdown()


def test_the_stop_signal_takes_no_lock_the_main_thread_may_hold(tmp_path: Path) -> None:
    """A signal handler runs on the main thread between two of its bytecodes, possibly
    inside `Event.wait` with the Event's own (non-reentrant) lock held: a handler that
    sets that Event waits on that lock forever. The handler only notes the stop; the
    main loop, after its next wait, stops within POLL."""
    from agent import daemon as daemon_module

    daemon = Daemon(DaemonConfig(tmp_path / "state"), gpus=SimGpus(1), log=lambda m: None)
    handler = daemon_module.StopSignal()
    handler.daemon = daemon
    runner = threading.Thread(target=daemon.run, name="daemon-main", daemon=True)
    runner.start()
    wait_for(lambda: daemon._sampler is not None, 30, "the daemon's loop")
    handled = threading.Event()

    def in_wait() -> None:
        # As the main thread stands inside `Event.wait`, holding the Event's lock.
        with daemon._stop._cond:  # type: ignore[attr-defined]
            handler(signal.SIGTERM, None)
            handled.set()

    holder = threading.Thread(target=in_wait, name="in-wait", daemon=True)
    holder.start()
    try:
        assert handled.wait(5.0), "the handler blocked on the lock its thread holds"
        assert handler.asked
        # Noted by the loop after its next wait: within POLL (and a loaded machine's
        # scheduling), not at some later event.
        wait_for(daemon._stop.is_set, POLL + 0.5, "the loop to see the stop", poll=0.01)
        runner.join(30)
        assert not runner.is_alive()
    finally:
        if not handled.is_set():  # unblock the stuck handler (any thread may release)
            daemon._stop._cond.release()  # type: ignore[attr-defined]
        if runner.is_alive():
            daemon.stop()
            runner.join(30)


def test_a_part_replaced_by_a_new_launch_ends_its_thread(tmp_path: Path) -> None:
    """A launch after the job's part ended replaces it: the old part's thread ends (it
    looked every half second and followed the other hosts' markers for the agent's life),
    and the new part's state is not overwritten by the old one's close."""
    state = tmp_path / "state"
    spec = _raw_spec(tmp_path, tmp_path / "run")
    daemon = Daemon(DaemonConfig(state), gpus=SimGpus(1), log=lambda msg: None)
    try:
        first = daemon._start_job(LaunchSpec(spec), op_id="l1-h")
        wait_for(lambda: first.state == RUNNING and first.running, 30, "the first part")
        first.request("stop", {"grace": 1})
        wait_for(lambda: first.state == STOPPED, 30, "the first part's stop")
        old_thread = first._thread
        assert old_thread is not None and old_thread.is_alive()
        second = daemon._start_job(LaunchSpec(spec), op_id="l2-h")
        wait_for(lambda: not old_thread.is_alive(), 10, "the replaced part's thread to end")
        wait_for(lambda: second.state == RUNNING and second.running, 30, "the new part")
        assert daemon.jobs["closing"] is second
        wait_for(lambda: _saved_state(state, "closing") == RUNNING, 10, "the new part's state")
    finally:
        daemon._shutdown()
