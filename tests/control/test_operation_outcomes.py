"""What `cockpit adjust/pause/fork` report, and their exit status, from the records the
host sends back: the trainer's own ack of an adjust, the pause and fork events of the op
sent (matched by its id, whatever the host's clock), and a fork's run dir said only once
its checkpoint was copied.

The hosts are played by a fake fleet that answers each op by putting the records an agent
(and its trainer) would journal into the command's real recording; everything after the
connection (the controller, the waits, the output) is the command's own."""

from __future__ import annotations

import itertools
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.journal.control_inbox import ack_record, op_words
from agent.wire.protocol import encode
from cockpit.app import operations
from cockpit.app.operations import run_operation
from cockpit.sessions.live import LiveSession

pytestmark = pytest.mark.timeout(60)

# The host's answer to one op: the events it journals (`_ts`: the host's clock, if not now).
Answer = Callable[[dict], list[dict]]


class _Fleet:
    def __init__(self, session: _Session) -> None:
        self.session = session
        self.sent: list[tuple[str, dict]] = []

    def send(self, host: str, op: dict) -> None:
        self.sent.append((host, op))
        for record in self.session.answer(op):
            self.session.journal(host, record)


class _Session:
    """A LiveSession without links: the store and writer are real."""

    def __init__(self, store_path: Path, answer: Answer) -> None:
        self._live = LiveSession([], store_path)
        self.store = self._live.store
        self.writer = self._live.writer
        self.fleet = _Fleet(self)
        self.answer = answer
        self._seq = itertools.count(1)

    def journal(self, host: str, event: dict) -> None:
        ts = event.pop("_ts", time.time())
        self.store.ingest(host, encode("event", next(self._seq), event, ts=ts))

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
           ) -> Iterator[Callable[..., tuple[int, list[str], _Session]]]:
    """Run one operation against hosts that answer with `answer`: (exit status, output
    lines, the session)."""
    spec = tmp_path / "job.toml"
    spec.write_text(textwrap.dedent(f"""\
        name = "j"
        hosts = ["local"]
        nproc_per_node = 1
        script = "train.py"
        run_dir = "{tmp_path / 'runs' / 'j'}"
    """))
    sessions: list[_Session] = []

    def run(action: str, answer: Answer, ack_timeout: float = 5.0,
            **kw: Any) -> tuple[int, list[str], _Session]:
        def session(hosts: object, store_path: Path, options: object = None) -> _Session:
            sessions.append(_Session(store_path, answer))
            return sessions[-1]

        monkeypatch.setattr(operations, "LiveSession", session)
        monkeypatch.setattr(operations, "DaemonWatch", lambda session: _Daemons())
        monkeypatch.setattr(operations, "wait_streaming", lambda *a, **k: {})
        monkeypatch.setattr(operations, "sync_membership", lambda *a, **k: ([], []))
        said: list[str] = []
        code = run_operation(action, spec, inventory_path=None,
                             store_path=tmp_path / f"{action}-{len(sessions)}.duckdb",
                             ack_timeout=ack_timeout, echo=said.append, **kw)
        return code, said, sessions[-1]

    yield run


class _Daemons:
    def without_daemon(self, hosts: object, wait: float = 5.0) -> list[str]:
        return []


def _agent_ack(op: dict, ok: bool = True, error: str | None = None,
               extra: dict | None = None) -> dict:
    """The agent's own ack of `op`, as its control inbox words it."""
    _t, record = ack_record(op["id"], op["op"], ok, error, op.get("job"), extra,
                            what=op_words(op))
    return record


def _trainer_ack(op: dict, msg: str, ok: bool, **data: Any) -> dict:
    """Rank 0's ack of an adjust, as agent.hook.control.OpenLine words it."""
    return {"kind": "control_ack", "job": op["job"], "rank": 0, "step": 40, "msg": msg,
            "data": {"id": op["id"], "op": "adjust", "ok": ok, **data}}


# -- adjust: the trainer's ack, not the agent's, says whether it was applied ---------------

def test_an_adjust_the_trainer_refuses_is_reported_refused_and_fails(played) -> None:
    def answer(op: dict) -> list[dict]:
        return [_agent_ack(op, extra={"file": "/runs/j/control/j.ndjson"}),
                _trainer_ack(op, "refused lr_scale: lightning does not apply lr_scale",
                             False, refused={"lr_scale": "lightning does not apply lr_scale"},
                             error="lr_scale: lightning does not apply lr_scale")]

    code, said, _ = played("adjust", answer, knobs={"lr_scale": 0.5})
    assert code == 1, said
    assert ("local: ok — control op adjust (lr_scale=0.5) written to the trainer's control "
            "file") in said, said
    assert ("local: REFUSED — rank 0: refused lr_scale: lightning does not apply lr_scale"
            in said), said
    assert not any("done" in line for line in said), said


