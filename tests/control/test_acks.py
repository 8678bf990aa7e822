"""An agent's answer to a control op, read one way by the command line and the screen."""

from __future__ import annotations

from pathlib import Path

from agent.wire.protocol import encode
from cockpit.control.acks import ack_outcome
from cockpit.sessions.live import LiveSession


def test_a_refusal_reads_as_its_reason_and_an_acceptance_as_the_agents_message() -> None:
    assert ack_outcome({"msg": "control op pause accepted", "data": {"ok": True}}) == (
        True, "control op pause accepted")
    assert ack_outcome({"msg": "control op pause refused",
                        "data": {"ok": False, "error": "job 'duo' is paused"}}) == (
        False, "job 'duo' is paused")
    assert ack_outcome({"msg": None, "data": "garbled"}) == (False, "refused")


def test_the_live_source_answers_from_the_recording(tmp_path: Path) -> None:
    session = LiveSession([], tmp_path / "live.duckdb")
    try:
        line = encode("event", 1, {"kind": "control_ack", "job": "duo", "rank": None,
                                   "step": None, "msg": "control op pause refused",
                                   "data": {"id": "op1-h1", "op": "pause", "ok": False,
                                            "error": "job 'duo' is paused"}}, ts=100.0)
        session.store.ingest("h1", line)
        assert session.source.acks(["op1-h1", "op1-h2"]) == {
            "op1-h1": (False, "job 'duo' is paused")}
    finally:
        session.stop()
