"""The give-up markers a multi-host job's agents leave for each other in the shared run
dir (agent.peer_give_up): what counts, what is ignored and what is reported."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent import peer_give_up
from agent.launch import LaunchSpec


def _spec(tmp_path: Path, host: str, nnodes: object = 2) -> LaunchSpec:
    return LaunchSpec({"name": "pair", "script": "train.py", "hosts": ["a", "b"],
                       "host": host, "nnodes": nnodes, "run_dir": str(tmp_path / "shared"),
                       "rendezvous": {"endpoint": "127.0.0.1:29400"},
                       "resume": {"newest_args": ["--resume", "auto"]}})


def test_a_host_that_gave_up_is_seen_by_the_others_and_not_by_itself(tmp_path: Path) -> None:
    a, b = _spec(tmp_path, "a"), _spec(tmp_path, "b")
    before = time.time()
    assert peer_give_up.announce(a, "oom", "repeated 2 times without progress") is None
    peers, problems = peer_give_up.peers_given_up(b, since=before)
    assert problems == []
    assert [(p.host, p.cause, p.reason) for p in peers] == [
        ("a", "oom", "repeated 2 times without progress")]
    assert peer_give_up.peers_given_up(a, since=before) == ([], [])


def test_a_give_up_from_before_the_operators_start_or_taken_back_is_not_acted_on(
    tmp_path: Path,
) -> None:
    a, b = _spec(tmp_path, "a"), _spec(tmp_path, "b")
    peer_give_up.announce(a, "launch_failed", "no such python")
    assert peer_give_up.peers_given_up(b, since=time.time() + 60) == ([], [])
    peer_give_up.clear(a)  # the operator started host a again
    assert peer_give_up.peers_given_up(b, since=0.0) == ([], [])
    peer_give_up.clear(a)  # nothing left to clear: no error either


def test_an_unreadable_marker_is_reported_with_its_path_and_never_acted_on(
    tmp_path: Path,
) -> None:
    b = _spec(tmp_path, "b")
    folder = peer_give_up.marker_dir(b)
    folder.mkdir(parents=True)
    (folder / "a.json").write_text("{not json")
    (folder / "c.json").write_text(json.dumps({"host": "c", "at": "yesterday"}))
    peers, problems = peer_give_up.peers_given_up(b, since=0.0)
    assert peers == []
    assert len(problems) == 2
    assert str(folder / "a.json") in problems[0]
    assert "field 'at' missing or not a number" in problems[1] and "c.json" in problems[1]


def test_only_a_job_of_fixed_size_on_several_hosts_stands_or_falls_with_each_host(
    tmp_path: Path,
) -> None:
    assert peer_give_up.applies(_spec(tmp_path, "a"))
    elastic = _spec(tmp_path, "a", nnodes="1:2")
    assert not peer_give_up.applies(elastic)
    assert peer_give_up.announce(elastic, "oom", "x") is None
    assert not peer_give_up.marker_dir(elastic).exists()


def test_a_marker_that_cannot_be_written_is_an_error_the_agent_reports(tmp_path: Path) -> None:
    a = _spec(tmp_path, "a")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "control").write_text("a file where the control dir should be")
    error = peer_give_up.announce(a, "oom", "x")
    assert error is not None and "pair.gave-up" in error
