"""What the agent journals after stopping a job's processes for a pause, a pause it
follows, a host's leave or its exclusion: that they exited only when they did. A rank in
uninterruptible sleep (D state) outlives SIGKILL, and `Supervisor.stop` returns anyway.

Also: each pause and fork event names the op it answers (`data.id`), so the cockpit finds
the event of its op without comparing clocks; and a resume or relaunch is told as under
way before its launch, which can still fail."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job import membership, peer_end
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.journal.journal import Journal, JournalReader
from agent.wire import checkpoints

NOT_EXITED = "processes did not exit after SIGKILL"


class _Torchrun:
    """The attempt's torchrun as the job's thread sees it; `survives`: its processes are
    in D state, and neither SIGTERM nor SIGKILL ends them."""

    pid = 4242
    returncode: int | None = None
    started_at = ended_at = None

    def __init__(self, survives: bool) -> None:
        self.survives = survives
        self.running = True
        self.ended_for: str | None = None
        self.stops: list[float] = []

    def stop(self, grace: float = 10.0) -> int | None:
        self.stops.append(grace)
        if not self.survives:
            self.running = False
            self.returncode = -15
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def rank_pids(self) -> dict[int, int | None]:
        return {4243: 0}

    def tree_pids(self) -> list[int]:
        return [4242, 4243] if self.running else []

    def signal_tree(self, sig: int, pids: Any = None) -> None:
        pass

    def identity(self) -> dict:  # what the job's saved state keeps of it
        return {"pid": self.pid}


def _spec(tmp_path: Path, host: str = "a", **more: Any) -> LaunchSpec:
    return LaunchSpec({"name": "pair", "script": "train.py", "hosts": ["a", "b"],
                       "host": host, "nnodes": 2, "run_dir": str(tmp_path / "shared"),
                       "rendezvous": {"endpoint": "127.0.0.1:29400"}, "stop_grace": 1,
                       "resume": {"newest_args": ["--resume", "auto"]}, **more})


def _job(tmp_path: Path, host: str = "a", survives: bool = False,
         op_id: str = "launch1", **more: Any) -> ManagedJob:
    job = ManagedJob(_spec(tmp_path, host, **more), Journal(tmp_path / host))
    job.spec.prepare_dirs()
    job._started_by_operator(f"{op_id}-{host}")
    job.supervisor = _Torchrun(survives)  # type: ignore[assignment]
    job.state = "running"
    return job


def _events(job: ManagedJob, kind: str) -> list[dict]:
    return [r for r in JournalReader(job.journal.state_dir).records()
            if r.get("t") == "event" and r.get("kind") == kind]


def _checkpoint_asked_for(job: ManagedJob, path: str = "/ckpt/40") -> None:
    """Rank 0 saved the checkpoint the pause asks for (its `checkpoint_saved`)."""
    with job.progress.lock:
        job._checkpoints.append((time.time() + 60, 40, path))


def _valid_checkpoint(job: ManagedJob, step: int) -> str:
    """A checkpoint of `step` in the job's checkpoint dir, with its completion marker."""
    job.spec.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path = job.spec.checkpoint_dir / f"ckpt-{step:08d}.pt"
    path.write_bytes(b"x" * 64)
    checkpoints.marker_path(path).write_text(json.dumps({"step": step, "bytes": 64}))
    return str(path)


# -- a pause says the processes exited only when they did ------------------------------

def test_a_pause_whose_processes_outlive_sigkill_fails_and_says_so(tmp_path: Path) -> None:
    job = _job(tmp_path, survives=True)
    _checkpoint_asked_for(job)
    assert job._pause({"id": "p2-a"}, None) is None
    (event,) = _events(job, "pause")
    assert event["data"]["ok"] is False and event["data"]["error"] == NOT_EXITED
    assert event["data"]["id"] == "p2-a" and event["data"]["mode"] == "checkpoint"
    assert "have exited" not in event["msg"] and "paused at" not in event["msg"]
    assert event["msg"] == ("job pair: pause failed: this host's processes did not exit "
                            "after SIGKILL (pids 4242, 4243)")
    # Not paused, and not a failure to restart from when they end at last either.
    assert job.state == "failed"


