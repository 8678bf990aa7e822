"""Per-host accounts of one failure become one interruption, led by its cause."""

from __future__ import annotations

from cockpit.analysis.incidents import INCIDENT_WINDOW_S, merge_incidents


def _item(host: str, cause: str, at: float, recovered_at: float | None = None,
          lost: int | None = None, job: str = "j", restart: int = 1) -> dict:
    return {"host": host, "job": job, "cause": cause, "detected_at": at,
            "evidence": f"{cause} on {host}", "recovered_at": recovered_at,
            "recovered_in": None if recovered_at is None else recovered_at - at,
            "steps_lost": lost, "restart_count": restart}


def test_a_killed_rank_and_the_peer_that_lost_it_are_one_interruption() -> None:
    # Seen on a 2-host job: kill -9 of host2's rank; host1's collectives fail first.
    merged = merge_incidents([
        _item("host2", "killed", 100.4, recovered_at=106.0, lost=679),
        _item("host1", "nccl", 100.0, recovered_at=105.0, lost=713),
    ])
    assert len(merged) == 1
    one = merged[0]
    assert (one["cause"], one["hosts"], one["evidence"]) == (
        "killed", ("host2", "host1"), "killed on host2")
    # Each host's down time on its own clock (host2: 100.4 -> 106.0), the longest of them.
    assert one["detected_at"] == 100.0 and one["steps_lost"] == 713
    assert abs(one["recovered_in"] - 5.6) < 1e-9


def test_not_recovered_until_every_host_is() -> None:
    merged = merge_incidents([_item("a", "oom", 10.0, recovered_at=20.0),
                              _item("b", "nccl", 11.0)])
    assert merged[0]["recovered_in"] is None and merged[0]["cause"] == "oom"


def test_separate_failures_stay_separate() -> None:
    merged = merge_incidents([
        _item("a", "killed", 0.0, 5.0),
        _item("a", "killed", 30.0, 35.0, restart=2),  # the same host again: a new failure
        _item("b", "nccl", 31.0, 36.0, restart=2),
        _item("b", "oom", 31.0 + INCIDENT_WINDOW_S + 1, job="j"),  # much later
        _item("c", "oom", 31.0 + INCIDENT_WINDOW_S + 2, job="other"),  # another job
    ])
    assert [(m["cause"], m["hosts"]) for m in merged] == [
        ("killed", ("a",)), ("killed", ("a", "b")), ("oom", ("b",)), ("oom", ("c",))]
    assert merged[1]["restart_count"] == 2


def test_only_consequences_keep_the_first_account() -> None:
    merged = merge_incidents([_item("b", "unknown", 2.0), _item("a", "nccl", 1.0)])
    assert (merged[0]["cause"], merged[0]["hosts"]) == ("nccl", ("a", "b"))


def test_failed_restarts_of_the_host_that_retried_most_are_kept() -> None:
    a = _item("a", "killed", 100.0, recovered_at=140.0, restart=2)
    a["failed_restarts"] = ["nccl"]
    b = _item("b", "nccl", 100.5, recovered_at=139.0)
    b["failed_restarts"] = []
    (one,) = merge_incidents([a, b])
    assert one["failed_restarts"] == ["nccl"] and one["restart_count"] == 2
