"""`SshCommands.run` is bounded by its timeout after the output ended too: a remote command
that closes its output and runs on, or a link that dies silently after that, must not
hold the command lock (the Slurm watcher's and every control command's) for ever."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from cockpit.transport.inventory import HostSpec
from cockpit.transport.run_command import (
    MAX_OUTPUT,
    CommandError,
    CommandResult,
    LocalCommands,
    SshCommands,
)
from tests.harness.sshd import SshdHost
from tests.transport.support import options_for, spec_for


class _Channel:
    """What paramiko's Channel offers here: an exit status that never comes (the remote
    runs on, or the link went silent) until `status_event` is set."""

    def __init__(self, status: int | None) -> None:
        self.status_event = threading.Event()
        self.exit_status = -1
        self.closed = False
        if status is not None:
            self.exit_status = status
            self.status_event.set()

    def recv_exit_status(self) -> int:
        self.status_event.wait()  # as paramiko's: no timeout
        return self.exit_status

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _File:
    def __init__(self, channel: _Channel, data: bytes = b"") -> None:
        self.channel, self.data = channel, data

    def read(self, size: int = -1) -> bytes:
        data, self.data = self.data, b""
        return data

    def write(self, data: bytes) -> None:
        pass


class _Client:
    def __init__(self) -> None:
        self.channels: list[_Channel] = []
        self.statuses: list[int | None] = []

    def exec_command(self, line: str, timeout: float | None = None):
        channel = _Channel(self.statuses.pop(0))
        self.channels.append(channel)
        return _File(channel), _File(channel, b"out\n"), _File(channel)


def _commands(client: _Client) -> tuple[SshCommands, list[str]]:
    commands = SshCommands(HostSpec(name="login1", address="login1"))
    closed: list[str] = []

    def connect() -> SimpleNamespace:
        return SimpleNamespace(client=client, close=lambda: closed.append("closed"))

    commands._conn = connect()  # type: ignore[assignment]
    commands._client = lambda: (commands._conn or connect()).client  # type: ignore
    return commands, closed


def test_an_exit_status_that_never_comes_times_out_and_frees_the_lock() -> None:
    client = _Client()
    client.statuses = [None, 0]
    commands, closed = _commands(client)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(commands.run(["squeue", "--me"], timeout=0.2))
        except CommandError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    try:
        assert not thread.is_alive(), "run() waited for an exit status for ever"
    finally:
        client.channels[0].status_event.set()  # releases the old code's wait
    assert time.monotonic() - started < 5
    (error,) = outcome
    assert isinstance(error, CommandError)
    assert "did not exit within 0.2 s" in str(error) and "squeue --me" in str(error)
    assert client.channels[0].closed and closed == ["closed"]
    # The lock is free: the next command (the watcher's, a control's) runs.
    done = commands.run(["squeue", "--me"], timeout=0.2)
    assert isinstance(done, CommandResult) and done.ok and done.stdout == "out\n"


def test_an_exit_status_that_comes_is_returned() -> None:
    client = _Client()
    client.statuses = [3]
    commands, closed = _commands(client)
    done = commands.run(["false"], timeout=0.2)
    assert (done.returncode, done.stdout) == (3, "out\n") and closed == []


@pytest.mark.e2e
def test_a_remote_command_that_closes_its_output_and_runs_on_times_out(
        sshd_hosts: Callable[..., list[SshdHost]], tmp_path: Path) -> None:
    host = sshd_hosts(1)[0]
    commands = SshCommands(spec_for(host), options_for([host], tmp_path))
    try:
        started = time.monotonic()
        with pytest.raises(CommandError, match="did not exit within 1 s"):
            # Its output closed at once (EOF), its exit 20 s later.
            commands.run(["sh", "-c", "exec >/dev/null 2>&1 </dev/null; sleep 20"],
                         timeout=1.0)
        assert time.monotonic() - started < 10
        done = commands.run(["sh", "-c", "echo back"], timeout=10.0)
        assert done.ok and done.stdout == "back\n"
    finally:
        commands.close()


# -- output past the limit: kept in part, counted, never a stall --------------------------

# 3 MiB on stdout and on stderr, stderr first: a reader that drains stdout alone first
# leaves the command blocked on a full stderr pipe (or SSH window) until its timeout.
_FLOOD = ("head -c 3145728 /dev/zero | tr '\\000' e >&2; "
          "head -c 3145728 /dev/zero | tr '\\000' o; echo done >&2")


def test_a_local_command_printing_past_the_limit_on_both_streams_is_read_to_its_end() -> None:
    done = LocalCommands().run(["sh", "-c", _FLOOD], timeout=30)
    assert done.ok
    assert len(done.stdout) == len(done.stderr) == MAX_OUTPUT
    assert set(done.stdout) == {"o"} and set(done.stderr) == {"e"}
    assert done.dropped == 2 * (3 * MAX_OUTPUT - MAX_OUTPUT) + len("done\n")
    assert "not kept" in done.describe()


def test_a_local_command_that_prints_without_end_is_killed_at_its_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(CommandError, match="did not finish within 1 s; killed"):
        LocalCommands().run(["yes"], timeout=1.0)
    assert time.monotonic() - started < 10


def test_a_local_command_reads_its_input_and_says_what_it_could_not_run() -> None:
    done = LocalCommands().run(["cat"], stdin=b"spec\n", timeout=10)
    assert (done.stdout, done.dropped) == ("spec\n", 0) and "not kept" not in done.describe()
    with pytest.raises(CommandError, match="no-such-program"):
        LocalCommands().run(["no-such-program-here"])


@pytest.mark.e2e
def test_a_remote_command_printing_past_the_limit_is_read_to_its_end(
        sshd_hosts: Callable[..., list[SshdHost]], tmp_path: Path) -> None:
    host = sshd_hosts(1)[0]
    commands = SshCommands(spec_for(host), options_for([host], tmp_path))
    try:
        done = commands.run(["sh", "-c", _FLOOD], timeout=30.0)
        assert done.ok and done.stdout == "o" * MAX_OUTPUT and done.stderr == "e" * MAX_OUTPUT
        assert done.dropped == 4 * MAX_OUTPUT + len("done\n")
        started = time.monotonic()
        with pytest.raises(CommandError, match="output did not end within 1 s"):
            commands.run(["yes"], timeout=1.0)
        assert time.monotonic() - started < 10
        again = commands.run(["sh", "-c", "echo back"], timeout=10.0)  # connects again
        assert again.ok and again.stdout == "back\n"
    finally:
        commands.close()
