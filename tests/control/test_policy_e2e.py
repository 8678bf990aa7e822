"""The recovery policy and stack dumps through the real agent and torchrun, with tiny
one-rank trainers: a repeated out-of-memory stops retrying with advice; a hang in a
trainer that registered faulthandler has its stack dumped before the kill; a restart
that fails before its first step does not end the outage; when one host of a two-host
job gives up, the other stops its part instead of waiting in the rendezvous."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.job import peer_end
from agent.job.launch import LaunchSpec
from agent.job.supervisor import alive
from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.harness.job_hosts import free_port

from .conftest import REPO, AgentDaemon

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(120)]

OOM = """
import sys
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "train.py", line 1, in <module>', file=sys.stderr)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
sys.exit(1)
"""

HANGS_AT_STEP_3 = """
import faulthandler, signal, sys, time
from agent.hook import Reporter
faulthandler.register(signal.SIGUSR1)
rep = Reporter(flush_interval=0.1)
def stuck_in_a_collective():
    while True:
        time.sleep(0.05)
for step in range(1, 4):
    time.sleep(0.05)
    rep.step(step, loss=1.0 / step)
rep.flush()
stuck_in_a_collective()
"""


# Attempt 1 trains and is killed; attempt 2 dies as a rank does when its peers' group is
# still re-forming; attempt 3 trains to the end.
KILLED_THEN_RESTART_FAILS = """
import os, signal, sys, time
from pathlib import Path
from agent.hook import Reporter
count = Path(os.environ["ATTEMPTS_FILE"])
attempt = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(attempt))
if attempt == 2:
    print("Traceback (most recent call last):", file=sys.stderr)
    print("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer "
          "[127.0.0.1]:29500", file=sys.stderr)
    sys.exit(1)
rep = Reporter(flush_interval=0.05)
for step in range(1, 7):
    time.sleep(0.05)
    rep.step(step, loss=1.0 / step)
rep.flush()
time.sleep(0.5)
if attempt == 1:
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _spec(tmp_path: Path, name: str, body: str, **extra: object) -> dict:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(body))
    spec = {"name": name, "python": sys.executable, "script": str(script),
            "nproc_per_node": 1, "run_dir": str(tmp_path / "runs" / name),
            "env": {"PYTHONPATH": str(REPO)}, "stop_grace": 2,
            "recovery": {"restart_budget": 5, "backoff": 0.1, "backoff_max": 0.1}}
    spec.update(extra)
    return json.loads(json.dumps(spec))


def test_repeated_oom_stops_retrying_and_suggests_a_smaller_micro_batch(
    tmp_path: Path, agent_daemon: AgentDaemon
) -> None:
    d = agent_daemon
    d.op("launch", spec=_spec(tmp_path, "oom", OOM))
    alert = d.wait_for(lambda: next((r for r in d.records("alert")
                                     if r["code"] == "recovery_stopped"), None), 90,
                       "recovery to stop")  # fmt: skip
    interruptions = d.events("interruption", "oom")
    assert [i["data"]["cause"] for i in interruptions] == ["oom", "oom"]
    assert "CUDA out of memory" in " ".join(interruptions[0]["data"]["evidence"])
    assert [i["data"]["decision"]["retry"] for i in interruptions] == [True, False]
    assert alert["kind"] == "parameter" and alert["severity"] == "critical"
    assert "micro-batch" in alert["hint"] and "repeated 2 times" in alert["what"]
    assert len(d.events("job_started", "oom")) == 2
    (job,) = d.op("jobs")["jobs"]
    assert job["state"] == "failed" and job["restarts"] == 1


def test_hang_dumps_the_stack_of_a_rank_that_registered_faulthandler(
    tmp_path: Path, agent_daemon: AgentDaemon
) -> None:
    d = agent_daemon
    d.op("launch", spec=_spec(tmp_path, "hang", HANGS_AT_STEP_3,
                              hang={"k": 3.0, "floor": 1.0, "startup": 60.0}))  # fmt: skip
    hang = d.wait_for(lambda: d.event("interruption", lambda e: e["job"] == "hang"), 60,
                      "the hang")  # fmt: skip
    data = hang["data"]
    assert data["cause"] == "hang" and data["last_step"] == 3
    assert data["stacks"]["method"] in ("faulthandler", "py-spy")
    assert data["stacks"]["ranks"] == [0] and data["stacks"]["unavailable"] == {}
    assert "stuck_in_a_collective" in Path(data["stacks"]["file"]).read_text()
    assert any("stacks of ranks 0" in line for line in data["evidence"])
    d.wait_for(lambda: len(d.events("job_started", "hang")) == 2, 30, "the restart")
    d.op("stop", job="hang")


