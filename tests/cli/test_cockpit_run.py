"""`cockpit run -- CMD…`: a plain command becomes a job spec the agent takes, steered,
paused and resumed. (The getting-started guide's own `cockpit run` lines run to their
end, recorded: tests/trainer/test_examples_as_documented.py.)"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.wire.checkpoints import newest_valid
from cockpit.app.local_run import CommandRun, job_spec_from_command, parse_command
from cockpit.errors import CockpitError
from tests.cli.test_cli import BIN, one_clear_error, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


def test_python_script_and_args(tmp_path: Path, script: Path) -> None:
    parsed = parse_command([sys.executable, "-u", "train.py", "--lr", "3e-4"], tmp_path)
    assert (parsed.python, parsed.script, parsed.module) == (sys.executable, str(script), False)
    assert parsed.args == ["--lr", "3e-4"] and parsed.nproc is None
    assert parsed.default_job == "train"


def test_python_found_on_path_is_kept_as_named_not_resolved(tmp_path: Path, script: Path,
                                                            monkeypatch) -> None:  # fmt: skip
    """A venv's `python` is a symlink: resolving it would lose the venv's packages."""
    monkeypatch.setenv("PATH", str(BIN) + os.pathsep + os.environ.get("PATH", ""))
    parsed = parse_command(["python", "train.py"], tmp_path)
    assert parsed.python == str(BIN / "python")


def test_module_and_torchrun(tmp_path: Path, script: Path) -> None:
    parsed = parse_command([sys.executable, "-m", "pkg.train", "--x"], tmp_path)
    assert (parsed.script, parsed.module, parsed.args) == ("pkg.train", True, ["--x"])
    assert parsed.default_job == "train"
    parsed = parse_command(["torchrun", "--standalone", "--nproc-per-node=2", "train.py",
                            "a"], tmp_path)  # fmt: skip
    assert (parsed.script, parsed.nproc, parsed.args) == (str(script), 2, ["a"])
    assert parse_command(["torchrun", "--nproc_per_node", "3", "train.py"], tmp_path).nproc == 3


@pytest.mark.parametrize(("command", "message"), [
    (["bash", "train.py"], "got 'bash'"),
    (["python3", "-X", "dev", "train.py"], "option -X cannot pass through torchrun"),
    (["torchrun", "--nnodes", "2", "train.py"], "option --nnodes is not supported"),
    (["torchrun", "--nproc-per-node", "x", "train.py"], "'x' is not a number"),
    (["python3", "missing.py"], "missing.py: no such script"),
    (["python3"], "no script was given"),
    ([], "give the command to run after --"),
])
def test_commands_it_cannot_run_are_named(tmp_path: Path, script: Path, command, message
                                          ) -> None:  # fmt: skip
    with pytest.raises(CockpitError, match=re.escape(message)):
        parse_command(command, tmp_path)


def test_the_spec_is_one_the_agent_accepts(tmp_path: Path, script: Path) -> None:
    parsed = parse_command([sys.executable, "train.py", "--steps", "5"], tmp_path)
    spec = job_spec_from_command(parsed, name="train", host="me", nproc=2,
                                 run_dir=tmp_path / "run", workdir=tmp_path)  # fmt: skip
    launch = LaunchSpec(spec.for_host("me"))
    argv = launch.argv(None, {})
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in argv and "--nproc-per-node" in " ".join(argv)
    assert argv[-3:] == [str(script), "--steps", "5"]
    assert launch.workdir == tmp_path


def test_names_and_counts_are_checked_before_anything_starts(tmp_path: Path,
                                                             script: Path) -> None:  # fmt: skip
    command = [sys.executable, str(script)]
    with pytest.raises(CockpitError, match="--nproc 2 and torchrun's --nproc-per-node 3"):
        CommandRun(["torchrun", "--nproc-per-node", "3", str(script)], nproc=2, cwd=tmp_path)
    with pytest.raises(CockpitError, match="at most"):
        CommandRun(command, nproc=100_000, cwd=tmp_path)
    odd = tmp_path / "-odd.py"
    odd.write_text("")
    with pytest.raises(CockpitError, match="give another with --job NAME"):
        CommandRun([sys.executable, str(odd)], cwd=tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_run_without_a_command_is_one_clear_error(tmp_path: Path) -> None:
    line = one_clear_error(run("cockpit", "run", "--headless", "1", cwd=tmp_path))
    assert line == "cockpit: run: give the command after --, e.g. `cockpit run -- python train.py`"
    line = one_clear_error(run("cockpit", "run", "--", "ls", "-l", cwd=tmp_path))
    assert "cockpit run starts a Python training script under torchrun" in line
    assert not (tmp_path / "runs").exists()


def _until(what: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_plain_job_is_steered_paused_and_resumed_from_its_checkpoint(tmp_path: Path) -> None:
    """Through the agent `cockpit run` starts: the LR scale, eval now, then a pause (a
    checkpoint, then no process) and a resume from that checkpoint, with its ↻ marker."""
    shutil.copy(ROOT / "examples" / "plain_train.py", tmp_path)
    command = [sys.executable, "plain_train.py", "--steps", "120", "--sleep", "0.05",
               "--eval-every", "1000", "--checkpoint-every", "1000"]  # fmt: skip
    with CommandRun(command, run_root=tmp_path / "r", cwd=tmp_path) as run:
        controller = run.source.controller
        progress = lambda: run.source.snapshot().progress  # noqa: E731
        _until("10 steps", lambda: (progress().step or 0) >= 10)
        controller.adjust(lr_scale=0.5)
        controller.eval_now()
        _until("an evaluation", lambda: run.source.snapshot().effect.last_val_loss is not None)
        controller.pause()
        paused = _until("the pause", lambda: progress().state == "paused" and progress())
        controller.resume()
        _until("the end", lambda: progress().state == "finished", timeout=180)
        snapshot = run.source.snapshot()
    marks = [(m.step, m.kind) for m in snapshot.effect.markers]
    adjusted = [s for s, kind in marks if kind == "adjust"]
    restarts = [s for s, kind in marks if kind == "restart"]
    assert len(adjusted) == 1 and len(restarts) == 1, marks
    # The pause's checkpoint comes after the adjustment and at most where it stopped;
    # the resume went on from it (not from 0) to the last step.
    assert adjusted[0] <= restarts[0] <= paused.step, (marks, paused.step)
    assert snapshot.progress.step == 120
    checkpoint, skipped = newest_valid(run.run_dir / "checkpoints")
    assert checkpoint is not None and checkpoint.step == 120, skipped
