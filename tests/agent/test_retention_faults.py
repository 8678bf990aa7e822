"""Journal retention that cannot remove a segment (a read-only remount: EROFS): the
segment stays, in the journal's list as on disk, the failure is said once, and nothing
that journals fails for it. Before, the segment was dropped from the list while left on
disk, and the error left the write that had succeeded (a spool batch journaled again),
the XID thread, or the daemon's main loop (which then stopped every job)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agent.daemon
from agent.daemon import Daemon, DaemonConfig, ObservedJournal
from agent.journal.journal import Journal, JournalReader, list_segments
from agent.journal.spool import SpoolTailer
from agent.samplers.sim import SimGpus
from agent.wire.events import DROPPED
from tests.agent.conftest import SpoolWriter
from tests.harness.waiting import wait_for


class ReadOnly:
    """While `on`, removing a journal segment fails as on a read-only remount."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = True
        self.tries = 0
        real = pathlib.Path.unlink

        def unlink(path: pathlib.Path, *args: Any, **kwargs: Any) -> None:
            if self.on and path.name.endswith(".ndjson") and path.parent.name == "journal":
                self.tries += 1
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            real(path, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "unlink", unlink)


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReadOnly]:
    yield ReadOnly(monkeypatch)


def _retention_lines(logs: list[str]) -> list[str]:
    return [line for line in logs if "journal retention" in line]


def _age(segments: list[tuple[int, Path]]) -> None:
    """Make these segments older than any age cap."""
    long_ago = time.time() - 100 * 86400
    for _, path in segments:
        os.utime(path, (long_ago, long_ago))


def test_a_segment_that_cannot_be_removed_is_kept_and_said_once(
        tmp_path: Path, read_only: ReadOnly) -> None:
    logs: list[str] = []
    journal = Journal(tmp_path / "state", max_age=86400.0, segment_bytes=300,
                      log=logs.append)
    read_only.on = False
    for i in range(12):
        journal.append("host", {"cpu": float(i)})
    segments = list_segments(journal.dir)
    assert len(segments) > 2
    _age(segments[:-1])
    read_only.on = True
    assert journal.enforce_retention() == 0
    assert journal.enforce_retention() == 0  # tried again: said once, not every time
    assert read_only.tries == 2
    assert journal.first == 1  # still in the list...
    assert list_segments(journal.dir) == segments  # ...and on disk
    said = _retention_lines(logs)
    assert len(said) == 1, logs
    assert "Read-only file system" in said[0] and segments[0][1].name in said[0]
    # Writes that rotate meanwhile (retention runs after each rotation) go on as usual.
    for i in range(12, 24):
        assert journal.append("host", {"cpu": float(i)}) is not None
    assert read_only.tries > 2 and len(_retention_lines(logs)) == 1
    assert [r["seq"] for r in JournalReader(journal.state_dir).records()] == list(
        range(1, 25))
    # Writable again: the old ones go, the loss is told, and the recovery is said.
    read_only.on = False
    dropped = journal.enforce_retention()
    assert dropped == segments[-1][0] - 1 and journal.first == segments[-1][0]
    assert not any(path.exists() for _, path in segments[:-1])
    assert len(_retention_lines(logs)) == 2
    told = [r for r in JournalReader(journal.state_dir).records()
            if r.get("kind") == DROPPED]
    assert [(r["data"]["first"], r["data"]["last"]) for r in told] == [(1, dropped)]
    journal.close()


def test_a_spool_batch_is_journaled_once_when_retention_fails_after_it(
        tmp_path: Path, read_only: ReadOnly) -> None:
    """The batch was written when retention (after the rotation) failed: the tailer
    must not be told otherwise, or it journals the same lines again."""
    journal = Journal(tmp_path / "state", max_bytes=600, segment_bytes=400)
    run_dir = tmp_path / "run"
    writer = SpoolWriter(run_dir, "j", 0)
    writer.new_file()
    tailer = SpoolTailer(ObservedJournal(journal, lambda t, fields: None,
                                         log=lambda msg: None), [run_dir])
    # Past two segments the journal is over its size cap: every rotation tries to drop.
    step = 0
    errors: list[OSError] = []
    for _ in range(8):
        for _ in range(2):
            step += 1
            writer.train(step)
        for _ in range(3):  # as the daemon's loop would: an error, then tried again
            try:
                tailer.poll()
            except OSError as exc:
                errors.append(exc)
    assert len(list_segments(journal.dir)) > 2 and read_only.tries > 0
    journal.close()
    steps = [r["step"] for r in JournalReader(tmp_path / "state").records()
             if r["t"] == "train"]
    assert steps == list(range(1, step + 1))  # each once: none journaled twice
    assert not errors


class _Clock:
    """`time` as the daemon module sees it, with a monotonic clock the test moves on."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_the_daemon_survives_retention_on_a_read_only_journal(
        tmp_path: Path, read_only: ReadOnly, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    read_only.on = False
    old = Journal(state, segment_bytes=300)
    for i in range(10):
        old.append("host", {"cpu": float(i)})
    old.close()
    segments = list_segments(state / "journal")
    assert len(segments) >= 2
    _age(segments[:-1])
    read_only.on = True
    clock = _Clock()
    monkeypatch.setattr(agent.daemon, "time", clock)
    logs: list[str] = []
    daemon = Daemon(DaemonConfig(state, max_age=86400.0), gpus=SimGpus(1),
                    log=logs.append)
    result: list[int] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(daemon.run())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: any(r["t"] == "hello" for r in JournalReader(state).records()),
                 30, "the hello", poll=0.02)
        for _ in range(2):  # two retention rounds of the main loop
            tries = read_only.tries

            def retention_round(tries: int = tries) -> bool:
                # A minute on at each look: the loop may take its first reading of the
                # clock after a single move (a loaded machine starts it late).
                clock.ahead += 61.0
                return read_only.tries > tries or not thread.is_alive()

            wait_for(retention_round, 30, "a retention round", poll=0.02)
            time.sleep(0.5)  # a main loop that died would have stopped by now
            assert thread.is_alive(), (failed, logs)
        assert daemon.journal.first == 1
        assert list_segments(state / "journal")[0] == segments[0]
        said = _retention_lines(logs)
        assert len(said) == 1 and "Read-only file system" in said[0], logs
    finally:
        daemon.stop()
        thread.join(60)
    assert not thread.is_alive() and result == [0] and not failed
    with contextlib.suppress(FileNotFoundError):
        for line in (state / "journal" / segments[-1][1].name).read_bytes().splitlines():
            json.loads(line)  # the segment written to holds whole lines only
