"""The fleet over several hosts, and the local link that needs no SSH."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from cockpit.transport.fleet import Fleet, UnknownHost
from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkNotStreaming
from cockpit.transport.local_link import LocalLink
from tests.harness.sshd import REPO_ROOT
from tests.transport.support import Collector, JournalFeeder, options_for, spec_for


def test_fleet_streams_every_host_and_routes_control(
    two_hosts, tmp_path: Path, collector: Collector
) -> None:
    feeders = [JournalFeeder(h.state_dir, interval=0.01).start() for h in two_hosts]
    down = spec_for(two_hosts[1], name="down", port=1, address="127.0.0.1")
    specs = [spec_for(h) for h in two_hosts] + [down]
    fleet = Fleet(
        specs,
        collector.high_water,
        collector.on_chunk,
        collector.on_state,
        options_for(two_hosts, tmp_path),
    )
    try:
        with fleet:
            assert collector.wait_for(lambda: set(fleet.streaming()) == {"host1", "host2"})
            assert collector.wait_for(lambda: fleet.status()["down"].state == "unreachable")
            # Its retries read as the refusal they retry after, not as "connecting".
            assert collector.wait_for(lambda: fleet.status()["down"].state == "connecting")
            assert fleet.status()["down"].reading().startswith("unreachable (")
            results = fleet.broadcast({"op": "ping", "id": "b1"})
            assert results["host1"] is None and results["host2"] is None
            assert "down is unreachable" in results["down"]
            with pytest.raises(LinkNotStreaming):
                fleet.send("down", {"op": "ping", "id": "b2"})
            with pytest.raises(UnknownHost, match="no host named 'nope'"):
                fleet.send("nope", {"op": "ping"})
            for host in two_hosts:
                assert collector.wait_for(lambda h=host: len(collector.seqs.get(h.name, [])) >= 10)
    finally:
        for feeder in feeders:
            feeder.close()
    # A link that never connected keeps its reason; the others stop.
    assert {n: s.state for n, s in fleet.status().items()} == {
        "host1": "stopped", "host2": "stopped", "down": "unreachable"}
    with pytest.raises(ValueError, match="unique"):
        Fleet(specs + specs[:1], collector.high_water, collector.on_chunk)


def _fed_local_link(tmp_path: Path, collector: Collector,
                    links: list) -> tuple[JournalFeeder, LocalLink]:
    """A journal written to as a daemon would, and a local link (not started) to stream it
    through this checkout's agent into `collector`."""
    state = tmp_path / "state"
    feeder = JournalFeeder(state, interval=0.005).start()
    agent = shlex.join(["env", f"PYTHONPATH={REPO_ROOT}", sys.executable, "-m", "agent"])
    spec = HostSpec(name="here", address="local", state_dir=str(state), agent=agent)
    link = LocalLink(spec, lambda: collector.high_water("here"), collector.on_chunk,
                     collector.on_state, options_for([], tmp_path))
    links.append(link)
    return feeder, link


def test_local_link_streams_and_restarts_a_dead_agent(
    tmp_path: Path, collector: Collector, links: list
) -> None:
    feeder, link = _fed_local_link(tmp_path, collector, links)
    try:
        link.start()
        assert collector.wait_for(lambda: len(collector.seqs.get("here", [])) >= 50)
        proc = link._proc
        assert proc is not None
        os.kill(proc.pid, 9)
        assert collector.wait_for(lambda: collector.state_names("here").count("streaming") >= 2)
        head = feeder.stop()
        assert collector.wait_for(lambda: collector.high_water("here") == head)
    finally:
        feeder.close()
    assert collector.seqs["here"] == list(range(1, head + 1))
    assert "agent stream killed by signal 9" in collector.detail_of("here", "agent-failed")


def test_a_failing_state_listener_is_logged_and_the_link_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_host: str, _state: str, _detail: str) -> None:
        raise RuntimeError("listener bug")

    spec = HostSpec(name="here", address="local", state_dir=str(tmp_path / "state"))
    link = LocalLink(spec, lambda: 0, lambda _host, _chunk: None, broken,
                     options_for([], tmp_path))
    with caplog.at_level("ERROR", logger="cockpit.transport.link"):
        link._set_state("connecting", "starting")
    assert link.state == "connecting"
    assert "link here: the state listener failed on 'connecting': RuntimeError: listener bug" \
        in caplog.text


