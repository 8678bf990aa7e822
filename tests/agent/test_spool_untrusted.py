"""A trainer spool is untrusted input (issue 25): whatever a rank writes there, the agent
validates it where it enters, refuses what only the agent may say, counts and keeps each
bad line with its source named, and never lets one line, one file or one failure stop
the daemon, its jobs or the other spools. The daemon's control ops refuse job names that
would reach outside the run dir."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.daemon import Daemon, DaemonConfig, ObservedJournal
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.journal.control_inbox import ControlInbox, append_op
from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolTailer
from agent.journal.spool_rejects import REJECTS_FILE
from agent.samplers.sim import SimGpus
from agent.wire import events
from agent.wire.events import AGENT_EVENT_KINDS
from agent.wire.protocol import SPOOL_RECORD_TYPES
from agent.wire.record_check import Rejected, check_spool_record

from .conftest import SpoolWriter

INT64_MAX = (1 << 63) - 1


def _records(state: Path) -> list[dict]:
    return list(JournalReader(state).records())


def _errors(state: Path) -> list[dict]:
    return [r for r in _records(state) if r.get("kind") == "spool_error"]


def _steps(state: Path) -> list[int]:
    return [r["step"] for r in _records(state) if r["t"] == "train"]


def _setup(tmp_path: Path) -> tuple[Path, Path, Journal, SpoolTailer]:
    state, run = tmp_path / "state", tmp_path / "run"
    journal = Journal(state)
    return state, run, journal, SpoolTailer(journal, [run], settle=0.0)


def _line(record: dict) -> str:
    return json.dumps(record) + "\n"


def _header(job: str = "J", rank: int = 0, **changes: Any) -> str:
    header = {"t": "spool", "v": 1, "file_id": "f00d", "job": job, "rank": rank,
              "pid": os.getpid(), "ts": time.time()}
    header.update(changes)
    return _line(header)


# -- item 1: one bad spool line ---------------------------------------------------------

def test_a_header_with_a_bad_ts_is_rejected_and_its_records_still_read(tmp_path: Path
                                                                      ) -> None:
    """`"ts":"soon"` used to raise out of every poll of every restart (a crash loop)."""
    state, run, journal, tailer = _setup(tmp_path)
    folder = run / "spool" / "J"
    folder.mkdir(parents=True)
    path = folder / "rank-0.f00d.ndjson"
    path.write_text(_header(ts="soon") + _line({"t": "train", "step": 1, "loss": 0.5}))
    tailer.poll()
    tailer.checkpoint()
    journal.close()
    journal = Journal(state)  # a restarted daemon: neither repeats nor reports it again
    SpoolTailer(journal, [run], settle=0.0).poll()
    journal.close()
    train = [r for r in _records(state) if r["t"] == "train"]
    assert [(r["step"], r["job"], r["rank"]) for r in train] == [(1, "J", 0)]
    errors = _errors(state)
    assert len(errors) == 1 and errors[0]["data"]["line"] == 1
    assert "header" in errors[0]["data"]["error"] and "ts" in errors[0]["data"]["error"]


@pytest.mark.parametrize("header", [
    {"file_id": 'a"b'},  # would never be found again in the journal: read twice
    {"file_id": "i1.2"},  # the form of an id the agent gives a file by its inode
    {"job": "other"},  # not its folder's job
    {"rank": 3},  # not its file name's rank
    {"rank": True},
    {"pid": "me"},
    {"ts": float("nan")},
    {"ts": 1e300},
])
def test_a_header_that_lies_is_rejected(tmp_path: Path, header: dict) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    folder = run / "spool" / "J"
    folder.mkdir(parents=True)
    (folder / "rank-0.x.ndjson").write_text(_header(**header) + _line(
        {"t": "train", "step": 4}))
    tailer.poll()
    journal.close()
    assert [(r["step"], r["job"], r["rank"]) for r in _records(state) if r["t"] == "train"
            ] == [(4, "J", 0)]
    assert [e["data"]["line"] for e in _errors(state)] == [1]


def test_agent_only_types_and_event_kinds_are_refused(tmp_path: Path) -> None:
    """A forged `job_started` renamed a job's whole history; a forged `hello` or `gpu`
    is the agent speaking. The hook's own records still pass."""
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    forged = [
        {"t": "hello", "agent_version": "9", "hostname": "evil"},
        {"t": "gpu", "gpu": 0, "util": 100.0},
        {"t": "host", "cpu": 1.0},
        {"t": "stream", "v": 1},
        {"t": "spool", "v": 1, "file_id": "x"},
        {"t": "event", "kind": "job_started", "msg": "x", "data": {"pid": 1, "cmd": ["x"]}},
        {"t": "event", "kind": "job_exited", "msg": "x", "data": {"returncode": 0}},
        {"t": "event", "kind": "spool_error", "msg": "x", "data": {}},
        {"t": "event", "kind": "recovery", "msg": "x", "data": {}},
        {"t": "event", "kind": "control_ack", "msg": "x",
         "data": {"id": "op-1", "op": "pause", "ok": True}},  # only adjusts are the hook's
        {"t": "event", "kind": "dropped", "msg": "x",  # the journal's retention, not a rank
         "data": {"count": 5, "reason": "size cap", "first": 1, "last": 5}},
    ]
    hooks = [
        {"t": "event", "kind": "resumed", "msg": "resumed from ckpt", "data": {"at": 3}},
        {"t": "event", "kind": "stage", "msg": "stage b", "data": {"stage": "b"}},
        {"t": "event", "kind": "checkpoint_saved", "step": 3, "msg": "saved",
         "data": {"path": "/c/3.pt", "seconds": 0.5, "bytes": 10}},
        {"t": "event", "kind": "control_ack", "step": 3, "msg": "applied lr_scale=0.5",
         "data": {"id": "op-2", "op": "adjust", "ok": True, "applied_step": 3,
                  "knobs": {"lr_scale": 0.5}}},
        {"t": "event", "kind": "dropped", "msg": "2 spool records lost",
         "data": {"count": 2, "reason": "cannot write"}},
        {"t": "run", "world_size": 2, "total_steps": 100, "stages": ["a", "b"],
         "config": {"lr": 0.1}},
        {"t": "log", "stream": "stderr", "line": "warning: slow"},
        {"t": "alert", "kind": "data", "severity": "warning", "code": "bad_batch",
         "where": {"rank": 0, "step": 3}, "what": "a bad batch", "hint": "look at it"},
        {"t": "eval", "step": 3, "loss": 1.5, "metrics": {"acc": 0.5}},
    ]
    for record in forged + hooks:
        writer.raw(_line(record))
    tailer.poll()
    journal.close()
    records = _records(state)
    assert [r["t"] for r in records if r["t"] in ("hello", "gpu", "host", "stream", "spool")
            ] == []
    kinds = [r["kind"] for r in records if r["t"] == "event" and r["kind"] != "spool_error"]
    assert kinds == ["resumed", "stage", "checkpoint_saved", "control_ack", "dropped"]
    errors = _errors(state)
    assert [e["data"]["line"] for e in errors] == list(range(2, 2 + len(forged)))
    assert all(e["job"] == "J" and e["rank"] == 0 for e in errors)
    assert "job_started" in errors[5]["data"]["error"]
    assert [r["t"] for r in records if r["t"] in ("run", "log", "alert", "eval")] == [
        "run", "log", "alert", "eval"]


