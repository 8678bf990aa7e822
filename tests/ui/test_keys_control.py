"""Job-control, replay, help, palette, theme and quit keys."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from cockpit.ui import job_control as jc
from cockpit.ui.app_factory import make_app
from cockpit.ui.commands import CockpitCommands
from cockpit.ui.keymap import KEYS
from cockpit.ui.messages import ControlDone, ControlPlanned
from cockpit.ui.replay_actions import SEEK_SECONDS
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.help import HelpScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.prompt import PromptScreen
from cockpit.ui.static_source import StaticSource
from tests.ui.conftest import RecordingController, RecordingReplaySource
from tests.ui.helpers import notifications, settle, text


@pytest.mark.parametrize("key", ["p", "r", "R", "f", "c", "e", "l"])
async def test_control_keys_without_a_controller_say_so(demo_source: StaticSource,
                                                        key: str) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert jc.NO_CONTROLLER in notifications(app)
        assert isinstance(app.screen, MainScreen)  # no dialog pretending to act


async def test_pause_is_confirmed_with_the_controllers_description(
        controlled_source: StaticSource, controller: RecordingController) -> None:
    messages: list = []
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "on gpu-node-a, gpu-node-b" in text(app, "#dialog-body")
        assert controller.names() == []  # nothing happens before the answer
        await pilot.press("y")
        await settle(pilot)
        assert controller.names() == ["pause"]
        assert "Pause the job: pause accepted" in notifications(app)
        assert [type(m) for m in messages if isinstance(m, ControlPlanned | ControlDone)] == [
            ControlPlanned, ControlDone]


async def test_cancelled_confirmation_does_nothing(controlled_source: StaticSource,
                                                   controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert controller.names() == []
        assert "Pause the job: cancelled" in notifications(app)


async def test_relaunch_offers_to_exclude_failing_hosts(
        controlled_source: StaticSource, controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        prefilled = app.screen.query_one(Input).value.split()
        assert prefilled == ["gpu-node-b", "gpu-node-d"]  # XID / offline GPU
        await pilot.press("enter")
        await settle(pilot)
        assert "Excluded hosts: gpu-node-b, gpu-node-d" in text(app, "#dialog-body")
        await pilot.press("y")
        await settle(pilot)
        assert controller.calls[-1] == ("relaunch", (), {"exclude": ("gpu-node-b",
                                                                     "gpu-node-d")})


async def test_fork_passes_parsed_overrides(controlled_source: StaticSource,
                                            controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press(*"lr=0.001", "enter")
        await settle(pilot)
        assert "Overrides: lr=0.001" in text(app, "#dialog-body")
        await pilot.press("y")
        await settle(pilot)
        assert controller.calls[-1] == ("fork", ({"lr": 0.001},), {})


async def test_lr_scale_is_validated_then_applied_without_confirmation(
        controlled_source: StaticSource, controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        await pilot.press(*"fast", "enter")
        await pilot.pause()
        assert "is not a number" in text(app, "#prompt-error")
        assert controller.names() == []
        app.screen.query_one(Input).value = ""
        await pilot.press(*"0.5", "enter")
        await settle(pilot)
        assert controller.calls[-1] == ("adjust", (), {"lr_scale": 0.5})
        assert not any(name == "describe" for name, _, _ in controller.calls)


async def test_checkpoint_and_eval_run_at_once(controlled_source: StaticSource,
                                               controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert controller.names() == ["checkpoint_now", "eval_now", "resume"]


async def test_replay_keys_drive_the_replay(replay_source: RecordingReplaySource) -> None:
    app = make_app(replay_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.check_action("replay_toggle", ())
        await pilot.press("space")
        await settle(pilot)
        assert "PAUSED" in text(app, "#status-bar")
        await pilot.press("space", "greater_than_sign")
        await settle(pilot)
        assert "REPLAY 20x" in text(app, "#status-bar")
        await pilot.press("less_than_sign", "less_than_sign")
        await settle(pilot)
        await pilot.press("right")
        await settle(pilot)
        await pilot.press("left")
        await settle(pilot)
        assert replay_source.replay_calls == [
            ("pause", ()), ("resume", ()), ("set_speed", (20.0,)), ("set_speed", (10.0,)),
            ("set_speed", (5.0,)), ("seek", (SEEK_SECONDS * 5,)),
            ("seek", (-SEEK_SECONDS * 5,)),
        ]
        await pilot.press("p")
        assert jc.NO_CONTROLLER in notifications(app)


async def test_replay_keys_are_off_for_other_sources(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert not app.check_action("replay_toggle", ())
        await pilot.press("space", "right")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)


async def test_help_lists_every_key_with_the_users_keymap(tmp_path: Path,
                                                          demo_source: StaticSource) -> None:
    keymap = tmp_path / "keys.toml"
    keymap.write_text('alerts = "ctrl+a"\n')
    app = make_app(demo_source, keymap_path=keymap)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        assert table.row_count == len(KEYS)
        assert table.get_row("alerts")[0] == "ctrl+a"
        await pilot.press("escape")
        await pilot.press("a")  # no longer bound
        assert isinstance(app.screen, MainScreen)
        await pilot.press("ctrl+a")
        await settle(pilot)
        assert type(app.screen).__name__ == "AlertsScreen"


async def run_hit(hit: object) -> None:
    result = hit.command()  # type: ignore[attr-defined]
    if inspect.isawaitable(result):
        await result


async def test_palette_lists_every_action_and_switches_themes(
        demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        provider = CockpitCommands(app.screen)
        titles = [title for title, _, _ in provider._commands()]
        assert {spec.description for spec in KEYS} <= set(titles)
        assert {"Theme: dark", "Theme: light", "Theme: high-contrast"} <= set(titles)
        hits = [hit async for hit in provider.search("Theme: light")]
        await run_hit(hits[0])
        await pilot.pause()
        assert app.theme == "light" and "-theme-light" in app.classes
        hits = [hit async for hit in provider.search("Log-y")]
        await run_hit(hits[0])
        assert app.main_screen.query_one("#effect").log_y


async def test_q_quits(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert app._exit
