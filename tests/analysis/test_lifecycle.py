"""Which hosts of a job their agent gave up on, from their newest starts and failures."""

from __future__ import annotations

from cockpit.analysis.lifecycle import hosts_given_up


def _event(host: str, kind: str, ts: float, retry: bool | None = None,
           exclusion: dict | None = None) -> dict:
    data: dict = {}
    if retry is not None:
        data["decision"] = {"retry": retry}
    if exclusion is not None:
        data["exclusion"] = exclusion
    return {"host": host, "kind": kind, "ts": ts, "seq": int(ts), "data": data}


def test_a_host_is_given_up_until_it_starts_again() -> None:
    events = [_event("a", "job_started", 1), _event("b", "job_started", 1),
              _event("a", "interruption", 5, retry=False),
              _event("b", "interruption", 6, retry=True), _event("b", "job_started", 7)]
    assert hosts_given_up(events) == ["a"]
    assert hosts_given_up([*events, _event("a", "job_started", 9)]) == []


def test_an_excluded_host_is_not_a_failed_job() -> None:
    """An elastic job goes on without a host it excluded as faulty."""
    events = [_event("a", "interruption", 5, retry=False, exclusion={"host": "a"})]
    assert hosts_given_up(events) == []
