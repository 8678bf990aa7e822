"""The demo as a user gets it: the real app on `cockpit demo`'s live source — agent daemon,
job launched through the agent under torchrun, local transport, DuckDB — shows live
steps and loss within 60 s, offers job control, and leaves no process behind."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from agent.supervisor import alive
from cockpit.demo import DemoRun
from cockpit.ui.app_factory import make_app
from tests.harness.torchrun import descendants
from tests.ui.helpers import text

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def test_demo_shows_live_steps_and_loss_and_cleans_up(tmp_path: Path) -> None:
    demo = DemoRun(run_root=tmp_path / "demo", steps=2000, nproc=2, simulate_gpus=2)
    with demo:
        daemon_pid = demo._daemon.pid
        app = make_app(demo.source)
        async with app.run_test(size=(160, 48)) as pilot:
            started = time.monotonic()
            step = 0
            while time.monotonic() - started < 60:
                await pilot.pause(0.5)
                found = re.search(r"step ([\d,]+) / 2,000", text(app, "#progress-position"))
                step = int(found.group(1).replace(",", "")) if found else 0
                if step > 0 and "loss " in text(app, "#effect-line"):
                    break
            assert step > 0, "no live step shown within 60 s"
            assert re.search(r"loss \d+\.\d+", text(app, "#effect-line"))
            assert "LIVE" in str(app.screen.query_one("#status-bar").render())
            assert "SIM" in str(app.screen.query_one("#sim-badge").render())
            assert demo.source.controller is not None
            job_pids = descendants(daemon_pid)
            assert job_pids, "the job runs under the agent"
    # Leaving the demo stops the daemon and the job it launched.
    deadline = time.monotonic() + 30
    while any(alive(p) for p in [daemon_pid, *job_pids]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in [daemon_pid, *job_pids] if alive(p)]