def test_a_restart_that_fails_before_its_first_step_does_not_end_the_outage(
    tmp_path: Path, agent_daemon: AgentDaemon
) -> None:
    d = agent_daemon
    spec = _spec(tmp_path, "relapse", KILLED_THEN_RESTART_FAILS)
    spec["env"]["ATTEMPTS_FILE"] = str(tmp_path / "attempts")
    d.op("launch", spec=spec)
    rec = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == "relapse"), 90,
                     "the recovery")  # fmt: skip
    cuts = d.events("interruption", "relapse")
    assert [c["data"]["cause"] for c in cuts] == ["killed", "nccl"], cuts
    data = rec["data"]
    # Named and timed from the failure that started it, its failed restart listed.
    assert data["cause"] == "killed" and data["failed_restarts"] == ["nccl"], data
    assert data["restart_count"] == 2, data
    first, failed = (c["data"]["failure_at"] for c in cuts)
    assert data["recovery_seconds"] > failed - first, (data, cuts)
    assert "recovered from killed (then nccl on restart)" in rec["msg"], rec
    assert len(d.events("job_started", "relapse")) == 3


def test_a_fresh_launch_sets_an_earlier_runs_checkpoints_aside(
    tmp_path: Path, agent_daemon: AgentDaemon
) -> None:
    """The same job name launched again from step 0 where an earlier run checkpointed to
    step 2990: a recovery of the new run must not restore step 2990."""
    d = agent_daemon
    spec = _spec(tmp_path, "again", KILLED_THEN_RESTART_FAILS)
    spec["env"]["ATTEMPTS_FILE"] = str(tmp_path / "attempts")
    old = Path(spec["run_dir"]) / "checkpoints"
    old.mkdir(parents=True)
    payload = b"earlier model"
    (old / "ckpt-00002990.pt").write_bytes(payload)
    (old / "ckpt-00002990.pt.done").write_text(json.dumps({
        "step": 2990, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}))
    d.op("launch", spec=spec)
    aside = d.wait_for(lambda: d.event("checkpoints_set_aside"), 30, "the set-aside")
    assert aside["data"]["ok"] is True and aside["data"]["moved"] == 2, aside
    assert "starts afresh" in aside["msg"] and "step 2990" in aside["msg"], aside
    assert Path(aside["data"]["to"]).name == "checkpoints.earlier-run-to-step-2990"
    rec = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == "again"), 90,
                     "the recovery")  # fmt: skip
    assert rec["data"]["checkpoint"] is None and rec["data"]["checkpoint_step"] == 0, rec
    # The cockpit files the earlier run's steps away on the agent's start of this one.
    with Store(tmp_path / "rec.duckdb") as store:
        store.ingest("local", b"".join(
            encode("train", seq, {"job": "again", "rank": 0, "step": 2990 - seq, "loss": 3.0},
                   ts=1.0 + seq) for seq in range(1, 4)))
        journal = [r for r in d.records() if r["t"] != "stream"]
        result = store.ingest("local", b"".join(
            encode(r["t"], 10 + r["seq"], r, ts=r["ts"]) for r in journal))
        assert result.filed_runs == (("again", "again (earlier run 1)"),), result
        reader = StoreReader(store)
        assert reader.latest_train("again")[0]["step"] < 10


TRAINS_FOREVER = """
import os, sys, time
from agent.hook import Reporter
if os.environ.get("FAIL_HERE"):
    sys.exit(3)
rep = Reporter(flush_interval=0.1)
step = 0
while True:
    step += 1
    time.sleep(0.1)
    rep.step(step, loss=1.0 / step)
"""


# Trains until host a's part ends, then fails as a rank whose collectives lose their
# peers does.
FAILS_WHEN_A_ENDS = """
import os, sys, time
from pathlib import Path
from agent.hook import Reporter
if os.environ.get("FAIL_HERE"):
    sys.exit(3)
ended = Path(os.environ["A_ENDED"])
rep = Reporter(flush_interval=0.1)
step = 0
while not ended.exists():
    step += 1
    rep.step(step, loss=1.0)
    time.sleep(0.05)
rep.flush()
print("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer "
      "[127.0.0.1]:29500", file=sys.stderr)
sys.exit(1)
"""