@pytest.mark.parametrize(("record", "field"), [
    ({"t": "train", "job": ["J"], "step": 1}, "job"),
    ({"t": "train", "job": "K", "step": 1}, "job"),
    ({"t": "train", "rank": 7, "step": 1}, "rank"),
    ({"t": "train", "step": "1"}, "step"),
    ({"t": "train", "step": 99999999999999999999}, "step"),
    ({"t": "train", "step": 1, "ts": "soon"}, "ts"),
    ({"t": "train", "step": 1, "loss": "low"}, "loss"),
    ({"t": "train", "step": 1, "step_time": [1]}, "step_time"),
    ({"t": "train", "step": 1, "extra": {"x": "y"}}, "extra"),
    ({"t": "train", "step": 1, "extra": {"deep": 1, "n": 10 ** 30}}, "extra"),
    ({"t": "eval", "step": None}, "step"),
    ({"t": "event", "kind": "checkpoint_saved", "data": [1]}, "data"),
    ({"t": "event", "kind": "checkpoint_saved", "data": {"path": 5}}, "path"),
    ({"t": "event", "kind": "control_ack", "data": 1}, "data"),
    ({"t": "event", "kind": "note", "data": 1}, "data"),
    ({"t": "event", "kind": ["note"], "data": {}}, "kind"),
    ({"t": "event", "kind": "note", "msg": "x" * 70000}, "msg"),
    ({"t": "log", "stream": "stdout", "line": "x" * 5000}, "line"),
    ({"t": "log", "stream": "tty", "line": "x"}, "stream"),
    ({"t": "alert", "kind": "bogus", "severity": "warning", "code": "c", "what": "w",
      "hint": "h", "where": {}}, "kind"),
    ({"t": "run", "total_steps": 1.5}, "total_steps"),
    ({"t": "run", "stages": "ab"}, "stages"),
])
def test_fields_of_the_wrong_type_or_size_are_refused(tmp_path: Path, record: dict,
                                                      field: str) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    writer.raw(_line(record))
    writer.train(2)
    tailer.poll()
    journal.close()
    assert _steps(state) == [2]
    [error] = _errors(state)
    assert field in error["data"]["error"], error["data"]["error"]
    assert error["data"]["line"] == 2


