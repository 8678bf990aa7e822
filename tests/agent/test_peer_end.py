"""The markers a multi-host job's agents leave for each other in the shared run dir when
a host's part ends (agent.job.peer_end): what counts, what is ignored, what is reported."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from agent.job import managed as job_module
from agent.job import membership, peer_end
from agent.job.generations import KEEP
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.membership import claim_spare
from agent.journal.journal import Journal, JournalReader
from agent.wire import checkpoints


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
    job = ManagedJob(_spec(tmp_path, "a"), Journal(tmp_path / "state"))
    job._failure = {"failure_at": 1.0, "cause": "killed", "last_step": 40, "then": []}
    job.progress.pending_recovery = {"failure_at": 1.0, "cause": "killed", "restart_count": 1}
    job._started_by_operator()
    assert job.progress.pending_recovery is None and job._failure == {}
    assert job._outage(5.0, "oom", 50)["cause"] == "oom"


# -- generations: which markers are an earlier part's, whatever the clocks say ------------

def _job(tmp_path: Path, host: str, op_id: object = None, nnodes: object = 2) -> ManagedJob:
    """A host's job as the operator's start left it (`op_id`: the op that started it),
    its part running; no process is needed to look at the markers."""
    job = ManagedJob(_spec(tmp_path, host, nnodes), Journal(tmp_path / host))
    job._started_by_operator(op_id)
    job.state = "running"
    return job


def _events(job: ManagedJob, kind: str) -> list:
    return [r for r in JournalReader(job.journal.state_dir).records()
            if r.get("t") == "event" and r.get("kind") == kind]


def test_the_generation_is_what_the_ops_the_cockpit_sent_each_host_have_in_common() -> None:
    assert peer_end.generation("5f2e9c-gpu1", "gpu1") == "5f2e9c"
    assert peer_end.generation("5f2e9c-node-2", "node-2") == "5f2e9c"
    assert peer_end.generation("5f2e9c", "gpu1") is None  # an older cockpit's, a hand-made op
    assert peer_end.generation("-gpu1", "gpu1") is None
    assert peer_end.generation(None, "gpu1") is None
    assert peer_end.generation("5f2e9c-gpu1", None) is None


def test_a_marker_left_from_before_a_resume_never_ends_the_resumed_part(tmp_path: Path) -> None:
    """Paused and resumed within half a minute; host a takes longer than the settling
    time to clear its marker of the pause: b's resumed part must not end on it."""
    a, b = _job(tmp_path, "a", "launch1-a"), _job(tmp_path, "b", "launch1-b")
    a.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", 40, "/ckpt/40")
    b._started_by_operator("resume2-b")
    b.peers.operator_start -= 2 * peer_end.SETTLE  # the resume was a while ago; a is slow
    assert b._peer_ended(at_once=True) is False
    assert b.state == "running" and _events(b, "peer_ended") == []


def test_a_marker_of_the_same_start_is_followed_at_once_and_whatever_the_clocks(
    tmp_path: Path,
) -> None:
    """Host a's clock is two minutes behind b's, and a gave up a moment after the launch
    both hosts took: b follows at once, neither waiting nor misjudging the marker's age."""
    a, b = _job(tmp_path, "a", "launch1-a"), _job(tmp_path, "b", "launch1-b")
    a.peers.announce(peer_end.GAVE_UP, "launch_failed", "no such python")
    marker = peer_end.marker_dir(a.spec) / "a.json"
    data = json.loads(marker.read_text())
    assert data["generation"] == "launch1"
    marker.write_text(json.dumps({**data, "at": data["at"] - 120.0}))
    assert b._peer_ended(at_once=True) is True
    assert b.state == "failed"
    (told,) = _events(b, "peer_ended")
    assert told["data"]["host"] == "a" and told["data"]["why"] == "gave_up"


