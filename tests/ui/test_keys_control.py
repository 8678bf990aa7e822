"""Job-control, replay, help, palette, theme and quit keys.

Keys are pressed on the replay of a recorded real run (`recorded_replay`). A replay has
no job to control, so the job-control dialogs run on `StaticSource` with a controller
double that records the calls (`controlled_source`), and the one test about sources
without replay controls uses the static demo source.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from cockpit.control.controller import ControlError
from cockpit.sessions.static_source import StaticSource
from cockpit.store.database import Store
from cockpit.ui import control_actions
from cockpit.ui import job_control as jc
from cockpit.ui.app_factory import make_app
from cockpit.ui.commands import CockpitCommands
from cockpit.ui.demo_static import demo_details, demo_snapshot
from cockpit.ui.keymap import KEYS
from cockpit.ui.messages import ControlDone, ControlPlanned
from cockpit.ui.replay_actions import SEEK_SECONDS, SPEEDS
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.help import HelpScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.prompt import PromptScreen
from tests.ui.conftest import OpenReplay, RecordingController
from tests.ui.helpers import answer, notifications, notified, settle, text, wait_until
from tests.ui.recorded import recording_facts

FACTS = recording_facts()


async def test_control_keys_on_a_recording_say_there_is_no_job_to_control(
        recorded_replay: OpenReplay) -> None:
    messages: list = []
    app = make_app(recorded_replay())
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        for key in ("p", "r", "R", "f", "c", "e", "l"):
            app.clear_notifications()
            await pilot.press(key)
            await settle(pilot)
            assert notifications(app) == [jc.NO_CONTROLLER], key
            assert isinstance(app.screen, MainScreen), key  # no dialog pretending to act
        assert not any(isinstance(m, ControlPlanned | ControlDone) for m in messages)


# Stop: a job failed on one host while another keeps restarting into a rendezvous nobody
# joins has no process to pause; the stop key ends it everywhere.
@pytest.mark.parametrize(("key", "op", "title"), [("p", "pause", "Pause the job"),
                                                  ("S", "stop", "Stop the job")])
async def test_a_destructive_key_is_confirmed_with_the_controllers_description(
        controlled_source: StaticSource, controller: RecordingController, key: str, op: str,
        title: str) -> None:
    messages: list = []
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert f"{op}: signal ranks 0-15 of demo-7b on gpu-node-a, gpu-node-b" in text(
            app, "#dialog-body")
        assert controller.names() == []  # nothing happens before the answer
        await pilot.press("y")
        await settle(pilot)
        assert controller.names() == [op]
        assert f"{title}: {op} accepted" in notifications(app)
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
        assert controller.names() == ["checkpoint_now", "eval_now"]
        assert notifications(app)[-1] == "job demo-7b is running: there is nothing to resume"


class AnsweringSource(StaticSource):
    """A live source whose agents answered as a test says (op id -> answer)."""

    def __init__(self, answers: dict[str, tuple[bool, str]], **kw: object) -> None:
        super().__init__(demo_snapshot(), demo_details(), label="LIVE", **kw)  # type: ignore[arg-type]
        self.answers = answers

    def acks(self, op_ids: list[str]) -> dict[str, tuple[bool, str]]:
        return {i: self.answers[i] for i in op_ids if i in self.answers}


async def _checkpoint_refused_by_node_a(controller: RecordingController, op: str) -> list[str]:
    """The notifications after `c`, once gpu-node-a refused op `op` ("is paused")."""
    source = AnsweringSource({f"{op}-gpu-node-a": (False, "job 'demo-7b' is paused")},
                             controller=controller)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await wait_until(pilot, lambda: any("refused" in n for n in notifications(app)),
                         "the agents' answers")
        return notifications(app)


async def test_a_refused_or_unanswered_op_is_told_after_sent(
        controller: RecordingController, monkeypatch: pytest.MonkeyPatch) -> None:
    """"Sent" is not "done": an agent's refusal, and a host that never answered, reach
    the operator as a warning rather than only the events list."""
    monkeypatch.setattr(control_actions, "ACK_WAIT_S", 0.3)
    controller.last_ops = {"gpu-node-a": "op1-gpu-node-a", "gpu-node-b": "op1-gpu-node-b"}
    said = await _checkpoint_refused_by_node_a(controller, "op1")
    refused = next(n for n in said if "refused" in n)
    assert "Checkpoint now: refused by gpu-node-a: job 'demo-7b' is paused" in refused
    assert "no answer from gpu-node-b within 0.3 s" in refused
    accepted = jc.ack_text(jc.OPERATIONS["pause"], {"a": (True, "ok"), "b": (True, "ok")}, 30,
                           900)
    assert accepted == ("", "information")  # all accepted: the "sent" toast suffices



class SettlingController(RecordingController):
    """Records what the screen hands `settle` (as the real controller adopts a change)."""

    def __init__(self) -> None:
        super().__init__()
        self.settled: list[dict[str, tuple[bool, str] | None]] = []

    def settle(self, answers: dict[str, tuple[bool, str] | None]) -> list[str]:
        self.settled.append(dict(answers))
        return []


async def test_an_answer_that_comes_after_the_wait_is_told_and_settled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-node-b's link was reconnecting: its silence is told after the wait, and its
    answer when it comes, which is also what the controller adopts a change by."""
    monkeypatch.setattr(control_actions, "ACK_WAIT_S", 0.3)
    monkeypatch.setattr(control_actions, "LATE_ACK_POLL_S", 0.1)
    controller = SettlingController()
    controller.last_ops = {"gpu-node-a": "op1-gpu-node-a", "gpu-node-b": "op1-gpu-node-b"}
    source = AnsweringSource({"op1-gpu-node-a": (True, "accepted")}, controller=controller)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await wait_until(pilot, lambda: any("no answer" in n for n in notifications(app)),
                         "the silence after the wait")
        silent = next(n for n in notifications(app) if "no answer" in n)
        assert "no answer from gpu-node-b within 0.3 s" in silent
        assert "within 15 min more is told here" in silent
        assert controller.settled[-1] == {"op1-gpu-node-a": (True, "accepted"),
                                          "op1-gpu-node-b": None}
        source.answers["op1-gpu-node-b"] = (False, "job 'demo-7b' is paused")
        await wait_until(pilot, lambda: any("late answer" in n for n in notifications(app)),
                         "gpu-node-b's late answer")
        late = next(n for n in notifications(app) if "late answer" in n)
        assert late.startswith("Checkpoint now: late answer, ")
        assert late.endswith("s after it was sent: gpu-node-b refused (job 'demo-7b' is "
                             "paused)")
        assert "gpu-node-a" not in late  # answered in time: not told again
        assert controller.settled[-1] == {"op1-gpu-node-a": (True, "accepted"),
                                          "op1-gpu-node-b": (False, "job 'demo-7b' is paused")}