def test_a_pause_names_its_op_and_says_the_processes_exited_once_they_did(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    path = _valid_checkpoint(job, 40)
    _checkpoint_asked_for(job, path)
    job._pause({"id": "p2-a"}, None)
    (event,) = _events(job, "pause")
    assert event["data"]["ok"] is True and event["data"]["id"] == "p2-a"
    assert event["msg"] == (f"job pair paused at step 40 (checkpoint {path}); its processes "
                            "have exited")
    assert job.state == "paused"


@pytest.mark.parametrize("older", [None, 30])
def test_a_pause_says_where_a_resume_starts_not_a_checkpoint_no_resume_can_use(
    tmp_path: Path, older: int | None,
) -> None:
    """Rank 0 reported a checkpoint outside the checkpoint dir (a trainer's own output
    dir): the pause names the step a resume starts from, the newest valid checkpoint's
    (or the start), and what was reported beside it."""
    job = _job(tmp_path)
    resume_from = _valid_checkpoint(job, older) if older is not None else None
    _checkpoint_asked_for(job, "/elsewhere/checkpoint-40")
    job._pause({"id": "p3-a"}, None)
    (event,) = _events(job, "pause")
    data = event["data"]
    assert data["ok"] is True and job.state == "paused"
    assert (data["step"], data["checkpoint"]) == (older or 0, resume_from)
    assert (data["reported_step"], data["reported_checkpoint"]) == (
        40, "/elsewhere/checkpoint-40")
    assert "paused at step 40" not in event["msg"]
    assert "a resume starts from " + (f"step {older}" if older else "the start") \
        in event["msg"], event["msg"]


def test_every_pause_path_names_its_op(tmp_path: Path) -> None:
    # Waiting to restart: paused at once.
    waiting = _job(tmp_path / "backoff")
    waiting.state = "backoff"
    waiting._pause({"id": "p2-a"}, None)
    # Following rank 0's host: its part ended with it.
    following = _job(tmp_path / "follow", host="b")
    following.supervisor.running = False  # type: ignore[union-attr]
    following._pause({"id": "p2-b", "follow": True, "timeout": 1.0}, None)
    # A freeze, and one refused.
    frozen = _job(tmp_path / "freeze")
    frozen._freeze({"id": "p3-a", "freeze": True, "hold": 5.0})
    frozen._freeze({"id": "p4-a", "freeze": True, "hold": 5.0})
    said = [(e["data"]["id"], e["data"]["ok"]) for job in (waiting, following, frozen)
            for e in _events(job, "pause")]
    assert said == [("p2-a", True), ("p2-b", True), ("p3-a", True), ("p4-a", False)]


def test_a_pause_followed_from_a_peer_whose_processes_outlive_sigkill_fails(
    tmp_path: Path,
) -> None:
    a = _job(tmp_path, "a")
    b = _job(tmp_path, "b", survives=True)
    a.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", 40, "/ckpt/40")
    assert b._peer_ended(at_once=True) is True
    (event,) = _events(b, "pause")
    assert event["data"]["ok"] is False and event["data"]["error"] == NOT_EXITED
    assert event["data"]["mode"] == "peer" and event["data"]["peer"] == "a"
    assert "have exited" not in event["msg"]
    assert b.state == "failed"


def test_a_pause_followed_from_a_peer_names_no_op_of_its_own(tmp_path: Path) -> None:
    a, b = _job(tmp_path, "a"), _job(tmp_path, "b")
    a.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", 40, "/ckpt/40")
    assert b._peer_ended(at_once=True) is True
    (event,) = _events(b, "pause")
    assert event["data"]["ok"] is True and event["data"]["id"] is None
    assert b.state == "paused"


# -- leaving or being excluded: the part stopped only if it did -------------------------

def _elastic(tmp_path: Path, survives: bool) -> ManagedJob:
    return _job(tmp_path, "b", survives=survives, nnodes="1:3", hosts=["a", "b", "c"])


def test_a_host_that_leaves_says_its_processes_exited_and_nothing_of_the_others(
    tmp_path: Path,
) -> None:
    job = _elastic(tmp_path, survives=False)
    job.membership.scale({"id": "s2-b", "change": "remove", "host": "b", "leave": True,
                          "hosts": ["a", "c"]})
    (event,) = _events(job, "scale")
    assert event["data"]["ok"] is True and event["data"]["left"] is True
    assert event["msg"] == "job pair: this host left; its processes have exited"
    assert "go on" not in event["msg"]  # the leaving host cannot know that
    assert job.state == "excluded"


def test_a_host_whose_processes_outlive_sigkill_does_not_say_its_part_stopped(
    tmp_path: Path,
) -> None:
    job = _elastic(tmp_path, survives=True)
    job.membership.scale({"id": "s2-b", "change": "remove", "host": "b", "leave": True,
                          "hosts": ["a", "c"]})
    (event,) = _events(job, "scale")
    assert event["data"]["ok"] is False and event["data"]["error"] == NOT_EXITED
    assert "stopped" not in event["msg"].replace("did not stop", "")
    assert job.state == "excluded"  # out of the job: nothing here restarts it


def test_an_excluded_host_whose_processes_outlive_sigkill_says_so(tmp_path: Path) -> None:
    job = _job(tmp_path, "b", survives=True)
    job._operate("relaunch", {"id": "r2-b", "exclude_self": True}, None)
    (event,) = _events(job, "relaunch")
    assert event["data"]["ok"] is False and event["data"]["error"] == NOT_EXITED
    assert event["data"]["excluded"] is True


# -- a resume or relaunch is under way when said; its launch may still fail ----------------

@pytest.mark.parametrize("action", ["resume", "relaunch"])
def test_a_resume_or_relaunch_whose_launch_fails_never_said_it_was_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str,
) -> None:
    job = _job(tmp_path)
    job.supervisor = None
    job.state = "paused"
    monkeypatch.setattr(job, "launch", lambda checkpoint, reason="launch": job._launch_failed(
        "no such python", "check the spec's python"))
    job._operate(action, {"id": f"{action}2-a"}, None)
    (said,) = _events(job, action)
    assert said["msg"] == {"resume": "job pair resuming from the start (no valid checkpoint)",
                           "relaunch": "job pair relaunching from the start"}[action]
    assert "resumed" not in said["msg"] and "relaunched" not in said["msg"]
    (failed,) = _events(job, "interruption")
    assert "could not start" in failed["msg"] and job.state == "failed"