def test_without_a_generation_in_common_the_clocks_still_judge(tmp_path: Path) -> None:
    """An older cockpit's launch (ids without the host), or an older agent's marker (no
    generation): a marker counts only from SETTLE after the start, and only if not older
    than the start less CLOCK_SKEW, as before generations."""
    for a_id, b_id in (("launch1-a", "x"), ("x", "launch1-b")):
        shared = tmp_path / b_id
        a, b = _job(shared, "a", a_id), _job(shared, "b", b_id)
        a.peers.announce(peer_end.GAVE_UP, "oom", "repeated 2 times")
        assert b._peer_ended(at_once=True) is False  # too soon after b's start
        marker = peer_end.marker_dir(a.spec) / "a.json"
        data = json.loads(marker.read_text())
        b.peers.operator_start -= 2 * peer_end.SETTLE
        earlier = b.peers.operator_start - 2 * peer_end.CLOCK_SKEW
        marker.write_text(json.dumps({**data, "at": earlier}))
        assert b._peer_ended(at_once=True) is False  # an earlier attempt's
        marker.write_text(json.dumps(data))
        assert b._peer_ended(at_once=True) is True, (a_id, b_id)


def test_a_host_started_anew_keeps_the_generations_it_left(tmp_path: Path) -> None:
    """Stopped, then launched afresh: the new part is a new ManagedJob, yet a marker of the
    first launch is still an earlier part's to it, and after an agent restart too."""
    gens = peer_end.Generations()
    for n in range(KEEP + 3):
        gens.begin(f"op{n}")
    assert gens.current == f"op{KEEP + 2}" and len(gens.past) == KEEP
    assert gens.judge(gens.current) is True and gens.judge(gens.past[0]) is False
    assert gens.judge("op0") is None and gens.judge(None) is None  # long gone: the clocks
    b = _job(tmp_path, "b", "launch1-b")
    b._started_by_operator("resume2-b")
    adopted = ManagedJob(b.spec, Journal(tmp_path / "b"))
    adopted._restore(b._snapshot())
    assert adopted.peers.generations.state() == {"current": "resume2", "past": ["launch1"]}
    older = dict(b._snapshot())
    del older["generations"]  # saved by an older agent
    adopted._restore(older)
    assert adopted.peers.generations.state() == {"current": None, "past": []}


def _spare_spec(tmp_path: Path) -> dict:
    """An elastic job on hosts a and b with the spare c."""
    return {"name": "pair", "script": "train.py", "hosts": ["a", "b"], "spares": ["c"],
            "nnodes": "1:2", "run_dir": str(tmp_path / "shared"),
            "rendezvous": {"endpoint": "127.0.0.1:29400"},
            "resume": {"newest_args": ["--resume", "auto"]}}


def test_a_spare_that_takes_over_runs_the_replaced_hosts_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spare was launched with the job, which was paused and resumed since (the spare
    in standby took no part): the excluded host's claim says which part the spare joins."""
    spec = _spare_spec(tmp_path)
    spare = ManagedJob(LaunchSpec({**spec, "host": "c"}), Journal(tmp_path / "c"))
    spare._started_by_operator("launch1-c")
    spare.state = "standby"
    spare.membership.standby()
    monkeypatch.setattr(spare, "launch", lambda checkpoint, reason: None)
    assert claim_spare(LaunchSpec({**spec, "host": "b"}), "b", "gpu_fault", ["a", "b"],
                       "resume2") == "c"
    spare.membership.poll_takeover()
    assert spare.peers.generations.state() == {"current": "resume2", "past": ["launch1"]}
    without = peer_end.Generations("launch1")
    without.take_over(None)  # an older agent's claim: the others may still run launch1
    assert without.state() == {"current": None, "past": []}


# -- a shared dir that stops answering ----------------------------------------------------

