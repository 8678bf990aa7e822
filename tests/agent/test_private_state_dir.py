"""The agent's state dir is its user's alone: its control inbox holds ops the agent
carries out (a launch runs a command), so nobody else may write there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agent.journal.control_inbox import append_op
from agent.journal.journal import Journal
from agent.wire.atomic import private_dir


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_state_dir_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        append_op(tmp_path / "state", {"op": "ping", "id": "p1"})
        Journal(tmp_path / "state2")
    finally:
        os.umask(old)
    for state in (tmp_path / "state", tmp_path / "state2"):
        assert _mode(state) & 0o077 == 0, oct(_mode(state))


def test_an_existing_state_dir_others_may_write_is_closed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    Journal(state)
    assert _mode(state) & 0o022 == 0, oct(_mode(state))


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Made by "another user": this process takes another uid for the check (the tests
    # may run as root, whose files every uid can be given).
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr(os, "getuid", lambda: state.stat().st_uid + 1)
    with pytest.raises(OSError, match="not to this user"):
        private_dir(state)
    with pytest.raises(OSError, match="not to this user"):
        append_op(state, {"op": "ping", "id": "p1"})
    assert not (state / "control").exists()