class PartlyReachingController(RecordingController):
    """A controller whose pause and stop reach gpu-node-a and miss gpu-node-b (its link
    is down), as the real one raises it."""

    def _record(self, name: str, *args: object, **kwargs: object) -> str:
        super()._record(name, *args, **kwargs)
        self.last_ops = {"gpu-node-a": "op1-gpu-node-a"}
        raise ControlError(f"{name} of job demo-7b not sent to gpu-node-b", ["gpu-node-a"],
                           {"gpu-node-b": "host gpu-node-b is unreachable"})


@pytest.mark.parametrize(("key", "title", "then"), [
    ("p", "Pause the job", "its agent ends its part the same way"),
    ("S", "Stop the job", "its agent ends its part the same way")])
async def test_a_pause_or_stop_that_misses_a_host_says_what_that_host_does(
        monkeypatch: pytest.MonkeyPatch, key: str, title: str, then: str) -> None:
    """Sent to one host, missed on another: not "control failed" (the host it reached
    acts on it, and its answer is still followed), but what the missed host does."""
    monkeypatch.setattr(control_actions, "ACK_WAIT_S", 0.3)
    controller = PartlyReachingController()
    source = AnsweringSource({"op1-gpu-node-a": (False, "job 'demo-7b' is stopped")},
                             controller=controller)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: any("refused" in n for n in notifications(app)),
                         "gpu-node-a's answer")
        said = notifications(app)
        assert not any("failed" in n or "ControlError" in n for n in said), said
        sent = next(n for n in said if n.startswith(f"{title}: sent to gpu-node-a"))
        assert "not to gpu-node-b (gpu-node-b: host gpu-node-b is unreachable)" in sent
        assert then in sent and "check it once it is back" in sent