def test_a_marker_dir_that_does_not_answer_is_said_once_and_never_waited_on_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hard-mounted NFS whose server went away: the look at the markers hangs in the
    kernel. The job's thread goes on; the stall is journaled once, with the dir, no second
    look is started while the first hangs, and the return of the dir is said too."""
    b = _job(tmp_path, "b", "launch1-b")
    answer = threading.Event()
    listings = []

    def hung(folder: Path) -> list:
        listings.append(folder)
        answer.wait(60)
        return []

    monkeypatch.setattr(peer_end, "_listing", hung)
    b.peers.shared.within = 0.05  # the hung look never answers: no race with this allowance
    assert b._peer_ended(at_once=True) is False
    assert b._peer_ended(at_once=True) is False
    b.peers.announce(peer_end.STOPPED, "operator", "stopped by the operator")
    assert len(listings) == 1 and b.peers.shared.hung
    stalls = _events(b, "sampler_error")
    assert len(stalls) == 2, stalls
    where = str(peer_end.marker_dir(b.spec))
    assert where in stalls[0]["msg"] and "did not answer within 0.05 s" in stalls[0]["msg"]
    assert stalls[0]["data"]["answered"] is False and stalls[0]["data"]["dir"] == where
    assert "cannot tell the job's other hosts" in stalls[1]["msg"]
    assert str(peer_end.marker_dir(b.spec) / "b.json") in stalls[1]["msg"]
    answer.set()
    pending = b.peers.shared._pending
    assert pending is not None
    pending.wait(30)
    b.peers.shared.within = 30.0
    assert b._peer_ended(at_once=True) is False
    assert len(listings) == 2
    again = _events(b, "sampler_error")[2:]
    assert len(again) == 1 and again[0]["data"]["answered"] is True, again
    assert where in again[0]["msg"] and "answers again" in again[0]["msg"]
    assert b._peer_ended(at_once=True) is False
    assert len(_events(b, "sampler_error")) == 3


def test_a_write_into_a_dir_that_does_not_answer_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = _spec(tmp_path, "a")
    answer = threading.Event()
    monkeypatch.setattr(peer_end, "announce", lambda *args: answer.wait(60))
    shared = peer_end.Shared(within=0.05)
    error = shared.announce(a, peer_end.PAUSED, "operator", "paused", 10, None, "g1")
    assert error is not None and str(peer_end.marker_dir(a) / "a.json") in error
    assert "did not answer within 0.05 s" in error
    assert shared.look(a, 0.0) is None and shared.clear(a) is False  # none started
    answer.set()
    assert shared._pending is not None
    shared._pending.wait(30)
    shared.within = 30.0
    assert shared.look(a, 0.0) == ([], [])
    monkeypatch.setattr(peer_end, "_listing", lambda folder: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a bug is the caller's to see, not a stall
        shared.look(a, 0.0)


def test_a_new_launch_of_an_ended_job_keeps_the_generations_its_host_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon makes a new ManagedJob for each launch: the old part's generation goes
    with it into the new one's past, so the old part's markers stay an earlier part's."""
    from agent.daemon import Daemon, DaemonConfig
    from agent.samplers.sim import SimGpus

    monkeypatch.setattr(ManagedJob, "start", lambda self, *a, op_id=None, **kw:
                        self._started_by_operator(op_id))  # no process: the bookkeeping
    daemon = Daemon(DaemonConfig(tmp_path / "state"), gpus=SimGpus(1), log=lambda m: None)
    try:
        spec = _spec(tmp_path, "b", 2)
        first = daemon._start_job(spec, op_id="launch1-b")
        first.state = "stopped"
        second = daemon._start_job(spec, op_id="launch2-b")
        assert second is not first
        assert second.peers.generations.state() == {"current": "launch2", "past": ["launch1"]}
    finally:
        daemon._shutdown()


# A look counts as slow past this (patched from the agent's 30 s): ten times what the
# quick looks below take on a loaded machine, so that only the hung ones are said.
SLOW_LOOK_S = 0.5


def _answered_once_said(job: ManagedJob) -> threading.Event:
    """An event set once the job has said one more slow look ("has taken … so far"):
    a hung look waiting on it outlasts SLOW_LOOK whatever the machine's pace, and ends
    as soon as it was said."""
    answer = threading.Event()
    before = len([e for e in _events(job, "sampler_error") if not e["data"]["answered"]])

    def watch() -> None:
        deadline = time.monotonic() + 60  # bounds a hang only
        while time.monotonic() < deadline and len(
                [e for e in _events(job, "sampler_error") if not e["data"]["answered"]]) <= before:
            time.sleep(0.02)
        answer.set()

    threading.Thread(target=watch, daemon=True).start()
    return answer


