"""Control ops through a real `stream` process into a real daemon, acks on the stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from agent.journal.control_inbox import ControlInbox, append_op
from agent.journal.journal import Journal, JournalReader
from tests.harness.waiting import wait_for


def _acks(lines: list[dict]) -> dict[object, dict]:
    return {r["data"]["id"]: r["data"] for r in lines
            if r["t"] == "event" and r["kind"] == "control_ack"}


def test_ping_adjust_stop_unknown_and_malformed_ops_are_acked(tmp_path: Path, procs) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    (run / "spool" / "jobA").mkdir(parents=True)
    daemon = procs("run", "--state-dir", str(state), "--run-dir", str(run),
                   "--simulate-gpus", "1", "--job", "jobB", "--",
                   sys.executable, "-c", "import time; time.sleep(60)")
    stream = procs("stream", "--state-dir", str(state), "--from", "0",
                   stdin=subprocess.PIPE).popen
    ops = [
        {"op": "ping", "id": "p1"},
        {"op": "adjust", "id": "a1", "job": "jobA", "knobs": {"lr_scale": 0.5}},
        {"op": "adjust", "id": "a2", "job": "nojob", "knobs": {"lr_scale": 0.5}},
        {"op": "adjust", "id": "a3", "job": "jobA"},
        {"op": "defragment", "id": "u1", "job": "jobA"},
        {"op": "pause", "id": "u2", "job": "jobA"},
        {"id": "m1"},
        {"op": "sim_xid", "id": "x1", "gpu": 0, "xid": 48},
        {"op": "sim_xid", "id": "x2", "gpu": 3},
        {"op": "sim_xid", "id": "x3", "xid": "79"},
        {"op": "stop", "id": "s1", "job": "jobB", "grace": 2},
    ]
    for op in ops:
        stream.stdin.write(json.dumps(op).encode() + b"\n")
    stream.stdin.write(b"this is not json\n")
    stream.stdin.flush()
    lines: list[dict] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines.append(json.loads(stream.stdout.readline()))
        if len(_acks(lines)) == len(ops) + 1 and any(
                r.get("kind") == "job_exited" for r in lines):
            break
    acks = _acks(lines)
    assert acks["p1"]["ok"] is True and acks["p1"]["op"] == "ping"
    assert acks["a1"]["ok"] is True
    control = run / "control" / "jobA.ndjson"
    written = json.loads(control.read_text())
    assert written["id"] == "a1" and written["knobs"] == {"lr_scale": 0.5}
    assert isinstance(written["ts"], float)
    assert acks["a2"]["ok"] is False and "no job 'nojob'" in acks["a2"]["error"]
    assert acks["a3"]["ok"] is False and "knobs" in acks["a3"]["error"]
    assert acks["u1"] == {"id": "u1", "op": "defragment", "ok": False,
                          "error": "op 'defragment' is not supported by this agent"}
    assert acks["u2"]["ok"] is False
    assert acks["u2"]["error"] == "no job 'jobA' was launched by this agent (jobs: none)"
    assert acks["m1"]["ok"] is False and "no 'op'" in acks["m1"]["error"]
    assert acks["x1"]["ok"] is True and acks["x1"]["xid"] == 48
    xid = next(r for r in lines if r.get("kind") == "xid")
    assert xid["data"]["gpu"] == 0 and xid["data"]["xid"] == 48
    assert acks["x2"]["ok"] is False and "simulated GPU index, 0 to 0" in acks["x2"]["error"]
    assert acks["x3"]["ok"] is False and "positive integer" in acks["x3"]["error"]
    assert acks["s1"]["ok"] is True
    malformed = acks[None]
    assert malformed["ok"] is False and "not JSON" in malformed["error"]
    exited = next(r for r in lines if r.get("kind") == "job_exited")
    assert exited["job"] == "jobB" and exited["data"]["returncode"] == -15
    # Asked for: the record says so, so that nobody reads the signal as a crash.
    assert exited["data"]["ended_for"] == "stop"
    assert exited["msg"] == ("job jobB was killed by signal 15 (ended by the agent on a stop "
                             "request)")
    stream.stdin.close()
    assert stream.wait(10) == 0
    assert b"control line 12 is not JSON" in stream.stderr.read()
    assert daemon.terminate() == 0


def test_acked_op_is_not_run_twice_after_a_crash(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    runs: list[str] = []
    handlers = {"ping": lambda op: runs.append(op["id"]) or {}}
    append_op(tmp_path, {"op": "ping", "id": "once", "_rx": time.time()})
    inbox = ControlInbox(journal, handlers)
    assert inbox.poll() == 1
    # the daemon dies after journaling the ack, before saving its inbox position
    inbox.state_path.unlink()
    append_op(tmp_path, {"op": "ping", "id": "twice", "_rx": time.time()})
    again = ControlInbox(journal, handlers)
    assert again.poll() == 1
    journal.close()
    assert runs == ["once", "twice"]
    acks = [r["data"]["id"] for r in JournalReader(tmp_path).records()]
    assert acks == ["once", "twice"]


def test_op_that_waited_too_long_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    append_op(tmp_path, {"op": "ping", "id": "old", "_rx": time.time() - 3600})
    ControlInbox(journal, {"ping": lambda op: {}}).poll()
    journal.close()
    ack = next(JournalReader(tmp_path).records())["data"]
    assert ack["ok"] is False and "expired" in ack["error"]


def test_stream_exits_when_stdout_closes(tmp_path: Path, procs) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    journal.append_many([("event", {"kind": "x", "n": i}) for i in range(50_000)])
    journal.close()
    stream = procs("stream", "--state-dir", str(state), "--from", "0",
                   stdin=subprocess.PIPE).popen
    stream.stdout.readline()
    stream.stdout.close()  # the reader went away mid-backlog
    wait_for(lambda: stream.poll() is not None, timeout=20, what="stream exit")
    assert stream.returncode == 0
    assert b"Traceback" not in stream.stderr.read()


def test_an_ack_names_its_job_and_what_an_adjust_asked(tmp_path: Path) -> None:
    """A launch's ack belongs to the job its spec names (else it shows under every job),
    and a checkpoint request reads as one, not as a bare "adjust"."""
    journal = Journal(tmp_path)
    handlers = {"launch": lambda op: {}, "adjust": lambda op: {}}
    append_op(tmp_path, {"op": "launch", "id": "l1", "spec": {"name": "fork-1"},
                         "_rx": time.time()})
    append_op(tmp_path, {"op": "adjust", "id": "a1", "job": "fork-1",
                         "knobs": {"checkpoint_now": True}, "_rx": time.time()})
    ControlInbox(journal, handlers).poll()
    journal.close()
    acks = [(r["job"], r["msg"]) for r in JournalReader(tmp_path).records()]
    assert acks == [("fork-1", "control op launch accepted"),
                    ("fork-1", "control op adjust (checkpoint_now) written to the trainer's "
                               "control file")]


def test_the_agents_ack_of_an_adjust_never_says_it_was_done(tmp_path: Path) -> None:
    """The agent only writes an adjust into the trainer's control file: the trainer's own
    ack (same op id, with a rank) says whether it applied or refused it. "done" in the
    agent's ack read as in force a knob the trainer then refused or never applied."""
    journal = Journal(tmp_path)
    append_op(tmp_path, {"op": "adjust", "id": "a1", "job": "j",
                         "knobs": {"lr_scale": 0.5}, "_rx": time.time()})
    append_op(tmp_path, {"op": "ping", "id": "p1", "_rx": time.time()})
    ControlInbox(journal, {"adjust": lambda op: {"file": "/run/control/j.ndjson"},
                           "ping": lambda op: {}}).poll()
    journal.close()
    adjust, ping = JournalReader(tmp_path).records()
    assert adjust["rank"] is None and adjust["data"]["ok"] is True
    assert adjust["msg"] == ("control op adjust (lr_scale=0.5) written to the trainer's "
                             "control file")
    assert "done" not in adjust["msg"] and "applied" not in adjust["msg"]
    assert ping["msg"] == "control op ping done"  # an op the agent completes itself
