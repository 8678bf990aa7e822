"""A host whose agent journal is replaced (its state dir wiped, a new journal begun),
streamed through a real sshd into a live session's recording: both journals end up
stored whole and apart, and the link never reports the host lost for it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from agent.journal.journal import Journal
from cockpit.sessions.live import LiveSession
from cockpit.transport.states import CONNECTING, STALE, STREAMING, UNREACHABLE
from tests.transport.support import JournalFeeder, options_for, spec_for


class Session(LiveSession):
    """A live session that also keeps every state its links report."""

    def __init__(self, *args, **kwargs) -> None:
        self.states: list[tuple[str, str]] = []
        super().__init__(*args, **kwargs)

    def _on_state(self, host: str, state: str, detail: str) -> None:
        self.states.append((state, detail))
        super()._on_state(host, state, detail)


def _wait(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stored(session: LiveSession, host: str) -> list[tuple[int, int]]:
    """(seq as stored, gpu) of the host's gpu rows; the feeder numbers gpu by seq."""
    with session.store.cursor() as cur:
        return cur.execute("SELECT seq, gpu FROM gpu WHERE host = ? ORDER BY seq",
                           [host]).fetchall()


def _feed(state_dir: Path, records: int) -> int:
    journal = Journal(state_dir)
    for n in range(1, records + 1):
        journal.append("gpu", {"gpu": n % 8, "util": float(n)})
    journal.close()
    return journal.head


def test_a_journal_replaced_under_a_running_stream_is_stored_whole_and_apart(
        two_hosts, tmp_path: Path) -> None:
    host = two_hosts[0]
    feeder = JournalFeeder(host.state_dir, interval=0.005).start()
    session = Session([spec_for(host)], tmp_path / "rec.duckdb", options_for(two_hosts, tmp_path))
    try:
        with session:
            _wait(lambda: len(_stored(session, host.name)) >= 50, "the first journal")
            old = feeder.stop()
            _wait(lambda: len(_stored(session, host.name)) == old, "all of the first journal")
            shutil.rmtree(host.state_dir)
            time.sleep(0.2)  # the stream finds the state dir empty
            new = _feed(host.state_dir, 40)
            _wait(lambda: len(_stored(session, host.name)) == old + new, "the new journal")
            link = session.fleet.links[host.name]
            (row,) = session.store.hosts()
            stored = _stored(session, host.name)
            states = [s for s, _ in session.states]
    finally:
        feeder.close()
    # The old journal's seqs, then the new one's after them: none lost, none twice, and
    # none of the new records taken for the old journal's (their gpu follows their seq).
    assert stored == [
        *((s, s % 8) for s in range(1, old + 1)), *((old + s, s % 8) for s in range(1, new + 1))]
    assert row.malformed == 0 and "journal reset" in (row.last_error or "")
    # The stream switched journals by itself: one connection, one stream, never lost.
    assert link.connections == 1
    assert states == [CONNECTING, STREAMING]


def test_a_journal_replaced_while_the_host_was_away_is_fetched_from_its_start(
        two_hosts, tmp_path: Path) -> None:
    """The stream that connects after the reset asks from the old journal's mark, so it
    skips the new journal's first records; the store sees the new journal in its header
    and the link restarts the stream from 0 on the same connection."""
    host = two_hosts[0]
    old = _feed(host.state_dir, 80)
    session = Session([spec_for(host)], tmp_path / "rec.duckdb", options_for(two_hosts, tmp_path))
    with session:
        _wait(lambda: len(_stored(session, host.name)) == old, "the first journal")
        host.stop()
        _wait(lambda: session.states[-1][0] in (UNREACHABLE, STALE), "the host lost")
        shutil.rmtree(host.state_dir)
        new = _feed(host.state_dir, 30)  # fewer than the mark: the stream sends none
        came_back = len(session.states)
        host.start()
        _wait(lambda: len(_stored(session, host.name)) == old + new, "the new journal")
        link = session.fleet.links[host.name]
        stored = _stored(session, host.name)
    assert stored == [
        *((s, s % 8) for s in range(1, old + 1)), *((old + s, s % 8) for s in range(1, new + 1))]
    after = session.states[came_back:]
    assert UNREACHABLE not in [s for s, _ in after[after.index((STREAMING, f"from seq {old}")):]]
    restarts = [d for s, d in after if s == CONNECTING and "restarting the stream" in d]
    assert restarts == [f"restarting the stream from the store's mark, as asked (it streamed "
                        f"from seq {old})"], after
    assert (STREAMING, "from seq 0") in after
    assert link.connections == 2  # the first, and the one after the outage: no more