def test_a_slow_look_at_the_checkpoint_dir_is_said_and_its_end_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart needs the newest valid checkpoint; a mount that hangs (or a checksum of a
    huge checkpoint) makes it wait. The job says so instead of waiting in silence, and
    says when the look answered; a quick look says nothing, and a failing one raises."""
    job = _job(tmp_path, "a", "launch1-a")
    monkeypatch.setattr(job_module, "SLOW_LOOK", SLOW_LOOK_S)
    answer = _answered_once_said(job)

    def hung(directory: Path) -> tuple:
        answer.wait(60)
        return None, []

    monkeypatch.setattr(checkpoints, "newest_valid", hung)
    assert job.newest_checkpoint() == (None, [])
    said = _events(job, "sampler_error")
    assert [e["data"]["answered"] for e in said] == [False, True], said
    where = str(job.spec.checkpoint_dir)
    assert f"a look at its checkpoint dir {where} has taken" in said[0]["msg"]
    assert "the job waits for it" in said[0]["msg"]
    assert said[0]["data"]["dir"] == where and said[1]["data"]["seconds"] >= SLOW_LOOK_S
    monkeypatch.setattr(checkpoints, "newest_valid", lambda directory: (None, []))
    assert job.newest_checkpoint() == (None, [])
    assert len(_events(job, "sampler_error")) == 2

    def unreadable(directory: Path) -> tuple:
        raise PermissionError(13, "Permission denied", str(directory))

    monkeypatch.setattr(checkpoints, "newest_valid", unreadable)
    with pytest.raises(PermissionError):
        job.newest_checkpoint()
    # Preparing the run dir at a launch is watched the same way.
    answer = _answered_once_said(job)
    monkeypatch.setattr(job.spec, "prepare_dirs", lambda: answer.wait(60))
    monkeypatch.setattr(job.spec, "argv", lambda *args: 1 / 0)  # the launch stops here
    with pytest.raises(ZeroDivisionError):
        job.launch(None)
    said = _events(job, "sampler_error")[2:]
    assert [e["data"]["answered"] for e in said] == [False, True], said
    assert f"preparing its run dir {job.spec.shared_dir} has taken" in said[0]["msg"]


def test_a_spares_slow_look_for_its_claim_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spare_spec(tmp_path)
    spare = ManagedJob(LaunchSpec({**spec, "host": "c"}), Journal(tmp_path / "c"))
    spare.state = "standby"
    spare.membership.standby()
    monkeypatch.setattr(job_module, "SLOW_LOOK", SLOW_LOOK_S)
    waits: list[threading.Event] = []
    monkeypatch.setattr(membership, "read_claim", lambda spec, me: waits[-1].wait(60) and None)
    waits.append(_answered_once_said(spare))
    spare.membership.poll_takeover()
    said = _events(spare, "sampler_error")
    assert [e["data"]["answered"] for e in said] == [False, True], said
    where = str(membership.takeover_dir(spare.spec))
    assert f"a look for its claim in {where} has taken" in said[0]["msg"]
    # Going into standby, and the host list after takeovers, look the same way.
    waits.append(_answered_once_said(spare))
    spare.membership.standby()
    waits.append(_answered_once_said(spare))
    assert spare.membership._hosts_after_takeovers() == ["a", "b"]
    said = _events(spare, "sampler_error")[2:]
    assert [e["data"]["answered"] for e in said] == [False, True, False, True], said
    assert "a look for a spare's claim in" in said[2]["msg"]


def _resumed_by_a(tmp_path: Path, hosts: list[str] | None = None,
                  generation: str = "resume2", resumed_from: str = "launch1") -> LaunchSpec:
    """Host a's marker of its resume (`resumed_from` → `generation`); its spec."""
    a = _spec(tmp_path, "a")
    if hosts is not None:
        a = LaunchSpec({**a.raw, "hosts": hosts})
    assert peer_end.announce_resumed(a, generation, resumed_from, 40, "/ckpt/40") is None
    return a


def test_a_paused_host_follows_a_resume_of_the_part_it_was_paused_in(tmp_path: Path) -> None:
    a = _resumed_by_a(tmp_path)
    b = _spec(tmp_path, "b")
    peers, problems = peer_end.peers_resumed(b, peer_end.Generations("launch1"))
    assert problems == []
    assert [(p.host, p.generation, p.resumed_from, p.step, p.checkpoint) for p in peers] == [
        ("a", "resume2", "launch1", 40, "/ckpt/40")]
    # Its own marker is nothing a host follows; nor is one it cannot judge by.
    assert peer_end.peers_resumed(a, peer_end.Generations("launch1")) == ([], [])
    assert peer_end.peers_resumed(b, peer_end.Generations()) == ([], [])


