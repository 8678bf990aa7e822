"""The screen's control keys on a Slurm job, against the real cluster.

`cockpit watch JOB.toml` of a Slurm job attaches `SlurmController`: pause, resume,
relaunch and stop pressed on the screen (or run from the command palette) go through
Slurm and say what Slurm did; the keys with no Slurm meaning say why before any prompt
opens. A 1-node trainer of a few lines (it reports steps, and checkpoints whenever the
control file asks) keeps the test to Slurm's own pace, not torch's start-up.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.app import App

from cockpit.app.cli import main as cli_main
from cockpit.app.watch import open_watch
from cockpit.control.jobspec import parse_jobspec
from cockpit.control.slurm import RUNNING, SlurmJob
from cockpit.control.slurm_controller import NOT_OFFERED, SlurmController
from cockpit.store.database import Store
from cockpit.transport.run_command import LocalCommands
from cockpit.ui.app_factory import make_app
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.prompt import PromptScreen
from tests.harness.slurm import SlurmCluster
from tests.slurm.conftest import tiny_spec
from tests.ui.helpers import notifications, settle, text, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Reports a step every 0.2 s; rank 0 saves a checkpoint (step-N.pt and its completion
# marker) whenever the control file holds one more `checkpoint_now` than it did.
STEPPING_TRAINER = textwrap.dedent("""\
    import os, sys, time
    from pathlib import Path
    from agent.hook import Reporter, mark_checkpoint_complete
    rep = Reporter()
    step = 0
    if "--resume" in sys.argv:
        path = sys.argv[sys.argv.index("--resume") + 1]
        step = int(Path(path).stem.split("-")[1])
        print("resumed from", path, flush=True)
        rep.resumed(step, path)
    run, job = Path(os.environ["COCKPIT_RUN_DIR"]), os.environ["COCKPIT_JOB"]
    control = run / "control" / f"{job}.ndjson"
    folder = Path(os.environ["COCKPIT_CHECKPOINT_DIR"])

    def asked():
        return control.read_text().count("checkpoint_now") if control.exists() else 0

    seen = asked()
    while True:
        step += 1
        rep.step(step, loss=1.0 / step)
        if asked() > seen and os.environ.get("RANK") == "0":
            seen = asked()
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"step-{step}.pt").write_bytes(b"weights")
            mark_checkpoint_complete(folder / f"step-{step}.pt", step)
            rep.flush()
        time.sleep(0.2)
