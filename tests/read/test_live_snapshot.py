"""A recording read while this process writes it: the live session's snapshot socket
(`cockpit.store.live_socket`) and the copy behind it (`cockpit.store.snapshot_copy`),
with a real store written through the real ingest path."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.sessions.replay import ReplaySource
from cockpit.store.database import Store, StoreError, StoreLockedError
from cockpit.store.live_socket import (
    REQUEST_MAX,
    LiveSnapshotError,
    SnapshotServer,
    readable_recording,
    request_snapshot,
    socket_path,
)
from cockpit.store.snapshot_copy import SnapshotCopier
from tests.read.synthetic import HOSTS, build_recording
from tests.read.synthetic import step_ts as syn_step_ts


def _ingest(store: Store, steps: int) -> None:
    """The synthetic run's first `steps` steps (the store keeps only seqs it lacks)."""
    rec = build_recording(steps=steps)
    for host in HOSTS:
        store.ingest(host, b"".join(rec.wire(host)))


def _newest_step(path: Path) -> int:
    with Store(path, read_only=True) as store, store.cursor() as cur:
        return int(cur.execute("SELECT max(step) FROM train").fetchall()[0][0])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Store, SnapshotServer]]:
    store = Store(tmp_path / "run.duckdb")
    server = SnapshotServer(store).start()
    try:
        yield store, server
    finally:
        server.stop()
        store.close()


@pytest.mark.slow
def test_a_reader_gets_what_is_committed_at_each_request(
        live: tuple[Store, SnapshotServer]) -> None:
    store, server = live
    _ingest(store, 60)
    with readable_recording(store.path) as (path, is_copy):
        assert is_copy and path != store.path
        assert _newest_step(path) == 59
        replay = ReplaySource(path)  # what `cockpit replay` plays of a live recording
        try:
            assert replay.start_ts < syn_step_ts(59) <= replay.end_ts
        finally:
            replay.stop()
        into = path.parent
    assert not into.exists(), "the reader's copy is removed once read"
    _ingest(store, 90)  # the writer goes on
    with readable_recording(store.path) as (path, is_copy):
        assert is_copy and _newest_step(path) == 89
    assert server.served == 2


@pytest.mark.slow
def test_report_on_a_live_recording_returns_the_newest_committed_step(
        live: tuple[Store, SnapshotServer], capsys: pytest.CaptureFixture[str]) -> None:
    """`cockpit report` on the file a live session writes, as a second terminal runs it."""
    from cockpit.app.cli import main

    store, server = live
    for steps in (60, 90):  # the writer goes on between the two reports
        _ingest(store, steps)
        main(["report", str(store.path), "--format", "json"])  # its verdict: the data's
        out = capsys.readouterr()
        assert json.loads(out.out)["progress"]["step"] == steps - 1, out.err
        assert "is being written by a live cockpit" in out.err
    assert server.served == 2


def test_the_socket_is_the_owners_alone_and_goes_with_the_session(tmp_path: Path) -> None:
    store = Store(tmp_path / "run.duckdb")
    server = SnapshotServer(store).start()
    sock = socket_path(store.path)
    try:
        assert stat.S_ISSOCK(sock.lstat().st_mode)
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
    finally:
        server.stop()
        store.close()
    assert not sock.exists()
    with readable_recording(store.path) as (path, is_copy):
        assert (path, is_copy) == (store.path, False)


@pytest.mark.slow
def test_a_stale_socket_of_a_killed_cockpit_is_ignored_then_replaced(tmp_path: Path) -> None:
    recording = tmp_path / "run.duckdb"
    with Store(recording) as store:
        _ingest(store, 20)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(socket_path(recording)))  # bound, never listening, never removed
    dead.close()
    with readable_recording(recording) as (path, is_copy):
        assert (path, is_copy) == (recording, False)
        assert _newest_step(path) == 19
    store = Store(recording)
    server = SnapshotServer(store).start()
    try:
        assert server.problem is None
        with readable_recording(recording) as (path, is_copy):
            assert is_copy and _newest_step(path) == 19
    finally:
        server.stop()
        store.close()


def test_a_file_in_the_sockets_place_is_left_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "run.duckdb")
    socket_path(store.path).write_text("mine")
    server = SnapshotServer(store).start()
    try:
        assert server.problem is not None and "not a socket" in server.problem
        assert socket_path(store.path).read_text() == "mine"
    finally:
        server.stop()
        store.close()
    assert socket_path(store.path).read_text() == "mine"


@pytest.mark.slow
def test_a_long_path_is_served_through_its_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    store = Store(deep / "run.duckdb")
    server = SnapshotServer(store).start()
    try:
        _ingest(store, 10)
        assert len(str(socket_path(store.path))) > 108
        with readable_recording(store.path) as (path, is_copy):
            assert is_copy and _newest_step(path) == 9
    finally:
        server.stop()
        store.close()


def _ask(path: Path, line: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(socket_path(path)))
        s.sendall(line)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def test_bad_requests_get_a_reason_and_no_copy(live: tuple[Store, SnapshotServer],
                                               tmp_path: Path) -> None:
    store, server = live
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    cases = {
        b"not json\n": "bad request",
        b"[" * 3000 + b"\n": "bad request",  # nested too deeply: once ended the server
        b'{"op": "drop"}\n': "bad request",
        b'{"op": "snapshot", "dir": "relative"}\n': "absolute",
        json.dumps({"op": "snapshot", "dir": str(shared)}).encode() + b"\n": "private",
        json.dumps({"op": "snapshot", "dir": str(tmp_path / "none")}).encode() + b"\n":
            "No such file",
        b"x" * (REQUEST_MAX + 10) + b"\n": "longer than",
    }
    for line, why in cases.items():
        reply = _ask(store.path, line)
        assert reply["ok"] is False and why in reply["error"], (line[:60], reply)
    assert list(shared.iterdir()) == []
    assert server.served == 0
    with readable_recording(store.path) as (_path, is_copy):  # still serving
        assert is_copy


def test_a_refusal_reaches_the_reader_as_an_error(live: tuple[Store, SnapshotServer],
                                                  tmp_path: Path) -> None:
    store, _server = live
    into = tmp_path / "into"
    into.mkdir(mode=0o700)
    (into / "snapshot.duckdb").write_text("in the way")
    with pytest.raises(LiveSnapshotError, match="exists already"):
        request_snapshot(store.path, into)


def test_an_interrupted_copier_copies_no_more(tmp_path: Path) -> None:
    with Store(tmp_path / "run.duckdb") as store:
        copier = SnapshotCopier(store)
        copier.interrupt()
        with pytest.raises(StoreError, match="ending"):
            copier.copy(tmp_path / "copy.duckdb")
    assert not (tmp_path / "copy.duckdb").exists()


def test_without_a_live_cockpit_a_locked_recording_names_its_writer(tmp_path: Path) -> None:
    """A writer that serves no copies (a plain DuckDB process): the reader opens the file
    itself and is told who holds it, not that it is damaged."""
    recording = tmp_path / "run.duckdb"
    with Store(recording) as store:
        _ingest(store, 5)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); sys.stdin.read()", str(recording)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with readable_recording(recording) as (path, is_copy):
            assert (path, is_copy) == (recording, False)
            with pytest.raises(StoreLockedError, match=r"open for writing by another process"):
                Store(path, read_only=True)
    finally:
        holder.kill()
        holder.wait()