def test_a_resume_of_another_part_or_one_already_run_is_not_followed(tmp_path: Path) -> None:
    _resumed_by_a(tmp_path)
    b = _spec(tmp_path, "b")
    for generations in (
        peer_end.Generations("launch0"),  # b was paused in another part of the job
        peer_end.Generations("resume2", ("launch1",)),  # b resumed with a already
        peer_end.Generations("launch1", ("resume2",)),  # b ran that part and left it
    ):
        assert peer_end.peers_resumed(b, generations) == ([], []), generations


def test_a_resume_whose_part_has_ended_since_is_not_followed(tmp_path: Path) -> None:
    """Host a resumed, then was paused again before b looked (b's dir did not answer):
    b stays paused. An end marker of the part a resumed from does not hide the resume."""
    a = _resumed_by_a(tmp_path)
    b = _spec(tmp_path, "b")
    peer_end.announce(a, peer_end.PAUSED, "operator", "paused", 10, generation="launch1")
    assert [p.host for p in peer_end.peers_resumed(b, peer_end.Generations("launch1"))[0]] == [
        "a"]
    peer_end.announce(a, peer_end.PAUSED, "operator", "paused", 50, generation="resume2")
    assert peer_end.peers_resumed(b, peer_end.Generations("launch1")) == ([], [])


def test_a_resume_that_leaves_this_host_out_or_comes_from_outside_is_not_followed(
    tmp_path: Path,
) -> None:
    b = _spec(tmp_path, "b")
    _resumed_by_a(tmp_path, hosts=["a", "c"])  # a relaunch left b out of a's part
    assert peer_end.peers_resumed(b, peer_end.Generations("launch1")) == ([], [])
    z = LaunchSpec({**_spec(tmp_path, "z").raw, "hosts": ["a", "b", "z"]})
    peer_end.clear(_spec(tmp_path, "a"))
    assert peer_end.announce_resumed(z, "resume2", "launch1") is None
    assert peer_end.peers_resumed(b, peer_end.Generations("launch1")) == ([], [])


def test_an_operator_start_takes_a_hosts_resume_marker_back(tmp_path: Path) -> None:
    """A relaunch after the resume: the resume marker must not outlive it, or a host
    still paused in the resumed-from part would join a part that is gone."""
    a = _resumed_by_a(tmp_path)
    peer_end.clear(a)
    b = _spec(tmp_path, "b")
    assert peer_end.peers_resumed(b, peer_end.Generations("launch1")) == ([], [])
    # Without both generations (an older cockpit's op ids) nothing is written.
    assert peer_end.announce_resumed(a, None, "launch1") is None
    assert peer_end.announce_resumed(a, "resume2", None) is None
    assert not (peer_end.resumed_dir(a) / "a.json").exists()
    single = LaunchSpec({**_spec(tmp_path, "a", nnodes=1).raw, "hosts": ["a"]})
    assert peer_end.announce_resumed(single, "resume2", "launch1") is None
    assert not (peer_end.resumed_dir(a) / "a.json").exists()


def test_an_unreadable_resume_marker_is_reported_with_its_path_and_never_acted_on(
    tmp_path: Path,
) -> None:
    b = _spec(tmp_path, "b")
    folder = peer_end.resumed_dir(b)
    folder.mkdir(parents=True)
    (folder / "a.json").write_text("[1, 2")
    (folder / "c.json").write_text(json.dumps({"host": "c", "generation": "resume2",
                                               "resumed_from": "launch1", "at": 1.0}))
    peers, problems = peer_end.peers_resumed(b, peer_end.Generations("launch1"))
    assert peers == []
    assert len(problems) == 2 and str(folder / "a.json") in problems[0]
    assert "field 'hosts' missing or not a list of names" in problems[1], problems


