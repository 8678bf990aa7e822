"""How long a command waits for the job's hosts to connect before it sends an operation
(`cockpit.app.operations.wait_streaming`), on a fleet double whose link states the
test sets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.app.operations import wait_streaming
from cockpit.errors import CockpitError
from cockpit.transport.fleet import HostStatus

pytestmark = pytest.mark.timeout(60)  # a wait that never ends fails instead of hanging


def _session(**states: str) -> SimpleNamespace:
    status = {h: HostStatus(h, s, "Connection refused" if s == "unreachable" else "", False)
              for h, s in states.items()}
    return SimpleNamespace(fleet=SimpleNamespace(status=lambda: dict(status)))


def test_a_pause_does_not_wait_the_whole_timeout_for_a_host_that_is_down() -> None:
    session = _session(a="streaming", b="unreachable")
    assert wait_streaming(session, [], 3600, optional=["a", "b"]) == {
        "b": "unreachable (Connection refused)"}


def test_a_host_still_connecting_or_no_host_streaming_is_waited_for() -> None:
    assert wait_streaming(_session(a="streaming", b="connecting"), [], 0.3,
                          optional=["a", "b"]) == {"b": "connecting"}
    assert wait_streaming(_session(a="unreachable", b="unreachable"), [], 0.3,
                          optional=["a", "b"]) == {"a": "unreachable (Connection refused)",
                                                   "b": "unreachable (Connection refused)"}


def test_a_required_host_that_is_down_fails_the_command_after_the_timeout() -> None:
    with pytest.raises(CockpitError, match=r"not connected after 0\.3 s: b is unreachable"):
        wait_streaming(_session(a="streaming", b="unreachable"), ["a", "b"], 0.3)


def test_a_long_wait_says_which_hosts_it_waits_for_and_why() -> None:
    said: list[str] = []
    with pytest.raises(CockpitError):
        wait_streaming(_session(a="streaming", b="unreachable"), ["a", "b"], 1.0,
                       say=said.append, say_every=0.3)
    assert said and all(line.startswith(
        "still waiting for b: unreachable (Connection refused) (retrying; up to ")
        for line in said), said


def test_a_host_retrying_after_a_refusal_reads_as_refused_and_is_not_waited_for() -> None:
    """A host that is down flips between unreachable and a retry's "connecting": read
    at the retry, it is still the refusal, and a pause does not wait for it."""
    retrying = HostStatus("b", "connecting", "127.0.0.1", False,
                          failure=("unreachable", "Connection refused"))
    assert retrying.failed and retrying.reading() == "unreachable (Connection refused)"
    status = {"a": HostStatus("a", "streaming", "from seq 0", False), "b": retrying}
    session = SimpleNamespace(fleet=SimpleNamespace(status=lambda: dict(status)))
    assert wait_streaming(session, [], 3600, optional=["a", "b"]) == {
        "b": "unreachable (Connection refused)"}
    with pytest.raises(CockpitError, match=r"b is unreachable \(Connection refused\)"):
        wait_streaming(session, ["a", "b"], 0.3)
    # Streaming again, it has nothing left to say of the refusal.
    back = HostStatus("b", "streaming", "from seq 7", False)
    assert not back.failed and back.reading() == "streaming (from seq 7)"
    # A remedy under way is no retry: the agent being copied after it was missing.
    deploying = HostStatus("b", "deploying", "copying the agent", False,
                           failure=("agent-missing", "no agent"))
    assert not deploying.failed and deploying.reading() == "deploying (copying the agent)"