def test_what_a_trainer_says_is_printed_as_text(played) -> None:
    # The trainer's words reach the operator's terminal: no escape sequence of theirs does.
    hostile = "refused lr_scale: \x1b]0;PWN\x07\u009b2J\u202e"

    def answer(op: dict) -> list[dict]:
        return [_agent_ack(op), _trainer_ack(op, hostile, False, error=hostile)]

    code, said, _ = played("adjust", answer, knobs={"lr_scale": 0.5})
    assert code == 1, said
    shown = "\n".join(said)
    assert not any(c in shown for c in ("\x1b", "\x07", "\x9b", "\u202e")), said
    assert "refused lr_scale: \u241b]0;PWN\u2407" in shown, said


def test_an_adjust_the_trainer_applied_is_reported_applied(played) -> None:
    def answer(op: dict) -> list[dict]:
        return [_agent_ack(op), _trainer_ack(op, "applied checkpoint_now=True", True,
                                             knobs={"checkpoint_now": True})]

    code, said, _ = played("adjust", answer, knobs={"checkpoint_now": True})
    assert code == 0, said
    assert "local: applied — rank 0: applied checkpoint_now=True" in said, said


def test_an_adjust_partly_refused_is_no_success(played) -> None:
    def answer(op: dict) -> list[dict]:
        return [_agent_ack(op), _trainer_ack(
            op, "applied lr_scale=0.5; refused warmup: hf does not apply warmup", True,
            knobs={"lr_scale": 0.5}, refused={"warmup": "hf does not apply warmup"})]

    code, said, _ = played("adjust", answer, knobs={"lr_scale": 0.5, "warmup": 3})
    assert code == 1, said
    assert any(line.startswith("local: PARTLY REFUSED — rank 0: applied lr_scale=0.5; "
                               "refused warmup") for line in said), said


def test_an_adjust_no_trainer_acknowledges_is_said_unconfirmed_and_fails(played) -> None:
    """The checkpoint never saved (or no trainer reads controls): the agent's ack alone
    is no success."""
    code, said, _ = played("adjust", lambda op: [_agent_ack(op)], ack_timeout=1.0,
                           knobs={"checkpoint_now": True})
    assert code == 1, said
    assert any(line.startswith("local: NOT ACKNOWLEDGED — no acknowledgement from the trainer "
                               "within 1 s") for line in said), said


def test_an_adjust_the_agent_refuses_is_not_waited_on_further(played) -> None:
    code, said, _ = played("adjust", lambda op: [_agent_ack(op, False, "no job 'j' here")],
                           knobs={"lr_scale": 0.5})
    assert code == 1 and "local: FAILED — no job 'j' here" in said, said
    assert not any("trainer" in line for line in said), said


def test_an_adjust_kept_for_the_next_start_says_so_without_waiting(played) -> None:
    """No process reads the control file of a paused job: the agent's ack says when the
    knob applies, and there is no trainer ack to wait for."""
    started = time.monotonic()
    code, said, _ = played("adjust", lambda op: [_agent_ack(op, extra={
        "applies_at": "resume", "outcome": "stored: applies when the job resumes"})],
        ack_timeout=30.0, knobs={"lr_scale": 0.5})
    assert code == 0, said
    assert ("local: ok — control op adjust (lr_scale=0.5) stored: applies when the job "
            "resumes") in said, said
    assert time.monotonic() - started < 15


def test_the_agents_ack_is_not_mistaken_for_the_trainers_nor_the_trainers_for_the_agents(
    played,
) -> None:
    """Both acks carry the op id; the trainer's (rank 0) may even arrive first."""
    def answer(op: dict) -> list[dict]:
        return [_trainer_ack(op, "applied lr_scale=0.5", True, knobs={"lr_scale": 0.5}),
                {**_agent_ack(op), "_ts": time.time() + 5}]

    code, said, _ = played("adjust", answer, knobs={"lr_scale": 0.5})
    assert code == 0, said
    assert said.count("local: ok — control op adjust (lr_scale=0.5) written to the "
                      "trainer's control file") == 1, said
    assert "local: applied — rank 0: applied lr_scale=0.5" in said, said


# -- pause: the event of the op sent, whatever the host's clock -----------------------------