def test_a_paused_part_resumes_in_the_generation_of_the_resume_it_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host b, paused with a, follows a's resume as the operator's own resume there would
    have gone: the same generation, from the newest checkpoint, said in the journal; then
    it leaves a resume marker of its own, and a later look finds nothing more to follow."""
    a, b = _job(tmp_path, "a", "launch1-a"), _job(tmp_path, "b", "launch1-b")
    launched: list[object] = []
    monkeypatch.setattr(b, "launch", lambda checkpoint, reason="launch": launched.append(
        (checkpoint, reason)))
    b.state = "paused"
    assert b._peer_resumed() is False  # nothing resumed yet
    a.state = "paused"
    monkeypatch.setattr(a, "launch", lambda checkpoint, reason="launch": None)
    a._resume("resume2-a")  # the operator's resume, which reached a only
    b.peers._resumes_checked = 0.0
    assert b._peer_resumed() is True
    assert launched == [(None, "resume")]
    assert b.peers.generations.current == "resume2"
    (resumed,) = _events(b, "resume")
    assert resumed["data"]["mode"] == "peer" and resumed["data"]["peer"] == "a", resumed
    assert "as host a resumed it (the resume did not reach this host)" in resumed["msg"]
    mine = json.loads((peer_end.resumed_dir(b.spec) / "b.json").read_text())
    assert (mine["generation"], mine["resumed_from"]) == ("resume2", "launch1")
    b.state = "paused"  # were it paused again, in the new part: a's resume is behind it
    b.peers._resumes_checked = 0.0
    assert b._peer_resumed() is False and len(launched) == 1


def test_the_hosts_a_scale_keeps_go_on_in_its_generation_with_the_host_it_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`scale --add c` regroups every node: a, which stays, takes the scale's generation,
    which c starts with. So c's pause reaches a without the clocks, and a resume that
    missed c is followed by c (both were paused in the same part)."""
    spec = {**_spare_spec(tmp_path), "spares": [], "nnodes": "1:3"}
    a = ManagedJob(LaunchSpec({**spec, "host": "a"}), Journal(tmp_path / "a"))
    a._started_by_operator("launch1-a")
    a.state = "running"
    after = ["a", "b", "c"]
    a.membership.scale({"id": "scale2-a", "change": "add", "host": "c", "hosts": after})
    assert a.peers.generations.state() == {"current": "scale2", "past": ["launch1"]}
    c = ManagedJob(LaunchSpec({**spec, "hosts": after, "host": "c"}), Journal(tmp_path / "c"))
    c._started_by_operator("scale2-c")
    c.state = "running"
    c.peers.announce(peer_end.PAUSED, "operator", "paused by the operator", 7, "/ckpt/7")
    assert a.peers.generations.judge("scale2") is True  # followed at once, clocks or not
    # A scale op id of another shape (an older cockpit) keeps the part's generation.
    a.membership.scale({"id": "by-hand", "change": "remove", "host": "c", "hosts": ["a", "b"]})
    assert a.peers.generations.current == "scale2"
    # Paused together in scale2, the resume reaches c only: a follows it.
    a.state = "paused"
    a.spec = LaunchSpec({**spec, "hosts": after, "host": "a"})
    monkeypatch.setattr(a, "launch", lambda checkpoint, reason="launch": None)
    monkeypatch.setattr(c, "launch", lambda checkpoint, reason="launch": None)
    c.state = "paused"
    c._resume("resume3-c")
    a.peers._resumes_checked = 0.0
    assert a._peer_resumed() is True
    assert a.peers.generations.current == "resume3"


@pytest.mark.parametrize(("state", "follows"), [
    ("paused", True), ("stopped", True), ("failed", True), ("finished", False),
    ("running", False), ("frozen", False),
])
def test_the_parts_a_resume_would_start_again_follow_it_and_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str, follows: bool
) -> None:
    """The job was stopped (or failed) everywhere and the operator resumed it: a host the
    resume did not reach follows as a paused one does. A finished part has nothing left
    to run; a running or frozen one is not ended (a thaw is not followed)."""
    a, b = _job(tmp_path, "a", "launch1-a"), _job(tmp_path, "b", "launch1-b")
    for job in (a, b):
        monkeypatch.setattr(job, "launch", lambda checkpoint, reason="launch": None)
    a.state, b.state = "stopped", state
    a._resume("resume2-a")
    b.peers._resumes_checked = 0.0
    assert b._follow_peers() is follows  # the job's loop, between two looks at its part
    assert bool(_events(b, "resume")) is follows
    assert b.peers.generations.current == ("resume2" if follows else "launch1")
