"""The markers a multi-host job's agents leave for each other in the shared run dir when
a host's part ends (agent.peer_end): what counts, what is ignored, what is reported."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent import peer_end
from agent.launch import LaunchSpec


def _spec(tmp_path: Path, host: str, nnodes: object = 2) -> LaunchSpec:
    return LaunchSpec({"name": "pair", "script": "train.py", "hosts": ["a", "b", "c"],
                       "host": host, "nnodes": nnodes, "run_dir": str(tmp_path / "shared"),
                       "rendezvous": {"endpoint": "127.0.0.1:29400"},
                       "resume": {"newest_args": ["--resume", "auto"]}})


def test_a_host_that_gave_up_is_seen_by_the_others_and_not_by_itself(tmp_path: Path) -> None:
    a, b = _spec(tmp_path, "a"), _spec(tmp_path, "b")
    before = time.time()
    assert peer_end.announce(a, peer_end.GAVE_UP, "oom", "repeated 2 times") is None
    peers, problems = peer_end.peers_ended(b, since=before)
    assert problems == []
    assert [(p.host, p.why, p.cause, p.reason) for p in peers] == [
        ("a", "gave_up", "oom", "repeated 2 times")]
    assert peer_end.peers_ended(a, since=before) == ([], [])


def test_the_most_final_ending_comes_first(tmp_path: Path) -> None:
    a, b, c = _spec(tmp_path, "a"), _spec(tmp_path, "b"), _spec(tmp_path, "c")
    peer_end.announce(a, peer_end.PAUSED, "operator", "paused", 120, "/ckpt/120.pt")
    peer_end.announce(c, peer_end.STOPPED, "operator", "stopped")
    peers, _ = peer_end.peers_ended(b, since=0.0)
    assert [(p.host, p.why) for p in peers] == [("c", "stopped"), ("a", "paused")]
    assert (peers[1].step, peers[1].checkpoint) == (120, "/ckpt/120.pt")


def test_an_ending_from_before_the_operators_start_or_taken_back_is_not_acted_on(
    tmp_path: Path,
) -> None:
    a, b = _spec(tmp_path, "a"), _spec(tmp_path, "b")
    peer_end.announce(a, peer_end.GAVE_UP, "launch_failed", "no such python")
    assert peer_end.peers_ended(b, since=time.time() + 60) == ([], [])
    peer_end.clear(a)  # the operator started host a again
    assert peer_end.peers_ended(b, since=0.0) == ([], [])
    peer_end.clear(a)  # nothing left to clear: no error either


def test_an_unreadable_marker_is_reported_with_its_path_and_never_acted_on(
    tmp_path: Path,
) -> None:
    b = _spec(tmp_path, "b")
    folder = peer_end.marker_dir(b)
    folder.mkdir(parents=True)
    (folder / "a.json").write_text("{not json")
    (folder / "c.json").write_text(json.dumps({"host": "c", "why": "paused", "at": "now"}))
    (folder / "d.json").write_text(json.dumps({"host": "d", "why": "bored", "at": 1.0}))
    peers, problems = peer_end.peers_ended(b, since=0.0)
    assert peers == []
    assert len(problems) == 3
    assert str(folder / "a.json") in problems[0]
    assert "field 'at' missing or not a number" in problems[1] and "c.json" in problems[1]
    assert "field 'why' is 'bored'" in problems[2]


def test_an_elastic_job_goes_on_without_a_host_that_gave_up_but_follows_a_pause(
    tmp_path: Path,
) -> None:
    assert peer_end.applies(_spec(tmp_path, "a"), peer_end.GAVE_UP)
    a, b = _spec(tmp_path, "a", nnodes="1:3"), _spec(tmp_path, "b", nnodes="1:3")
    assert not peer_end.applies(a, peer_end.GAVE_UP)
    assert peer_end.announce(a, peer_end.GAVE_UP, "oom", "x") is None
    assert not peer_end.marker_dir(a).exists()
    peer_end.announce(a, peer_end.PAUSED, "operator", "paused", 10, None)
    peers, _ = peer_end.peers_ended(b, since=0.0)
    assert [(p.host, p.why) for p in peers] == [("a", "paused")]


def test_a_marker_that_cannot_be_written_is_an_error_the_agent_reports(tmp_path: Path) -> None:
    a = _spec(tmp_path, "a")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "control").write_text("a file where the control dir should be")
    error = peer_end.announce(a, peer_end.STOPPED, "operator", "stopped")
    assert error is not None and "pair.ended" in error


def test_a_host_relaunched_out_of_the_job_is_not_followed(tmp_path: Path) -> None:
    """Host c gave up; the operator relaunched the job without it at once, while c could
    not be reached to take its marker back: the others' new part must not end on it."""
    c = _spec(tmp_path, "c")
    before = time.time()
    assert peer_end.announce(c, peer_end.GAVE_UP, "gpu_fault", "xid 79") is None
    b = _spec(tmp_path, "b")
    b.with_hosts(["a", "b"])
    assert peer_end.peers_ended(b, since=before - peer_end.CLOCK_SKEW) == ([], [])


def test_the_operators_start_ends_an_outage_still_awaiting_its_recovery(tmp_path: Path) -> None:
    """Killed, restarted, paused before the restart's first step, resumed: the resume's
    first step is no recovery of the agent's (the cockpit shows that outage ended by the
    pause), and a failure after it starts an outage of its own."""
    from agent.job import ManagedJob
    from agent.journal import Journal

    job = ManagedJob(_spec(tmp_path, "a"), Journal(tmp_path / "state"))
    job._failure = {"failure_at": 1.0, "cause": "killed", "last_step": 40, "then": []}
    job._pending_recovery = {"failure_at": 1.0, "cause": "killed", "restart_count": 1}
    job._started_by_operator()
    assert job._pending_recovery is None and job._failure == {}
    assert job._outage(5.0, "oom", 50)["cause"] == "oom"
