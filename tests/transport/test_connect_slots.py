"""Bounded parallel connects: the fleet's bound and each server's, through real links.

The handshake is replaced by one that holds its caller until as many handshakes as the
bound allows are in flight (or a few seconds pass), so that the peak seen is the bound
itself when the bound holds and more than it when it does not; the TCP connects before
it are real, to listening sockets on loopback ports (one port = one server).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.transport import ssh_link
from cockpit.transport.connect_slots import ConnectSlots
from cockpit.transport.fleet import Fleet
from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_config import SshConfig
from cockpit.transport.states import UNREACHABLE
from tests.transport.support import Collector

HOLD_S = 3.0  # the longest a fake handshake waits for the others to arrive


class FakeHandshakes:
    """Counts handshakes in flight, in all and per server port, and their peaks."""

    def __init__(self, expect_peak: int, per_server: bool) -> None:
        self.expect_peak = expect_peak
        self.per_server = per_server
        self.cond = threading.Condition()
        self.in_flight: Counter[int] = Counter()
        self.total = 0
        self.peak_total = 0
        self.peak_server: Counter[int] = Counter()
        self.done = 0

    def __call__(self, hop, sock, label, options, timeout):
        port = hop.port
        with self.cond:
            self.total += 1
            self.in_flight[port] += 1
            self.peak_total = max(self.peak_total, self.total)
            self.peak_server[port] = max(self.peak_server[port], self.in_flight[port])
            self.cond.notify_all()
            deadline = time.monotonic() + HOLD_S
            while (self.in_flight[port] if self.per_server else self.total) < self.expect_peak:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            self.total -= 1
            self.in_flight[port] -= 1
            self.done += 1
        sock.close()
        raise ssh_link.ConnectFailed(UNREACHABLE, f"{label}: fake handshake", slow=False)


@pytest.fixture
def servers() -> Iterator[list[int]]:
    """Ports of four listening sockets on 127.0.0.1 (never accepted: a connect succeeds
    in the backlog)."""
    socks = []
    for _ in range(4):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        socks.append(sock)
    yield [s.getsockname()[1] for s in socks]
    for sock in socks:
        sock.close()


def _fleet(ports: list[int], per_port: int, tmp_path: Path, collector: Collector,
           **bounds: int) -> Fleet:  # fmt: skip
    specs = [HostSpec(name=f"h{port}-{i}", address="127.0.0.1", port=port, user="nobody",
                      state_dir=str(tmp_path / f"s{port}-{i}"), agent="unused")
             for port in ports for i in range(per_port)]  # fmt: skip
    known = KnownHosts(use_system=False, use_user=False, record_file=tmp_path / "known")
    # No retry within a test: each link tries once and keeps the state it got.
    options = LinkOptions(known_hosts=known, ssh_config=SshConfig(None), backoff_base=600.0,
                          backoff_cap=600.0, **bounds)  # fmt: skip
    return Fleet(specs, collector.high_water, collector.on_chunk, collector.on_state, options)


def _run(fleet: Fleet, fake: FakeHandshakes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run until every link has tried once and reported what the fake said."""
    monkeypatch.setattr(ssh_link, "_handshake", fake)
    with fleet:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                fake.done < len(fleet.links)
                or any(s.state != UNREACHABLE for s in fleet.status().values())):
            time.sleep(0.02)
        assert {s.state for s in fleet.status().values()} == {UNREACHABLE}
    assert fake.done >= len(fleet.links)


def test_no_more_handshakes_to_one_server_than_its_bound(
    servers: list[int], tmp_path: Path, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeHandshakes(expect_peak=3, per_server=True)
    fleet = _fleet(servers[:1], 12, tmp_path, collector, max_concurrent_connects=64,
                   max_connects_per_server=3)
    _run(fleet, fake, monkeypatch)
    assert fake.peak_server[servers[0]] == 3


def test_no_more_handshakes_in_the_fleet_than_its_bound(
    servers: list[int], tmp_path: Path, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeHandshakes(expect_peak=5, per_server=False)
    fleet = _fleet(servers, 4, tmp_path, collector, max_concurrent_connects=5,
                   max_connects_per_server=8)
    _run(fleet, fake, monkeypatch)
    assert fake.peak_total == 5


def test_a_link_waiting_for_a_slot_stops_without_connecting(
    servers: list[int], tmp_path: Path, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop while every slot is taken ends the waiting links as stopped, not as hosts
    that failed, and none of them connects after the stop."""
    release = threading.Event()
    entered: list[str] = []

    def held(hop, sock, label, options, timeout):
        entered.append(label)
        release.wait(10)
        sock.close()
        raise ssh_link.ConnectFailed(UNREACHABLE, "released", slow=False)

    monkeypatch.setattr(ssh_link, "_handshake", held)
    fleet = _fleet(servers[:1], 4, tmp_path, collector, max_concurrent_connects=1)
    fleet.start()
    deadline = time.monotonic() + 10
    while not entered and time.monotonic() < deadline:
        time.sleep(0.01)
    for link in fleet.links.values():
        link.request_stop()
    release.set()
    fleet.stop()
    assert len(entered) == 1
    waiting = [n for n in fleet.links if n != entered[0]]
    assert {fleet.status()[n].state for n in waiting} == {"stopped"}


def test_server_slots_are_per_address_and_port() -> None:
    slots = ConnectSlots(total=10, per_server=1)
    with slots.server(("10.0.0.1", 22)) as first:
        assert first
        # Another server is not held up by the first one's slot.
        with slots.server(("10.0.0.2", 22)) as other, slots.server(("10.0.0.1", 2222)) as port:
            assert other and port
        # The same server is, until the stop check gives up the wait.
        with slots.server(("10.0.0.1", 22), stopping=lambda: True) as again:
            assert not again
    with slots.server(("10.0.0.1", 22)) as after:
        assert after
