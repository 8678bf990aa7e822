"""A data alert names the sample range in the shape the agent sends it: `[first, last]`
(agent.job.recovery), shown as "first-last"; a host's malformed range is left out."""

from __future__ import annotations

from cockpit.analysis.signal_alerts import interruption_alerts


def _event(span: object) -> dict:
    return {"kind": "interruption", "host": "node-a", "job": "j", "ts": 10.0, "step": 7,
            "data": {"cause": "data", "evidence": ["invalid record"], "detected_at": 10.0,
                     "where": {"rank": 1, "file": "/d/train-00003.bin", "range": span},
                     "decision": {"retry": False, "reason": "policy"}}}


def test_the_agents_list_range_is_named_and_a_malformed_one_left_out() -> None:
    [alert] = interruption_alerts([_event([8255, 9000])], [], now=20.0)
    assert alert.where == ("host node-a / rank 1 / file /d/train-00003.bin / range 8255-9000"
                           " / step 7")
    assert "inspect shard /d/train-00003.bin (records 8255-9000)" in alert.hint
    for bad in ([1, "x"], [1, 2, 3], [True, 2]):
        [alert] = interruption_alerts([_event(bad)], [], now=20.0)
        assert "range" not in alert.where, bad