@pytest.mark.parametrize("raw", ids=["deep", "deep-extra", "nan", "inf", "1e999", "digits"],
                         argvalues=[
    "[" * 200_000 + "]" * 200_000,  # json.loads raises RecursionError, not ValueError
    '{"t":"train","step":1,"extra":{"x":' + "[" * 100 + "]" * 100 + "}}",
    '{"t":"train","step":1,"loss":NaN}',
    '{"t":"train","step":1,"loss":Infinity}',
    '{"t":"train","step":1,"lr":1e999}',
    '{"t":"event","kind":"x","data":{"n":' + "9" * 5000 + "}}",  # over int()'s digit limit
])
def test_lines_json_cannot_hold_are_counted_rejects(tmp_path: Path, raw: str) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    writer.raw(raw + "\n")
    writer.train(2)
    tailer.poll()
    journal.close()
    assert _steps(state) == [2]
    assert [e["data"]["line"] for e in _errors(state)] == [2]


def test_everything_the_reporter_writes_passes(tmp_path: Path) -> None:
    """The checks refuse nothing the real hook writes: its records, its events (a user's
    kinds, a stage, a checkpoint, a control's acknowledgement), its warnings."""
    from agent.hook import Reporter

    state, run, journal, tailer = _setup(tmp_path)
    control = run / "control" / "J.ndjson"
    control.parent.mkdir(parents=True)
    control.write_text(_line({"id": "op-1", "ts": time.time(),
                              "knobs": {"lr_scale": 0.5, "checkpoint_now": True}}))
    rep = Reporter(run_dir=str(run), job="J", rank=0, register_atexit=False)
    rep.declare(total_steps=10, stages=["a"], config={"lr": 0.1, "deep": {"x": [1, 2]}},
                seed=1, tags=["t"], flops_per_step=1e12)
    rep.stage("a")
    for step in range(3):
        rep.step(step, loss=float("nan") if step == 1 else 1.0 / (step + 1), lr=0.1,
                 samples=8, tokens=64, acc=0.5, bad=[1, 2])
        rep.poll_control()
    rep.take_request("checkpoint_now")
    rep.checkpoint_saved(str(tmp_path / "ckpt-2.pt"), step=2, seconds=0.1, bytes=10)
    rep.eval(2, loss=1.5, acc=0.4)
    rep.event("resumed", "resumed", at=2)
    rep.alert("data", "bad_batch", "a bad batch", "look at it", gpu=0)
    rep.log("plain line\x1b[31m red")
    rep.close()
    tailer.poll()
    journal.close()
    records = _records(state)
    assert _errors(state) == []
    assert {"run", "train", "eval", "event", "alert", "log"} <= {r["t"] for r in records}
    kinds = {r["kind"] for r in records if r["t"] == "event"}
    assert {"stage", "checkpoint_saved", "control_ack", "resumed"} <= kinds, kinds