""")
LIMIT_S = 240.0  # bounds a hang only: Slurm's and the agents' pace on a loaded machine


def _toast(app: App, start: str) -> str:
    """The notification starting with `start`, or "" while there is none."""
    return next((n for n in notifications(app) if n.startswith(start)), "")


def _said(app: App, start: str) -> Callable[[], bool]:
    return lambda: _toast(app, start) != ""


async def test_screen_keys_pause_resume_relaunch_stop_a_slurm_job(
        slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_spec(tmp_path, "keyed", "keyed", STEPPING_TRAINER, nodes=1,
              tables='[resume]\nargs = ["--resume", "{checkpoint}"]\n')
    spec_path, rec, watch_rec = (tmp_path / "keyed.toml", tmp_path / "rec.duckdb",
                                 tmp_path / "watch.duckdb")
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "keyed"
    look = SlurmJob(parse_jobspec(spec_path.read_text(), str(spec_path)),
                    LocalCommands(slurm.env))  # the test's own look at the queue
    # Held in the queue first: both nodes drained.
    for node in slurm.nodes:
        slurm.run("scontrol", "update", f"nodename={node}", "state=drain",
                  "reason=cockpit test: held")
    try:
        await _keys(slurm, spec_path, rec, watch_rec, look, run_dir)
    finally:
        for node in slurm.nodes:  # idle already, unless the test stopped early
            slurm.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)


async def _keys(slurm: SlurmCluster, spec_path: Path, rec: Path, watch_rec: Path,
                look: SlurmJob, run_dir: Path) -> None:
    assert cli_main(["launch", str(spec_path), "--store", str(rec),
                     "--ack-timeout", "1"]) == 0
    first_id = look.attach()
    with open_watch([str(spec_path)], store_path=watch_rec, known_hosts=None,
                    accept_new_host_keys=False) as live:
        assert isinstance(live.source.controller, SlurmController)
        app = make_app(live.source)
        async with app.run_test(size=(120, 40)) as pilot:

            def shown_state() -> str:
                return app.snapshot.progress.state if app.snapshot else ""

            # Queued: nothing to pause yet (stop would cancel it), said at once.
            await wait_until(pilot, lambda: shown_state().startswith(
                f"queued in Slurm (job {first_id}"), "the queued job on screen", LIMIT_S)
            app.clear_notifications()
            await pilot.press("p")
            await settle(pilot)
            assert isinstance(app.screen, MainScreen)
            (refused,) = notifications(app)
            assert refused.startswith("job keyed is queued in Slurm") and refused.endswith(
                ": no process to pause"), refused
            for node in slurm.nodes:
                slurm.run("scontrol", "update", f"nodename={node}", "state=resume")
            await wait_until(pilot, lambda: shown_state() == "running",
                             "the job running on screen", LIMIT_S)
            assert app.snapshot is not None and app.snapshot.job == "keyed"

            # Keys with no Slurm meaning: refused with the reason, nothing opens.
            for key, op in (("c", "checkpoint"), ("e", "eval"), ("l", "adjust"),
                            ("f", "fork"), ("s", "scale")):
                app.clear_notifications()
                await pilot.press(key)
                await settle(pilot)
                assert notifications(app) == [NOT_OFFERED[op]], key
                assert isinstance(app.screen, MainScreen), key

            # Pause: confirmed with what Slurm will do; done once the allocation is gone.
            await pilot.press("p")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen),
                             "the pause confirmation")
            assert f"Slurm job {first_id}" in text(app, "#dialog-body")
            assert "USR1" in text(app, "#dialog-body")
            await pilot.press("y")
            await wait_until(pilot, _said(app, "Pause the job: "), "the pause", LIMIT_S)
            markers = sorted((run_dir / "checkpoints").glob("*.done"))
            assert markers, "the pause ended the job without a checkpoint"
            saved = max(json.loads(m.read_text())["step"] for m in markers)
            assert _toast(app, "Pause the job: ") == (
                f"Pause the job: Slurm job {first_id} checkpointed at step {saved} and "
                f"ended (COMPLETED); its allocation ({look.look().nodes}) is released")
            assert look.look().state == "COMPLETED" and slurm.queue() == []
            await wait_until(pilot, lambda: shown_state() == "paused", "paused on screen")

            # Resume, from the command palette's entry (the same action as `r`).
            await app.run_keyed_action("resume_job")
            await wait_until(pilot, _said(app, "Resume the job: "), "the resume", LIMIT_S)
            second_id = look.attach()
            assert second_id != first_id
            assert _toast(app, "Resume the job: ").startswith(
                f"Resume the job: Slurm job {second_id} submitted, resuming from the newest "
                "valid checkpoint; now ")
            running = look.wait(lambda s: s.state == RUNNING, LIMIT_S)
            node = running.nodes

            def resumed_from(path: Path, on: str) -> bool:
                return any(f"resumed from {path}" in p.read_text()
                           for p in (run_dir / "nodes" / on).glob("logs/*.out"))

            await wait_until(pilot, lambda: resumed_from(
                run_dir / "checkpoints" / f"step-{saved}.pt", node),
                f"the resume from step {saved}", LIMIT_S)
            await wait_until(pilot, lambda: shown_state() == "running",
                             "the resumed job running on screen", LIMIT_S)

            # Relaunch excluding the node it runs on (as after a bad GPU there).
            await pilot.press("R")
            await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen),
                             "the relaunch prompt")
            await pilot.press(*node, "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen),
                             "the relaunch confirmation")
            assert f"Excluded hosts: {node}" in text(app, "#dialog-body")
            await pilot.press("y")
            await wait_until(pilot, _said(app, "Relaunch the job: "), "the relaunch",
                             LIMIT_S)
            third_id = look.attach()
            assert third_id not in (first_id, second_id)
            assert _toast(app, "Relaunch the job: ").endswith(
                f", excluding {node}")
            moved = look.wait(lambda s: s.state == RUNNING, LIMIT_S)
            assert moved.nodes not in ("", node), moved
            markers = sorted((run_dir / "checkpoints").glob("*.done"))
            newest = max(json.loads(m.read_text())["step"] for m in markers)
            assert newest > saved
            await wait_until(pilot, lambda: resumed_from(
                run_dir / "checkpoints" / f"step-{newest}.pt", moved.nodes),
                f"the relaunch resumed from step {newest} on {moved.nodes}", LIMIT_S)

            # Stop: scancel.
            await wait_until(pilot, lambda: shown_state() == "running",
                             "the relaunched job running on screen", LIMIT_S)
            await pilot.press("S")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen),
                             "the stop confirmation")
            assert f"scancel Slurm job {third_id}" in text(app, "#dialog-body")
            await pilot.press("y")
            await wait_until(pilot, _said(app, "Stop the job: "), "the stop", LIMIT_S)
            assert _toast(app, "Stop the job: ") == (
                f"Stop the job: Slurm job {third_id} cancelled (scancel): CANCELLED")
            assert look.look().state == "CANCELLED" and slurm.queue() == []

    store = Store(watch_rec)
    with store.cursor() as cur:
        rows = cur.execute("SELECT seq, kind, data FROM event WHERE host = 'slurm:keyed' "
                           "ORDER BY seq").fetchall()
    store.close()
    seqs = [r[0] for r in rows]
    assert seqs == sorted(set(seqs)), "the watch and the screen numbered one record"
    kinds = [r[1] for r in rows]
    assert {"pause", "resume", "relaunch"} <= set(kinds), kinds
    relaunch = [json.loads(d) for _, k, d in rows if k == "relaunch"]
    assert relaunch[0]["exclude"] == [node] and relaunch[0]["slurm_job_id"] == third_id
    submitted = [json.loads(d) for _, k, d in rows if k == "slurm_submitted"]
    assert f"#SBATCH --exclude={node}" in submitted[-1]["batch_text"]
    # The stop is journaled as the operator's stop, not an outage never recovered.
    assert "interruption" not in kinds, kinds
    stops = [json.loads(d) for _, k, d in rows if k == "job_exited"]
    assert [(s["ended_for"], s["state"]) for s in stops] == [("stop", "CANCELLED")], stops