# -- a fork's event names the op that started it ---------------------------------------

def test_a_forks_event_names_the_op_that_started_it(tmp_path: Path) -> None:
    parent = tmp_path / "parent-ckpt"
    parent.mkdir()
    fork = ManagedJob(LaunchSpec({"name": "pair-fork-1", "script": "train.py",
                                  "run_dir": str(tmp_path / "fork"),
                                  "parent": {"job": "pair", "step": None}}),
                      Journal(tmp_path / "state"))
    fork.start(fork_from=(parent, None), op_id="f1-a")
    assert fork._thread is not None
    fork._thread.join(30)
    (event,) = _events(fork, "fork")
    assert event["data"]["ok"] is False and event["data"]["id"] == "f1-a"
    assert fork.state == "failed"


# -- a scale is done when the new group shows it ----------------------------------------

@pytest.mark.parametrize(("change", "before", "after", "seen"), [
    ("add", 2, 3, True), ("add", 2, 2, False), ("add", 3, 2, False),
    ("remove", 3, 2, True), ("remove", 3, 3, False),
    ("add", None, 2, True), ("add", 2, None, True),  # a size not known: not held against it
])
def test_a_scale_is_said_done_only_when_the_new_groups_size_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, before: int | None,
    after: int | None, seen: bool,
) -> None:
    """A staying host regroups after `cockpit scale`: "add c done" only where the group
    it trains in is larger than before (a node that failed and came back regroups too,
    within the same window, and is not the operator's change)."""
    job = _elastic(tmp_path, survives=False)
    sizes = iter([before, after])
    monkeypatch.setattr(membership, "worker_facts", lambda pids: {
        "nodes": next(sizes), "world_size": None, "torchrun_restarts": None})
    job.membership.scale({"id": "s3-a", "change": change, "host": "c",
                          "hosts": ["a", "b", "c"] if change == "add" else ["a", "b"]})
    regroup = {"since": time.time() - 1, "why": "scale", "pid": 4242, "last_step": 40}
    job.membership.completed(regroup, 41, time.time())
    (event,) = _events(job, "scale")
    assert event["data"]["ok"] is seen, event
    if seen:
        assert event["msg"].startswith(f"job pair: {change} c done;"), event["msg"]
    else:
        assert "is not seen" in event["msg"] and "done" not in event["msg"], event["msg"]
        assert event["data"]["error"] == (
            f"the new group has {after} node(s), {before} before the change")