def test_every_event_kind_the_agent_journals_is_refused_from_spools() -> None:
    """AGENT_EVENT_KINDS is the one list of the agent's own kinds: a kind the agent
    starts to journal is added there, or a trainer could forge it."""
    import re

    agent_dir = Path(__file__).resolve().parents[2] / "agent"
    found = set()
    for path in agent_dir.rglob("*.py"):
        if "hook" in path.relative_to(agent_dir).parts:
            continue  # the trainer's side: what it writes is checked, not trusted
        text = path.read_text()
        # An event record's type, as a literal or as agent.wire.protocol's constant.
        event = r'\((?:"event"|EVENT), \{\s*"kind": '
        found |= set(re.findall(r'(?:_event|\.event)\(\s*"([a-z_]+)"', text))
        found |= set(re.findall(event + r'"([a-z_]+)"', text))
        # The same shapes naming a kind by its constant (agent.wire.events).
        named = set(re.findall(r'(?:_event|\.event)\(\s*([A-Z][A-Z_]+)\b', text))
        named |= set(re.findall(event + r'([A-Z][A-Z_]+)\b', text))
        found |= {getattr(events, name) for name in named}
    shared = {"control_ack", "dropped", "checkpoint_skipped"}  # the hook writes them too
    assert {"job_started", "job_exited", "sampler_error", "xid"} <= found
    assert found - shared <= AGENT_EVENT_KINDS, found - shared - AGENT_EVENT_KINDS