def test_a_local_link_asked_to_reconnect_restarts_its_stream_from_the_mark(
    tmp_path: Path, collector: Collector, links: list
) -> None:
    """What a re-keyed journal asks of a link: a new stream from the consumer's mark, with
    no exit status awaited and no failure reported for the stream it ended."""
    feeder, link = _fed_local_link(tmp_path, collector, links)
    try:
        link.start()
        assert collector.wait_for(lambda: len(collector.seqs.get("here", [])) >= 50)
        link.reconnect()
        assert collector.wait_for(lambda: collector.state_names("here").count("streaming") >= 2)
        head = feeder.stop()
        assert collector.wait_for(lambda: collector.high_water("here") == head)
    finally:
        feeder.close()
    assert collector.seqs["here"] == list(range(1, head + 1))
    states = collector.state_names("here")
    assert set(states[:states.index("streaming", 2) + 1]) == {"connecting", "streaming"}
    assert [d for h, s, d in collector.states if d.startswith("restarting the stream")] == [
        "restarting the stream from the store's mark, as asked (it streamed from seq 0)"]
    assert collector.headers["here"][1]["from"] == link.last_from_seq > 0
    assert link.connections == 2


def _started(kind: type[LocalLink], tmp_path: Path, collector: Collector,
             links: list) -> LocalLink:
    """A link of `kind` to host `here`, started, its states kept by `collector`."""
    spec = HostSpec(name="here", address="local", state_dir=str(tmp_path / "state"))
    link = kind(spec, lambda: 0, collector.on_chunk, collector.on_state,
                options_for([], tmp_path))
    links.append(link)
    link.start()
    return link


class _StoppedUnderARead(LocalLink):
    """A link whose stream fails the moment its connection is closed by a stop, the way
    a read does when the connection it waits on is closed under it."""

    def _attempt(self, backoff) -> float:
        self._set_state("streaming", "from seq 0")
        self._stopping.wait(30)
        raise OSError("the connection was closed under the read")


def test_a_failure_that_the_stop_itself_causes_ends_the_link_as_stopped(
    tmp_path: Path, collector: Collector, links: list
) -> None:
    link = _started(_StoppedUnderARead, tmp_path, collector, links)
    assert collector.wait_for(lambda: collector.state_names("here") == ["streaming"])
    link.stop()
    assert collector.state_names("here") == ["streaming", "stopped"]
    assert link.state == "stopped"


class _RetryingAfterARefusal(LocalLink):
    """A host that refuses the first connection; the retry (`then`) is under way when
    the link is stopped: still connecting (a slow handshake on a loaded machine), or
    streaming."""

    then = "connecting"

    def _attempt(self, backoff) -> float:
        if self.connections == 0:
            self.connections += 1
            self._set_state("unreachable", "me@host: cannot connect (Connection refused)")
            return 0.0
        self._set_state(self.then, "me@host")
        self._stopping.wait(30)
        return 0.0


class _StreamingAgainAfterARefusal(_RetryingAfterARefusal):
    then = "streaming"


@pytest.mark.parametrize(("kind", "ends"), [
    (_RetryingAfterARefusal, "unreachable"),  # why it never connected, kept
    (_StreamingAgainAfterARefusal, "stopped"),  # it recovered: nothing to keep
])
def test_a_link_stopped_mid_retry_keeps_its_failure_unless_it_streamed_again(
    tmp_path: Path, collector: Collector, links: list, kind: type[_RetryingAfterARefusal],
    ends: str,
) -> None:
    link = _started(kind, tmp_path, collector, links)
    assert collector.wait_for(
        lambda: collector.state_names("here") == ["unreachable", kind.then])
    link.stop()
    # What a headless run reports and the recording keeps.
    assert collector.state_names("here") == ["unreachable", kind.then, ends]
    assert link.state == ends
    assert collector.detail_of("here", "unreachable") == \
        "me@host: cannot connect (Connection refused)"