def _pair(tmp_path: Path, body: str = TRAINS_FOREVER, **extra: object
          ) -> tuple[dict, AgentDaemon, AgentDaemon]:  # fmt: skip
    """The spec of a two-host job, and an agent daemon for each pretend host (a, b)."""
    base = _spec(tmp_path, "pair", body, hosts=["a", "b"], nnodes=2,
                 rendezvous={"endpoint": f"127.0.0.1:{free_port()}"}, **extra)
    daemons = []
    for host in ("a", "b"):
        (tmp_path / host).mkdir()
        daemons.append(AgentDaemon(tmp_path / host / "state"))
    return base, daemons[0], daemons[1]


def _on(base: dict, host: str, **env: str) -> dict:
    """`base` as launched on `host`. Host b serves the rendezvous store: were it a's
    torchrun, a's part failing at its start would take b's part down with it (its store
    gone), and b would not be the part left running alone that these tests need."""
    return {**base, "host": host, "env": {**base["env"], **env},
            "rendezvous": {**base["rendezvous"], "is_host": host == "b"}}


@contextlib.contextmanager
def _b_left_running(tmp_path: Path, body: str = TRAINS_FOREVER, tell_b_of_a: bool = False
                    ) -> Iterator[tuple[AgentDaemon, AgentDaemon]]:  # fmt: skip
    """A two-host job whose part on host a failed at its start and waits a minute to
    restart (where a pause or stop takes effect at once), while b's part trains alone.
    `tell_b_of_a`: b's trainer learns where a's end marker appears (FAILS_WHEN_A_ENDS)."""
    base, a, b = _pair(tmp_path, body,
                       recovery={"restart_budget": 5, "backoff": 60, "backoff_max": 60})
    if tell_b_of_a:
        base["env"]["A_ENDED"] = str(peer_end.marker_dir(LaunchSpec({**base, "host": "a"}))
                                     / "a.json")
    try:  # one launch, as a cockpit sends it: both parts are of its generation
        b.op("launch", op_id="launch1-b", spec=_on(base, "b"))
        a.op("launch", op_id="launch1-a", spec=_on(base, "a", FAIL_HERE="1"))
        a.wait_for(lambda: a.event("interruption"), 60, "a's part to fail")
        b.wait_for(lambda: b.train("pair"), 60, "b's part to train")
        yield a, b
    finally:
        a.close()
        b.close()


def test_when_one_host_of_a_job_gives_up_the_other_stops_its_part(tmp_path: Path) -> None:
    """Host b's torchrun waits in the rendezvous for host a, whose launch cannot start
    (no such python): b's agent must stop its part on a's word, not wait for the
    rendezvous to time out and restart into another wait."""
    base, a, b = _pair(tmp_path)
    try:
        b.op("launch", spec=_on(base, "b"))
        b.wait_for(lambda: b.event("job_started"), 30, "b's torchrun to start")
        a.op("launch", spec={**_on(base, "a"), "python": str(tmp_path / "no-python")})
        cut = a.wait_for(lambda: a.event("interruption"), 30, "a's launch to fail")
        assert cut["data"]["cause"] == "launch_failed", cut
        assert cut["data"]["decision"]["retry"] is False, cut
        told = b.wait_for(lambda: b.event("peer_ended"), 30, "b to hear of a's give-up")
        assert told["data"]["host"] == "a" and told["data"]["why"] == "gave_up", told
        assert told["data"]["cause"] == "launch_failed", told
        assert "the job cannot run without it" in told["msg"], told
        exited = b.wait_for(lambda: b.event("job_exited"), 30, "b's torchrun to end")
        assert exited["data"]["ended_for"] == "peer", exited
        assert "another host of the job gave up" in exited["msg"], exited
        (job,) = b.op("jobs")["jobs"]
        assert job["state"] == "failed", job
        assert not alive(b.event("job_started")["data"]["pid"])
        assert len(b.events("job_started")) == 1  # no restart into another wait
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("op", ["pause", "stop"])
def test_a_host_the_operators_pause_or_stop_did_not_reach_follows_the_others(
    tmp_path: Path, op: str
) -> None:
    """The pause (or stop) reached host a, not host b (its link was down): b's part,
    left running alone, ends the same way as soon as its agent sees a's marker. Host a
    is between a crash and its restart, where a pause or stop takes effect at once."""
    with _b_left_running(tmp_path) as (a, b):
        a.op(op, job="pair")
        told = b.wait_for(lambda: b.event("peer_ended"), 30, f"b to hear of a's {op}")
        assert told["data"]["host"] == "a", told
        assert told["data"]["why"] == {"pause": "paused", "stop": "stopped"}[op], told
        assert f"which the {op} did not reach, stops too" in told["msg"], told
        exited = b.wait_for(lambda: b.event("job_exited"), 30, "b's torchrun to end")
        assert exited["data"]["ended_for"] == op, exited
        (job,) = b.op("jobs")["jobs"]
        assert job["state"] == {"pause": "paused", "stop": "stopped"}[op], job
        if op == "pause":
            paused = b.event("pause")
            assert paused["data"]["ok"] is True and paused["data"]["mode"] == "peer", paused
            assert paused["data"]["peer"] == "a", paused
        assert not alive(b.event("job_started")["data"]["pid"])


