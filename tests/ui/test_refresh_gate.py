"""The snapshot rate limit: one build in flight, at most one per interval."""

from __future__ import annotations

from cockpit.ui.refresh_gate import BUILD_NOW, IDLE, WAIT, RefreshGate


def test_first_request_builds_at_once() -> None:
    assert RefreshGate().request(100.0) == (BUILD_NOW, 0.0)


def test_requests_during_a_build_coalesce_into_one_follow_up() -> None:
    gate = RefreshGate(min_interval=0.25)
    gate.request(0.0)
    assert [gate.request(0.01 * i)[0] for i in range(1, 50)] == [IDLE] * 49
    # the build ends after the interval: exactly one more build for all 49 requests
    assert gate.finished(0.3) == (BUILD_NOW, 0.0)
    assert gate.finished(0.4) == (IDLE, 0.0)


def test_request_soon_after_a_build_waits_for_the_rest_of_the_interval() -> None:
    gate = RefreshGate(min_interval=0.25)
    gate.request(0.0)
    gate.finished(0.05)
    decision, wait = gate.request(0.10)
    assert decision == WAIT and abs(wait - 0.15) < 1e-9
    assert gate.request(0.12) == (IDLE, 0.0)  # timer already pending
    assert gate.timer_fired(0.25) == (BUILD_NOW, 0.0)


def test_build_ending_while_timer_pending_leaves_it_to_the_timer() -> None:
    gate = RefreshGate(min_interval=0.25)
    gate.request(0.0)
    gate.finished(0.01)
    assert gate.request(0.02)[0] == WAIT
    assert gate.finished(0.03) == (IDLE, 0.0)
    assert gate.timer_fired(0.25) == (BUILD_NOW, 0.0)


def test_timer_with_nothing_new_does_nothing() -> None:
    gate = RefreshGate(min_interval=0.25)
    gate.request(0.0)
    gate.finished(0.01)
    gate.request(0.02)
    gate.dirty = False
    assert gate.timer_fired(0.3) == (IDLE, 0.0)
