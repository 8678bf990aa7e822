"""What a headless watch reports as its hosts' problems (`LiveSession.link_problems`):
a host that failed, and a host that never streamed, even one still trying at the end (a
refusal that is slow to arrive on a loaded machine must not pass for a delivered run)."""

from __future__ import annotations

from pathlib import Path

from cockpit.sessions.live import LiveSession
from cockpit.transport.inventory import HostSpec
from cockpit.transport.states import CONNECTING, STREAMING, UNREACHABLE


def test_a_host_that_never_streamed_is_a_problem_even_while_still_trying(
        tmp_path: Path) -> None:
    specs = [HostSpec(name=n, address="127.0.0.1", port=1, user="nobody") for n in "ab"]
    live = LiveSession(specs, tmp_path / "r.duckdb")
    try:
        links = live.fleet
        for name in "ab":
            links._on_state(name, CONNECTING, "")
        links._on_state("b", STREAMING, "")
        assert live.link_problems() == {"a": CONNECTING}
        # A host that delivered and is reconnecting is on its way, not a problem...
        links._on_state("b", CONNECTING, "reconnecting")
        assert live.link_problems() == {"a": CONNECTING}
        # ...until its link fails.
        links._on_state("b", UNREACHABLE, "connection lost")
        assert live.link_problems() == {"a": CONNECTING, "b": "unreachable: connection lost"}
    finally:
        live.stop()
