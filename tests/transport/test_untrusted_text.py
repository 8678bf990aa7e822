"""What a host or an SSH server says becomes text where the transport makes it: an
agent's stderr as a link's state, paramiko's words about a server's banner, an
inventory's values in its errors, with `cockpit.printable`, the one sanitiser."""

from __future__ import annotations

import paramiko
import pytest

from cockpit.analysis import text
from cockpit.transport.inventory import InventoryError, parse_inventory
from cockpit.transport.link import BaseLink
from cockpit.transport.pump import PumpResult, StderrTail
from cockpit.transport.ssh_config import Endpoint
from cockpit.transport.ssh_link import ConnectFailed, _unreachable_text
from cockpit.transport.states import AGENT_FAILED, Backoff

HOSTILE = "j\x1b]0;PWN\x07\u009b2J\u202e"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def assert_text(value: str) -> None:
    for control in CONTROLS:
        assert control not in value, (control, value)


def test_the_analysis_and_the_transport_share_one_sanitiser() -> None:
    from cockpit import printable
    from cockpit.transport import link, pump

    assert text.printable is printable.printable is pump.printable is link.printable


def test_an_agents_stderr_is_kept_as_text() -> None:
    tail = StderrTail()
    tail.feed(f"Traceback\n{HOSTILE}\nlast \x1b[31mred\r\npartial {HOSTILE}".encode())
    for line in tail.lines():
        assert_text(line)
    assert_text(tail.summary())
    assert "j\u241b]0;PWN\u2407\\x9b2J\\u202e" in tail.summary()


class _Link(BaseLink):
    def _attempt(self, backoff: Backoff) -> float:
        return 0.0

    def _interrupt(self) -> None:
        pass


def test_a_failed_agents_stderr_reaches_the_links_state_as_text() -> None:
    from cockpit.transport.inventory import HostSpec

    states: list[tuple[str, str, str]] = []
    link = _Link(HostSpec(name="gpu1", address="gpu1"), lambda: 0, lambda *_: None,
                 lambda *s: states.append(s))
    link.stderr.feed(f"boom {HOSTILE}\n".encode())
    link._after_stream(PumpResult("eof", got_data=True, exit_status=1), Backoff(0.1, 1.0), 0)
    (name, state, detail), = states
    assert (name, state) == ("gpu1", AGENT_FAILED)
    assert "exited with status 1: boom j\u241b]0;PWN" in detail
    assert_text(detail)
    assert_text(link.detail)
    assert link.failure is not None
    assert_text(link.failure[1])
    # Whatever a link's own code puts in a state, a host's text in it is shown as text.
    link._set_state(AGENT_FAILED, f"first {HOSTILE}\nsecond")
    assert states[-1][2] == "first j\u241b]0;PWN\u2407\\x9b2J\\u202e\nsecond"


def test_a_servers_banner_quoted_by_paramiko_is_text() -> None:
    exc = paramiko.SSHException('Indecipherable protocol version "\x1b]0;PWN\x07\x9b2J"')
    hop = Endpoint(hostname="gpu1", port=2222, user="me")
    failed = ConnectFailed("unreachable", _unreachable_text(hop, exc), slow=False)
    assert_text(str(failed))
    assert_text(failed.detail)
    assert '"\u241b]0;PWN\u2407\\x9b2J"' in failed.detail


@pytest.mark.parametrize(("field", "shown_as"), [
    ('port = "2\\u001b]0;PWN\\u0007\\u009b2J\\u202e"', '"2\\u001b]0;PWN\\u0007\\u009b2J\\u202e"'),
    ("port = [\"\\u202e\"]", '["\\u202e"]'),
])
def test_an_inventory_value_of_the_wrong_type_is_quoted_as_toml_text(
        field: str, shown_as: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_inventory(f'[[hosts]]\nname = "gpu1"\naddress = "gpu1"\n{field}\n', "fleet.toml")
    message = str(caught.value)
    assert_text(message)
    assert message == f"fleet.toml:4: field 'port' must be an integer 1-65535, got {shown_as}"


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200f", "\u061c", "\x9b"])
def test_an_address_with_a_bidi_or_c1_control_is_refused(char: str) -> None:
    with pytest.raises(InventoryError, match="field 'address' holds a control character") \
            as caught:
        parse_inventory(f'[[hosts]]\nname = "gpu1"\naddress = "gpu{char}1"\n', "fleet.toml")
    assert_text(str(caught.value))