async def test_control_keys_act_on_the_job_on_screen(controller: RecordingController) -> None:
    """With a fork shown (`j`), its controller gets the keys, the parent's nothing; a job
    the cockpit cannot address is refused with the way out, never acted on."""
    fork = "demo-7b-fork-a1b2c3"
    shown = StaticSource(replace(demo_snapshot(), job=fork), demo_details(),
                         controller=controller, label="LIVE")
    app = make_app(shown)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await answer(pilot, "l", (*"0.5", "enter"), "p")
        assert f"of {fork} on" in text(app, "#dialog-body")
        await answer(pilot, "y")
        titles = [n.title for n in notified(app)]
        assert titles.count(f"Job control · {fork}") == 2
        assert controller.names() == []
        assert controller.forks[fork].names() == ["adjust", "pause"]
        assert controller.forks[fork].calls[0] == ("adjust", (), {"lr_scale": 0.5})
    other = StaticSource(replace(demo_snapshot(), job="someone-elses"), demo_details(),
                         controller=controller, label="LIVE")
    app = make_app(other)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for key in ("p", "l", "c"):
            app.clear_notifications()
            await pilot.press(key)
            await settle(pilot)
            assert notifications(app) == [jc.not_controlled("someone-elses", "demo-7b")], key
            assert isinstance(app.screen, MainScreen), key
    assert controller.names() == [] and list(controller.forks) == [fork]


async def test_replay_keys_drive_the_recorded_replay(recorded_replay: OpenReplay) -> None:
    source = recorded_replay(at=1.0)  # the end: paused
    app = make_app(source)

    async def press(key: str) -> None:
        await pilot.press(key)
        await settle(pilot)

    def position_shown() -> str:
        return text(app, "#progress-position")

    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert app.check_action("replay_toggle", ())
        assert "REPLAY 10x PAUSED" in text(app, "#status-bar")
        await press("space")  # resuming at the end plays again from the start
        assert source.playing and source.position == source.start_ts
        assert "PAUSED" not in text(app, "#status-bar")
        await wait_until(pilot, lambda: "step n/a" in position_shown(), "the start")
        await press("greater_than_sign")
        assert source.speed == SPEEDS[SPEEDS.index(10.0) + 1]
        assert f"REPLAY {source.speed:g}x" in text(app, "#status-bar")
        for _ in SPEEDS:  # down the ladder to 1x, one rung per press
            if source.speed <= 1.0:
                break
            await press("less_than_sign")
        assert source.speed == 1.0 and "REPLAY 1x" in text(app, "#status-bar")
        await press("right")  # at 1x and below, a seek moves SEEK_SECONDS of recording
        target = min(source.start_ts + SEEK_SECONDS, source.end_ts)
        assert source.position == target
        expected = f"step {FACTS.step_at(target):,} /"
        await wait_until(pilot, lambda: expected in position_shown(), expected)
        await press("left")
        assert source.position == source.start_ts
        await wait_until(pilot, lambda: "step n/a" in position_shown(), "the start again")
        await press("space")
        assert not source.playing and "PAUSED" in text(app, "#status-bar")
        await pilot.press("p")
        assert jc.NO_CONTROLLER in notifications(app)


async def test_replay_keys_are_off_for_other_sources(demo_source: StaticSource) -> None:
    # A source without pause/seek (live or demo): the demo's static source stands in.
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert not app.check_action("replay_toggle", ())
        await pilot.press("space", "right")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        titles = {title for title, _, _ in CockpitCommands(app.screen)._commands()}
        replay_only = {spec.description for spec in KEYS if spec.scope == "replay"}
        assert replay_only and not titles & replay_only  # nor offered in the palette