@pytest.mark.parametrize("op", ["pause", "stop"])
def test_a_part_that_fails_on_the_lost_peers_of_a_paused_or_stopped_host_follows_it(
    tmp_path: Path, op: str
) -> None:
    """Host b's ranks fail the moment host a's part ends (as collectives on lost peers
    do), before b's agent would next look at the markers: that failure is a's pause (or
    stop) reaching b, not an interruption to report, count and restart from."""
    with _b_left_running(tmp_path, FAILS_WHEN_A_ENDS, tell_b_of_a=True) as (a, b):
        a.op(op, job="pair")  # at once: a's marker is of the launch b's part began with
        b.wait_for(lambda: b.event("job_exited"), 30, "b's ranks to fail on a's end")
        told = b.wait_for(lambda: b.event("peer_ended"), 30, f"b to hear of a's {op}")
        assert told["data"]["why"] == {"pause": "paused", "stop": "stopped"}[op], told
        (job,) = b.op("jobs")["jobs"]
        assert job["state"] == {"pause": "paused", "stop": "stopped"}[op], job
        assert b.events("interruption") == []
        assert job["restarts"] == 0 and len(b.events("job_started")) == 1


def test_a_paused_host_the_stop_did_not_reach_is_stopped_with_the_others(
    tmp_path: Path,
) -> None:
    """The job was paused everywhere; the stop then reached host a only: b's part, paused
    with no process, ends stopped too, so that the hosts do not disagree on the job."""
    with _b_left_running(tmp_path) as (a, b):
        a.op("pause", job="pair")
        b.wait_for(lambda: b.event("pause"), 30, "b to follow a's pause")
        a.op("stop", job="pair")
        told = b.wait_for(lambda: b.event("peer_ended", lambda e: e["data"]["why"] == "stopped"),
                          30, "b to hear of a's stop")
        assert told["data"]["state"] == "paused", told
        (job,) = b.op("jobs")["jobs"]
        assert job["state"] == "stopped", job
        stopped = [e for e in b.events("job_exited") if e["data"].get("ended_for") == "stop"]
        assert len(stopped) == 1 and "(it was paused)" in stopped[0]["msg"], stopped


def test_a_paused_host_the_resume_did_not_reach_resumes_with_the_others(
    tmp_path: Path,
) -> None:
    """The job was paused everywhere; the operator's resume then reached host a only (b's
    link was down): b's agent resumes its part as soon as it sees a's marker, in the same
    generation, rather than leaving a's part waiting in the rendezvous for it."""
    with _b_left_running(tmp_path) as (a, b):
        a.op("pause", job="pair")
        b.wait_for(lambda: b.event("pause"), 30, "b to follow a's pause")
        trained = len(b.records("train"))
        a.op("resume", op_id="resume2-a", job="pair")
        resumed = b.wait_for(lambda: b.event("resume"), 30, "b to follow a's resume")
        assert resumed["data"]["mode"] == "peer" and resumed["data"]["peer"] == "a", resumed
        assert "the resume did not reach this host" in resumed["msg"], resumed
        b.wait_for(lambda: len(b.events("job_started")) == 2, 30, "b's torchrun to start again")
        b.wait_for(lambda: len(b.records("train")) > trained, 60, "b's part to train again")
        (job,) = b.op("jobs")["jobs"]
        assert job["state"] == "running", job
        markers = tmp_path / "runs" / "pair" / "control" / "pair.resumed"  # docs/control.md
        for host in ("a", "b"):
            marker = json.loads((markers / f"{host}.json").read_text())
            assert (marker["generation"], marker["resumed_from"]) == ("resume2", "launch1")
        assert len(b.events("resume")) == 1  # followed once
