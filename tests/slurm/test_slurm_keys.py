"""The screen's keys reach `SlurmController`, without a cluster.

Slurm's answers are scripted (`_Queue`); the real cluster's run of the same keys is
test_slurm_screen.py. Checked here: a key with no Slurm meaning is refused with the
reason before any prompt and runs no Slurm command; stop is confirmed with Slurm's job
id and runs `scancel`; a Slurm command that fails reaches the operator as a failure.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cockpit.control.slurm import SlurmJob
from cockpit.control.slurm_controller import NOT_OFFERED, SlurmController
from cockpit.sessions.static_source import StaticSource
from cockpit.ui.app import CockpitApp
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_details, demo_snapshot
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.main import MainScreen
from tests.slurm.test_slurm_records import _Queue, _spec
from tests.ui.helpers import notifications, notified, settle, text


def _app(tmp_path: Path, queue: _Queue) -> CockpitApp:
    job = SlurmJob(_spec(tmp_path), queue)
    job.job_id = "41"  # as the watch found it
    source = StaticSource(replace(demo_snapshot(), job="job"), demo_details(),
                          controller=SlurmController(job), label="LIVE")
    return make_app(source)


async def test_keys_without_slurm_meaning_are_refused_with_the_reason(
        tmp_path: Path) -> None:
    queue = _Queue()
    app = _app(tmp_path, queue)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for key, op in (("c", "checkpoint"), ("e", "eval"), ("l", "adjust"),
                        ("f", "fork"), ("s", "scale")):
            app.clear_notifications()
            await pilot.press(key)
            await settle(pilot)
            assert notifications(app) == [NOT_OFFERED[op]], key
            assert isinstance(app.screen, MainScreen), key
    assert queue.seen == []


async def test_stop_key_runs_scancel_and_says_slurms_end(tmp_path: Path) -> None:
    queue = _Queue()
    queue.current = "41\n"
    queue.job = "JobId=41 JobState=RUNNING Reason=None NodeList=g[1-2] Partition=gpu"
    app = _app(tmp_path, queue)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("S")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "scancel Slurm job 41 of job" in text(app, "#dialog-body")
        assert not any(argv[0] == "scancel" for argv in queue.seen)  # not before "y"
        queue.job = "JobId=41 JobState=CANCELLED Reason=None NodeList=g[1-2] ExitCode=0:15"
        await pilot.press("y")
        await settle(pilot)
        assert ["scancel", "41"] in queue.seen
        assert "Stop the job: Slurm job 41 cancelled (scancel): CANCELLED" in \
            notifications(app)


async def test_a_slurm_command_that_fails_is_shown_as_a_failure(tmp_path: Path) -> None:
    queue = _Queue()
    queue.down = "login1: connection refused"
    app = _app(tmp_path, queue)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("S")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        failed = [n for n in notified(app) if n.severity == "error"]
        assert [n.message for n in failed] == [
            "ControlError: job: no Slurm job to act on (login1: connection refused)"], \
            notifications(app)
        assert not any(n.startswith("Stop the job: ") for n in notifications(app))
