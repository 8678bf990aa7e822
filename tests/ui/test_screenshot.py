"""The command palette's Screenshot: saved in a directory that exists (the recording's, or
the one given), and the toast says where; a directory that cannot take it is named, with
why, instead of Textual's bare "Failed to save screenshot" about a missing ~/Downloads."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from textual.pilot import Pilot

from cockpit.app.cli import build_parser
from cockpit.sessions.replay import ReplaySource
from cockpit.ui.app import CockpitApp
from cockpit.ui.app_factory import make_app
from tests.ui.helpers import notified, wait_until

SIZE = (120, 40)


def _replay(recorded_store: Path, folder: Path) -> ReplaySource:
    """A replay of a copy of the recorded run in `folder` (the shared one stays clean)."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "run.duckdb"
    shutil.copy(recorded_store, copy)
    source = ReplaySource(copy, speed=10.0)
    source.seek_to(1.0)
    return source


def _toasts(app: CockpitApp) -> list[tuple[str, str]]:
    return [(n.message, n.severity) for n in notified(app)]


async def _palette_screenshot(pilot: Pilot[None], app: CockpitApp) -> None:
    """What choosing Screenshot in the command palette runs, until the app says where."""
    [command] = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
    command.callback()
    await wait_until(pilot, lambda: any("screenshot" in message for message, _ in _toasts(app)),
                     "the screenshot's toast")


async def test_the_palette_saves_next_to_the_recording_and_says_where(
        recorded_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home-without-downloads"))
    monkeypatch.chdir(tmp_path)
    app = make_app(_replay(recorded_store, tmp_path / "rec"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _palette_screenshot(pilot, app)
    [svg] = list((tmp_path / "rec").glob("*.svg"))
    ET.parse(svg)  # a whole SVG file
    assert _toasts(app)[-1] == (f"screenshot saved: {svg}", "information")
    assert not list(tmp_path.glob("*.svg")), "nothing in the current directory"


async def test_a_given_directory_is_used_and_a_vanished_one_is_named(
        recorded_store: Path, tmp_path: Path) -> None:
    shots = tmp_path / "shots"
    shots.mkdir()
    app = make_app(_replay(recorded_store, tmp_path / "rec"), screenshot_dir=shots)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        saved = app.deliver_screenshot("first.svg")
        assert saved == str(shots / "first.svg") and (shots / "first.svg").is_file()
        shutil.rmtree(shots)
        assert app.deliver_screenshot("second.svg") is None
        await pilot.pause()
    message, severity = _toasts(app)[-1]
    assert severity == "error"
    assert message.startswith(f"screenshot not saved in {shots}: ")
    assert "No such file or directory" in message
    assert not list((tmp_path / "rec").glob("*.svg"))


def test_the_command_line_refuses_a_directory_that_does_not_exist(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.duckdb"
    args = build_parser().parse_args(["replay", str(rec), "--screenshots", str(tmp_path)])
    assert args.screenshots == tmp_path
    with pytest.raises(SystemExit) as ended:
        build_parser().parse_args(["replay", str(rec), "--screenshots", str(tmp_path / "no")])
    assert ended.value.code == 2
    assert f"{tmp_path / 'no'}: no such directory" in capsys.readouterr().err
