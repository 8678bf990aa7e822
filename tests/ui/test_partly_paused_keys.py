"""A job some of whose hosts paused while another's part runs on: the keys neither
refuse what still makes sense nor claim what is not so."""

from __future__ import annotations

from cockpit.ui import job_control as jc

NOTE = "partly paused: gpu2 still running"


def test_a_partly_paused_job_can_be_resumed_or_paused_again() -> None:
    assert jc.refusal("resume", "big", "running", NOTE) is None
    assert jc.refusal("resume", "big", "stalled", f"stalled ({NOTE})") is None
    assert jc.refusal("pause", "big", "running", NOTE) is None
    # A job running on every host has nothing to resume, as before.
    assert jc.refusal("resume", "big", "running", None) == (
        "job big is running: there is nothing to resume")