async def test_help_lists_every_key_with_the_users_keymap(tmp_path: Path,
                                                          recorded_replay: OpenReplay) -> None:
    keymap = tmp_path / "keys.toml"
    keymap.write_text('alerts = "ctrl+a"\n')
    app = make_app(recorded_replay(), keymap_path=keymap)
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
        recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
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
        # Textual's own theme picker (its themes, not the cockpit's) is not offered.
        system = [c.title for c in app.get_system_commands(app.screen)]
        assert "Quit" in system and "Theme" not in system


async def test_the_palette_neither_stacks_on_nor_drops_an_open_dialog(
        controlled_source: StaticSource, controller: RecordingController) -> None:
    app = make_app(controlled_source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.action_pause_job()  # what p does; the confirmation opens
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the dialog")
        for spec_id in ("relaunch_job", "alerts", "pause_job"):
            await app.run_keyed_action(spec_id)
            await settle(pilot)
            assert isinstance(app.screen, ConfirmScreen), spec_id
            assert "answer or cancel (Esc) the open dialog first" in notifications(app)[-1]
        assert len([s for s in app.screen_stack if isinstance(s, ConfirmScreen)]) == 1
        await pilot.press("y")  # the dialog still gets its answer
        await settle(pilot)
        assert controller.names() == ["pause"]


async def test_q_quits_and_releases_the_recording(recorded_replay: OpenReplay,
                                                  recorded_store: Path) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert app._exit
    with Store(recorded_store) as store:  # writable again: the replay closed its handle
        assert store.path == recorded_store


async def test_starting_a_failed_job_again_is_confirmed_with_why_it_may_fail_again(
        controller: RecordingController) -> None:
    """A resume is sent at once, except for a job the agent gave up on: the same spec
    fails the same way, which the operator is told before it is sent."""
    snap = demo_snapshot()
    failed = replace(snap, progress=replace(snap.progress, state="failed", eta_note="failed"))
    app = make_app(StaticSource(failed, demo_details(), controller=controller, label="LIVE"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "the agent stopped retrying" in text(app, "#dialog-body")
        await answer(pilot, "y")
        await answer(pilot, "R", "enter")  # relaunch first asks which hosts to exclude
        assert "runs no process now (failed): nothing is stopped" in text(app, "#dialog-body")
        await answer(pilot, "y")
    assert controller.names() == ["resume", "relaunch"]


class SlowFailingController(RecordingController):
    """A pause that takes its time and then fails (a Slurm pause whose sbatch failed,
    minutes later), and the screen's closing told to it (`abandon`)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.abandoned = threading.Event()

    def pause(self) -> str:
        self._record("pause")
        self.release.wait(30)
        raise RuntimeError("sbatch: error: Batch job submission failed")

    def abandon(self) -> None:
        self.abandoned.set()


async def test_a_key_pressed_while_an_operation_runs_waits_its_turn_and_the_failure_is_told(
        ) -> None:
    """A second control key once cancelled the running operation's worker, whose failure
    then went unsaid; now it is refused until the first one's outcome is in."""
    controller = SlowFailingController()
    app = make_app(StaticSource(demo_snapshot(), demo_details(), controller=controller,
                                label="LIVE"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: controller.names() == ["pause"], "the pause to start")
        await pilot.press("c")  # (no `settle` from here: it waits for the pause's worker)
        await wait_until(pilot, lambda: "Pause the job is still under way: its outcome comes "
                         "first" in notifications(app), "the refusal of the second key")
        assert controller.names() == ["pause"]  # nothing else sent meanwhile
        controller.release.set()
        await wait_until(pilot, lambda: any("Batch job submission failed" in n
                                            for n in notifications(app)), "the failure")
        await wait_until(pilot, lambda: app.operation_under_way is None, "the pause's end")
        await pilot.press("c")  # (not `settle`: it re-raises the pause worker's failure)
        await wait_until(pilot, lambda: controller.names() == ["pause", "checkpoint_now"],
                         "the next operation")
    assert controller.abandoned.is_set()  # the closing screen told the controller