def test_a_rejected_line_is_kept_for_inspection_and_counted(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    writer.raw('{"t":"event","kind":"job_started","data":{}}\n')
    writer.train(1)
    writer.raw("\x1b]0;pwned\x07 not json\n")
    tailer.poll()
    journal.close()
    errors = _errors(state)
    assert [e["data"]["rejected"] for e in errors] == [1, 2]
    kept_path = state / REJECTS_FILE
    assert all(e["data"]["kept"] == str(kept_path) for e in errors)
    kept = [json.loads(line) for line in kept_path.read_text().splitlines()]
    assert [(k["file"], k["line"], k["job"], k["rank"]) for k in kept] == [
        (str(writer.path), 2, "J", 0), (str(writer.path), 4, "J", 0)]
    assert "job_started" in kept[0]["raw"] and "job_started" in kept[0]["error"]
    assert kept[1]["raw"] == "\x1b]0;pwned\x07 not json"  # as written, for inspection


def test_the_kept_rejects_stay_bounded(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    tailer.kept.max_bytes = 4096
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    for n in range(300):
        writer.raw(f"bad line {n} {'x' * 100}\n")
    tailer.poll()
    journal.close()
    files = sorted(state.glob("spool_rejects*"))
    assert 1 <= len(files) <= 2
    assert sum(f.stat().st_size for f in files) <= 2 * 4096 + 1024
    newest = (state / REJECTS_FILE).read_text().splitlines()[-1]
    assert "bad line 299" in json.loads(newest)["raw"]
    assert tailer.rejected == 300


def test_a_flood_of_bad_lines_is_summarised_not_journaled_one_by_one(tmp_path: Path) -> None:
    import agent.journal.spool as spool

    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    total = spool.REPORT_EACH + 50
    for n in range(total):
        writer.raw(f"bad {n}\n")
    writer.train(9)
    tailer.poll()
    for n in range(20):
        writer.raw(f"worse {n}\n")
    tailer.poll()
    tailer.checkpoint()
    journal.close()
    errors = _errors(state)
    single = [e for e in errors if "count" not in e["data"]]
    summaries = [e for e in errors if "count" in e["data"]]
    assert len(single) == spool.REPORT_EACH
    assert [s["data"]["count"] for s in summaries] == [50, 20]
    assert summaries[0]["data"]["lines"] == [spool.REPORT_EACH + 2, total + 1]
    assert summaries[-1]["data"]["rejected"] == total + 20
    assert _steps(state) == [9]
    # The cockpit's alert counts the lines, not the events, and says where they are kept.
    from cockpit.analysis import alerts

    [alert] = alerts.data_alerts(data_wait_pct=None, worst=None, now=0.0,
                                 events=[{**e, "host": "h"} for e in errors])
    assert f"{total + 20} malformed" in alert.what and REJECTS_FILE in alert.hint
    assert alert.where.endswith(f"range 2-{total + 22}")  # spans the good line 152
    # The summaries carry the read position: a restart reads nothing again.
    journal = Journal(state)
    assert SpoolTailer(journal, [run], settle=0.0).poll() == 0
    journal.close()


def test_one_unreadable_spool_does_not_stop_the_others(tmp_path: Path) -> None:
    """A directory or a FIFO named like a spool file used to raise out of the poll (or,
    for a FIFO, block it for good)."""
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    writer.train(1)
    (writer.dir / "rank-1.d1r.ndjson").mkdir()
    os.mkfifo(writer.dir / "rank-2.f1f0.ndjson")
    (run / "spool" / "bad\x1b[31mjob").mkdir()
    (run / "spool" / "bad\x1b[31mjob" / "rank-0.ndjson").write_text(_line(
        {"t": "train", "step": 5}))
    (run / "spool" / "J" / f"rank-{10 ** 30}.ndjson").write_text(_line(
        {"t": "train", "step": 6}))
    tailer.poll()
    writer.train(2)
    tailer.poll()
    journal.close()
    assert _steps(state) == [1, 2]
    errors = _errors(state)
    assert len(errors) == 4  # each reported once, not at every poll
    assert all("\x1b" not in e["msg"] + (e["data"]["file"] or "") for e in errors)


def test_a_failure_in_one_file_leaves_the_others_read(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    good, bad = SpoolWriter(run, "J", 0), SpoolWriter(run, "J", 1)
    good.new_file()
    bad.new_file()
    good.train(1)
    bad.train(1)
    original = SpoolTailer._read

    def read(self: SpoolTailer, sf: Any, *args: Any) -> Any:
        if sf.rank == 1:
            raise PermissionError(13, "Permission denied", str(sf.path))
        return original(self, sf, *args)

    monkeypatch.setattr(SpoolTailer, "_read", read)
    tailer.poll()
    tailer.poll()
    monkeypatch.setattr(SpoolTailer, "_read", original)
    tailer.poll()  # readable again: read from where it was, once
    journal.close()
    records = _records(state)
    assert sorted((r["rank"], r["step"]) for r in records if r["t"] == "train") == [
        (0, 1), (1, 1)]
    failures = [r for r in records if r.get("kind") == "spool_error"]
    assert len(failures) == 1 and "Permission denied" in failures[0]["msg"]


class _FailingOnce:
    """The journal as a full disk leaves it: once `failed` is cleared, one batch is
    refused whole; then it writes again."""

    def __init__(self, journal: Journal) -> None:
        self.journal, self.failed = journal, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)

    def append_many(self, records: Any, ts: Any = None) -> list[int]:
        if not self.failed:
            self.failed = True
            raise OSError(28, "No space left on device")
        return self.journal.append_many(records, ts=ts)


def test_a_batch_the_journal_refuses_is_read_and_reported_again_once(tmp_path: Path
                                                                     ) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    journal = Journal(state)
    failing = _FailingOnce(journal)
    tailer = SpoolTailer(failing, [run], settle=0.0)
    good = SpoolWriter(run, "J", 0)
    good.new_file()
    good.train(1)
    tailer.poll()
    good.raw("not json\n")
    good.train(2)
    (good.dir / "rank-1.b4d.ndjson").write_text(_header(rank=1, file_id="b4d", ts="soon")
                                                + _line({"t": "train", "step": 7}))
    failing.failed = False
    with pytest.raises(OSError):
        tailer.poll()
    assert os.getpid() in tailer.pid_ranks()  # the known files stay known meanwhile
    tailer.poll()
    journal.close()
    assert sorted((r["rank"], r["step"]) for r in _records(state) if r["t"] == "train") == [
        (0, 1), (0, 2), (1, 7)]
    errors = _errors(state)
    assert sorted((e["rank"], e["data"]["line"], e["data"]["rejected"]) for e in errors) == [
        (0, 3, 1), (1, 1, 1)]
    assert tailer.rejected == 2


def test_an_observer_failure_after_journaling_repeats_nothing(tmp_path: Path) -> None:
    """The journal append is the commit point: whatever fails after it must not leave
    the read positions behind, or the next poll journals the same lines again."""
    state, run = tmp_path / "state", tmp_path / "run"
    journal = Journal(state)
    calls = []

    def observe(t: str, fields: Any) -> None:
        calls.append(fields.get("step"))
        if len(calls) == 1:
            raise KeyError("a bug in a job's bookkeeping")

    tailer = SpoolTailer(ObservedJournal(journal, observe, log=lambda msg: None), [run],
                         settle=0.0)
    writer = SpoolWriter(run, "J", 0)
    writer.new_file()
    writer.train(1)
    writer.train(2)
    tailer.poll()
    tailer.poll()
    journal.close()
    assert _steps(state) == [1, 2]
    assert calls == [1, 2]


# -- the daemon -------------------------------------------------------------------------

def _wait(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def _running_daemon(tmp_path: Path) -> tuple[Daemon, ManagedJob, threading.Thread, list]:
    run = tmp_path / "run"
    daemon = Daemon(DaemonConfig(tmp_path / "state", run_dirs=[run]), gpus=SimGpus(1),
                    log=lambda msg: None)
    spec = LaunchSpec({"name": "J", "script": "train.py", "hosts": ["h"], "host": "h",
                       "nnodes": 1, "run_dir": str(run)})
    job = ManagedJob(spec, daemon.journal, log=lambda msg: None)
    job.state = "running"  # as if launched: the spool's records are its to watch
    daemon.jobs["J"] = job
    failed: list = []

    def run_it() -> None:
        try:
            daemon.run()
        except BaseException as exc:  # what ended the daemon, for the assertion
            failed.append(exc)

    thread = threading.Thread(target=run_it, name="daemon-under-test", daemon=True)
    thread.start()
    return daemon, job, thread, failed


def test_hostile_spool_lines_leave_the_daemon_and_its_job_running(tmp_path: Path) -> None:
    daemon, job, thread, failed = _running_daemon(tmp_path)
    state = tmp_path / "state"
    try:
        writer = SpoolWriter(tmp_path / "run", "J", 0)
        writer.new_file()
        for line in ('{"t":"train","job":["J"],"step":1}',
                     '{"t":"event","kind":"checkpoint_saved","data":[1]}',
                     '{"t":"event","kind":"control_ack","data":1}',
                     '{"t":"train","step":1,"step_time":"slow","ts":1}'):
            writer.raw(line + "\n")
        sick = SpoolWriter(tmp_path / "run", "J", 1)
        sick.dir.mkdir(parents=True, exist_ok=True)
        (sick.dir / "rank-1.5eed.ndjson").write_text(_header(rank=1, file_id="5eed",
                                                             ts="soon"))
        writer.train(7)
        _wait(lambda: 7 in _steps(state), "the good step after the bad lines")
        assert thread.is_alive(), failed
        assert job.progress.cur_max == 7  # the job still sees its ranks' steps
        assert len(_errors(state)) == 5
    finally:
        daemon.stop()
        thread.join(60)
    assert failed == []


def test_a_failing_spool_poll_is_reported_and_the_daemon_carries_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, _job, thread, failed = _running_daemon(tmp_path)
    state = tmp_path / "state"
    original = daemon.spools.poll
    raised = []

    def poll() -> int:
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug in the spool reader")
        return original()

    try:
        writer = SpoolWriter(tmp_path / "run", "J", 0)
        writer.new_file()
        monkeypatch.setattr(daemon.spools, "poll", poll)
        writer.train(3)
        _wait(lambda: 3 in _steps(state), "the step after the failed poll")
        assert thread.is_alive(), failed
        [report] = [r for r in _records(state) if r.get("kind") == "sampler_error"
                    and r["data"].get("sampler") == "spool"]
        assert "a bug in the spool reader" in report["msg"]
    finally:
        daemon.stop()
        thread.join(60)
    assert failed == []
    assert _steps(state) == [3]


# -- the control inbox after hostile journal content -----------------------------------

def test_a_forged_control_ack_neither_kills_nor_silences_the_inbox(tmp_path: Path) -> None:
    """An old spool's `{"kind":"control_ack","data":1}` in the journal killed the next
    daemon in `ControlInbox.recover`; a trainer's ack naming a pending op's id made that
    op be skipped as already answered."""
    state = tmp_path / "state"
    journal = Journal(state)
    journal.append("event", {"kind": "control_ack", "job": "J", "data": 1, "src": "f:10"})
    journal.append("event", {"kind": "control_ack", "job": "J", "data": [], "src": "f:20"})
    journal.append("event", {"kind": "control_ack", "job": "J", "src": "f:30",
                             "data": {"id": "op-1", "op": "adjust", "ok": True}})
    append_op(state, {"op": "ping", "id": "op-1", "_rx": time.time()})
    inbox = ControlInbox(journal, {"ping": lambda op: {"pong": True}})
    assert inbox.poll() == 1
    journal.close()
    acks = [r for r in _records(state) if r.get("kind") == "control_ack" and "src" not in r]
    assert [(a["data"]["id"], a["data"]["ok"]) for a in acks] == [("op-1", True)]


@pytest.mark.parametrize("saved", ['{"offset": -5, "seq": 0}', '{"offset": 1e999, "seq": 0}',
                                   '{"offset": 0, "seq": Infinity}', '[1, 2]', "{"])
def test_a_corrupt_inbox_position_is_survived(tmp_path: Path, saved: str) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    append_op(state, {"op": "ping", "id": "op-1", "_rx": time.time()})
    (state / "control" / "inbox.state.json").write_text(saved)
    inbox = ControlInbox(journal, {"ping": lambda op: {}})
    assert inbox.poll() == 1
    journal.close()


def test_an_inbox_line_json_cannot_hold_is_refused_with_an_ack(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    path = state / "control" / "inbox.ndjson"
    path.parent.mkdir(parents=True)
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    inbox = ControlInbox(journal, {})
    assert inbox.poll() == 1
    journal.close()
    [ack] = [r for r in _records(state) if r.get("kind") == "control_ack"]
    assert ack["data"]["ok"] is False


# -- item 6: job names in control ops ---------------------------------------------------

@pytest.mark.parametrize(("op", "field"), [
    ({"op": "adjust", "job": "../../x", "knobs": {"lr_scale": 0.5}}, "job"),
    ({"op": "adjust", "job": "../x", "knobs": {"lr_scale": 0.5}}, "job"),
    ({"op": "stop", "job": ["J"]}, "job"),
    ({"op": "stop", "job": "../../x"}, "job"),
    ({"op": "pause", "job": {"a": 1}}, "job"),
    ({"op": "scale", "job": "J", "change": "add", "host": "../../h"}, "host"),
    ({"op": "scale", "job": "J", "change": "add", "host": "h", "hosts": ["h", "../g"]},
     "hosts"),
])
def test_control_ops_refuse_job_names_that_are_paths(tmp_path: Path, op: dict,
                                                     field: str) -> None:
    (tmp_path / "x").mkdir()  # `RUN/spool/../../x` exists: the old adjust wrote x.ndjson
    (tmp_path / "run" / "spool" / "J").mkdir(parents=True)
    daemon = Daemon(DaemonConfig(tmp_path / "state", run_dirs=[tmp_path / "run"]),
                    gpus=SimGpus(1), log=lambda msg: None)
    try:
        append_op(daemon.config.state_dir, {**op, "id": "op-1", "_rx": time.time()})
        assert daemon.inbox.poll() == 1
        [ack] = [r for r in _records(tmp_path / "state") if r.get("kind") == "control_ack"]
    finally:
        daemon._shutdown()
    assert ack["data"]["ok"] is False
    assert f"'{field}'" in ack["data"]["error"], ack["data"]["error"]
    assert "Error:" not in ack["data"]["error"]  # refused on purpose, not a crash
    outside = [p for p in tmp_path.rglob("*.ndjson") if "run" not in p.relative_to(
        tmp_path).parts and "state" not in p.relative_to(tmp_path).parts]
    assert outside == []
    assert not (tmp_path / "run" / "x.ndjson").exists()


# -- property tests ---------------------------------------------------------------------

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.text(st.sampled_from("aZ0 -\x00\x1b\u202e\U0001f600"), max_size=8)
            | st.sampled_from(["adjust", "stdout", "data", "warning", "nan", "J"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["a", "path", "op", "count", "x\x1b"]), inner, max_size=3), max_leaves=5)
_fields = st.sampled_from([
    "t", "job", "rank", "step", "ts", "kind", "data", "msg", "loss", "extra", "metrics",
    "line", "stream", "severity", "code", "what", "hint", "where", "stages", "config",
    "total_steps", "path", "seconds", "bytes", "op", "id", "ok", "knobs", "count", "reason",
])
_VALID = [  # what the hook writes, one of each shape
    {"t": "train", "step": 1, "loss": 0.5, "lr": 0.1, "extra": {"a": 1.0}, "ts": 1e9},
    {"t": "eval", "step": 2, "loss": 1.0, "metrics": {"acc": 0.5}},
    {"t": "event", "kind": "checkpoint_saved", "step": 2, "msg": "m",
     "data": {"path": "/c", "seconds": 0.1, "bytes": 3}},
    {"t": "event", "kind": "control_ack", "data": {"id": "x", "op": "adjust", "ok": True}},
    {"t": "event", "kind": "note", "msg": "m", "data": {}},
    {"t": "run", "total_steps": 10, "stages": ["a"], "config": {}},
    {"t": "log", "stream": "stdout", "line": "x"},
    {"t": "alert", "kind": "data", "severity": "info", "code": "c", "what": "w", "hint": "h",
     "where": {}},
]
_near_valid = st.builds(lambda base, key, value, change: {**base, key: value} if change
                        else dict(base), st.sampled_from(_VALID), _fields, _values,
                        st.booleans())
_records_st = st.one_of(
    _near_valid,
    st.dictionaries(_fields, _values, max_size=6),
    st.fixed_dictionaries({"t": st.sampled_from([*SPOOL_RECORD_TYPES, "hello", "x"])},
                          optional={"step": _values, "kind": st.sampled_from(
                              ["checkpoint_saved", "control_ack", "dropped", "stage",
                               "note", *sorted(AGENT_EVENT_KINDS)[:3]]),
                              "data": _values, "job": st.sampled_from(["J", "K"]),
                              "rank": _values, "ts": _values, "msg": _values,
                              "loss": _values, "extra": _values}),
    _values,
)


def _plain(value: Any, depth: int = 0) -> bool:
    """Only what JSON and the cockpit's store can hold: finite, 64-bit, shallow."""
    if depth > 64:
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    if isinstance(value, int) and not isinstance(value, bool):
        return -INT64_MAX - 1 <= value <= INT64_MAX
    return value is None or isinstance(value, (bool, str))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, database=None)
@given(_records_st)
def test_any_json_value_is_a_valid_record_or_a_reject(value: Any) -> None:
    try:
        t, record = check_spool_record(value, "J", 0)
    except Rejected as exc:
        assert str(exc)
        return
    assert t in SPOOL_RECORD_TYPES and record["job"] == "J" and record["rank"] == 0
    assert _plain(record)
    if t == "event":
        assert isinstance(record["kind"], str) and record["kind"] not in AGENT_EVENT_KINDS
        assert isinstance(record.get("data", {}), (dict, type(None)))
    if t in ("train", "eval"):
        assert isinstance(record["step"], int) and not isinstance(record["step"], bool)


_lines = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    _records_st.map(lambda v: json.dumps(v).encode()),
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, database=None,  # each example is a real file
          suppress_health_check=[HealthCheck.too_slow])
@given(header=st.one_of(st.none(), st.just(_header().encode()), st.binary(max_size=40).map(
    lambda b: b.replace(b"\n", b"") + b"\n"), _records_st.map(
    lambda v: (json.dumps({"t": "spool", "file_id": "f", "job": "J", "rank": 0, "ts": v})
               + "\n").encode())),
       lines=st.lists(_lines, max_size=6), tail=st.binary(max_size=20))
def test_any_spool_bytes_give_records_or_counted_rejects(header: bytes | None,
                                                         lines: list[bytes],
                                                         tail: bytes) -> None:
    """Whatever a spool file holds, every complete line becomes exactly one journaled
    record (valid, or a `spool_error` naming it) and nothing raises."""
    with tempfile.TemporaryDirectory() as tmp:
        state, run = Path(tmp) / "state", Path(tmp) / "run"
        folder = run / "spool" / "J"
        folder.mkdir(parents=True)
        body = b"".join(line + b"\n" for line in lines) + tail.replace(b"\n", b"")
        (folder / "rank-0.f00d.ndjson").write_bytes((header or b"") + body)
        content = (header or b"") + body
        journal = Journal(state)
        tailer = SpoolTailer(journal, [run], settle=0.0)
        tailer.poll()
        journal.close()
        records = _records(state)
    ends = [i + 1 for i, byte in enumerate(content) if byte == 0x0A]
    read = sorted(int(r["src"].rsplit(":", 1)[1]) for r in records if "src" in r)
    assert read == ends or (read == ends[1:] and content.startswith(b'{"t": "spool"'))
    for r in records:
        assert r["t"] in SPOOL_RECORD_TYPES
        assert r["job"] == "J" and r["rank"] == 0
        assert _plain(r)
        if "src" not in r:
            assert r["kind"] == "spool_error"
        elif r["t"] == "event" and r["kind"] != "spool_error":
            assert r["kind"] not in AGENT_EVENT_KINDS