def _pause_event(op_id: str | None, step: int, ts: float, ok: bool = True) -> dict:
    data: dict[str, Any] = {"mode": "checkpoint", "ok": ok, "step": step,
                            "checkpoint": f"/ckpt/{step}"}
    if op_id is not None:
        data["id"] = op_id
    return {"kind": "pause", "job": "j", "rank": None, "step": step, "_ts": ts,
            "msg": f"job j paused at step {step} (checkpoint /ckpt/{step}); its processes "
                   "have exited", "data": data}


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_a_pause_is_matched_by_its_op_id_whatever_the_hosts_clock(played, skew: float) -> None:
    """Behind: its pause reads as older than the command. Ahead: an earlier pause of the
    job reads as newer than the command. Neither may decide what the command says."""
    def answer(op: dict) -> list[dict]:
        now = time.time() + skew
        return [_pause_event("earlier-local", 10, now - 60),
                _agent_ack(op), _pause_event(op["id"], 20, now)]

    code, said, _ = played("pause", answer)
    assert code == 0, said
    assert ("local: paused — job j paused at step 20 (checkpoint /ckpt/20); its processes "
            "have exited") in said, said
    assert not any("step 10" in line for line in said), said


def test_a_failed_pause_of_the_op_is_not_paused(played) -> None:
    def answer(op: dict) -> list[dict]:
        failed = _pause_event(op["id"], 20, time.time(), ok=False)
        failed["msg"] = ("job j: pause failed: this host's processes did not exit after "
                         "SIGKILL (pids 12)")
        return [_agent_ack(op), failed]

    code, said, _ = played("pause", answer)
    assert code == 1, said
    assert ("local: NOT PAUSED — job j: pause failed: this host's processes did not exit "
            "after SIGKILL (pids 12)") in said, said


def test_an_agent_that_does_not_name_the_op_is_still_matched_by_time(played) -> None:
    def answer(op: dict) -> list[dict]:
        return [_pause_event(None, 5, time.time() - 600), _agent_ack(op),
                _pause_event(None, 20, time.time() + 1)]

    code, said, _ = played("pause", answer)
    assert code == 0 and any("paused at step 20" in line for line in said), said


def test_a_peer_pause_of_a_new_agent_is_not_taken_for_the_ops(played) -> None:
    """A pause the host followed on its own (id None) is not the one the command sent."""
    def answer(op: dict) -> list[dict]:
        return [_agent_ack(op), _pause_event(None, 20, time.time()) | {
            "data": {"mode": "peer", "ok": True, "id": None, "step": 20}}]

    code, said, _ = played("pause", answer, ack_timeout=1.0)
    assert code == 1, said
    assert any(line.startswith("local: NOT PAUSED — no pause event within 1 s")
               for line in said), said


# -- fork: the run dir is said once the checkpoint was copied --------------------------------

def _fork_event(op: dict, ok: bool, ts: float | None = None) -> dict:
    name = op["name"]
    if ok:
        return {"kind": "fork", "job": name, "rank": None, "step": 30,
                "msg": f"job {name} forked from j at step 30",
                "data": {"ok": True, "id": op["id"], "parent": "j", "parent_step": 30,
                         "checkpoint": f"/runs/{name}/ckpt/30", "run_dir": f"/runs/{name}"}}
    return {"kind": "fork", "job": name, "rank": None, "step": None,
            "msg": f"fork {name} of j failed: copying /ckpt/30 failed: [Errno 28] No space "
                   "left on device",
            "data": {"ok": False, "id": op["id"], "parent": "j",
                     "error": "copying /ckpt/30 failed: [Errno 28] No space left on device"}}


def test_a_fork_whose_checkpoint_copy_failed_after_the_ack_fails(played) -> None:
    code, said, _ = played("fork", lambda op: [_agent_ack(op), _fork_event(op, False)],
                           name="j-fork-a")
    assert code == 1, said
    assert ("local: FORK FAILED — fork j-fork-a of j failed: copying /ckpt/30 failed: "
            "[Errno 28] No space left on device") in said, said
    assert not any(" in " in line and line.startswith("fork: job") for line in said), said
    assert "fork: job j-fork-a not confirmed on local (see above)" in said, said


def test_a_refused_fork_names_no_run_dir(played) -> None:
    code, said, _ = played("fork", lambda op: [_agent_ack(op, False, "no valid checkpoint")],
                           name="j-fork-b")
    assert code == 1, said
    assert not any(line.startswith("fork: job j-fork-b in") for line in said), said


def test_a_fork_is_said_in_its_run_dir_once_its_event_says_ok(played, tmp_path: Path) -> None:
    code, said, _ = played("fork", lambda op: [_agent_ack(op), _fork_event(op, True)],
                           name="j-fork-c")
    assert code == 0, said
    assert "local: forked — job j-fork-c forked from j at step 30" in said, said
    assert f"fork: job j-fork-c in {tmp_path / 'runs' / 'j-fork-c'}" in said, said


def test_a_fork_without_its_event_in_time_is_not_said_done(played) -> None:
    code, said, _ = played("fork", lambda op: [_agent_ack(op)], ack_timeout=1.0,
                           name="j-fork-d")
    assert code == 1, said
    assert any(line.startswith("local: NOT CONFIRMED — no fork event within 1 s")
               for line in said), said
