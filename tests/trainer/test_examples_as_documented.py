"""Every command line the docs show for an example under examples/, run as written.

The lines are read from the docs themselves (getting-started, hooks, the README, the
charlm README and each example's docstring), so a line changed or added there is the
line run here; `test_every_documented_line_is_run` fails on one this module does not
know how to check. Each runs in a fresh folder holding a copy of examples/, with the
venv's `python`, `torchrun` and `cockpit` first on PATH, as a user with the venv active
types it, and must end with every step of every rank recorded, its evaluations recorded
and, where the run saves, a checkpoint the agent would resume from at its final step.

Two kinds of line cannot run verbatim in a test, and each is run as near as is real:
`cockpit run -- …` opens the interactive screen, so it runs as `cockpit run --headless
SECONDS -- …` (the same job through the same local agent, the report printed instead);
a line naming the user's own file (`--config my.toml`) gets a small such file.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.wire import checkpoints
from tests.harness.torchrun import read_spool

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXAMPLES = ROOT / "examples"
DOCS = [ROOT / "docs" / "getting-started.md", ROOT / "docs" / "hooks.md", ROOT / "README.md",
        EXAMPLES / "charlm" / "README.md"]  # fmt: skip
STARTS = ("python ", "torchrun ", "cockpit run ")
# The headless twin of an interactive `cockpit run`: the job's own end ends it.
HEADLESS = "900"
# A user's config file the charlm README names: "a subset of the keys is enough".
MY_TOML = '[train]\nmax_steps = 40\n'


def _docstring_lines(path: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()


def _candidates(lines: list[str]) -> list[str]:
    """Code lines and inline `code` spans that run an example."""
    found = []
    for line in lines:
        for text in [line.strip(), *re.findall(r"`([^`]+)`", line)]:
            text = text.strip()
            if text.startswith(STARTS) and "examples/" in text:
                found.append(" ".join(shlex.split(text, comments=True)))
    return found


def documented() -> list[str]:
    """Each distinct example command line of the docs, in the order first shown."""
    lines: list[str] = []
    for doc in DOCS:
        lines += _candidates(doc.read_text().splitlines())
    for example in [*sorted(EXAMPLES.glob("*.py")), EXAMPLES / "charlm" / "train.py"]:
        lines += _candidates(_docstring_lines(example))
    return list(dict.fromkeys(lines))


# charlm's two torchrun lines are one story: the run, then `--resume auto` after it.
CHARLM_RUN = ("torchrun --standalone --nproc-per-node 2 examples/charlm/train.py --job demo "
              "--max-steps 100")
CHARLM_RESUME = CHARLM_RUN + " --resume auto"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_")}
    env.update(PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""), HOME=str(home),
               OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")  # fmt: skip
    env.pop("PYTHONPATH", None)  # the installed project, as for a user
    return env


def _folder(tmp_path: Path) -> Path:
    """A user's folder holding the examples (and, for charlm, its data's shared cache)."""
    shutil.copytree(EXAMPLES, tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", "runs", "checkpoints"))
    (tmp_path / "my.toml").write_text(MY_TOML)
    return tmp_path


def _run(line: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = shlex.split(line)
    if argv[:2] == ["cockpit", "run"] and "--headless" not in argv[:argv.index("--")]:
        argv[2:2] = ["--headless", HEADLESS]
    done = subprocess.run(argv, cwd=cwd, env=_env(cwd), capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _ranks(line: str) -> set[int]:
    argv = shlex.split(line)
    if argv[0] != "torchrun":
        return {0}
    flag = next(a for a in argv if a.startswith("--nproc-per-node"))
    n = flag.split("=", 1)[1] if "=" in flag else argv[argv.index(flag) + 1]
    return set(range(int(n)))


def _spool(cwd: Path) -> Path:
    (spool,) = [p for p in cwd.glob("runs/*/spool/*") if p.is_dir()]
    return spool


def _steps_of(record: dict) -> int:
    steps = (record.get("extra") or {}).get("steps", 1)
    return int(steps) if isinstance(steps, (int, float)) and steps >= 1 else 1


def _check_run(line: str, cwd: Path) -> int:
    """Every rank recorded every step to the declared total, and, when the run saves,
    its final step's checkpoint is one the agent counts valid. The total."""
    spool = _spool(cwd)
    (total,) = {r["total_steps"] for r in read_spool(spool, "run") if r.get("total_steps")}
    train = read_spool(spool, "train")
    for rank in _ranks(line):
        covered: set[int] = set()  # a record covering N steps (`extra.steps`) ends at its
        for r in train:  # step (a Trainer logging every N steps)
            if r["rank"] == rank:
                covered.update(range(r["step"] - _steps_of(r) + 1, r["step"] + 1))
        steps = sorted(covered)
        assert steps == list(range(1, total + 1)), (line, rank, steps[:3], steps[-3:])
    # Each example validates as it trains: its evaluations reach the spool, at steps of
    # the run (charlm's first before any, at step 0).
    evals = [r["step"] for r in read_spool(spool, "eval")]
    assert evals and all(0 <= step <= total for step in evals), (line, evals)
    saved = [e for e in read_spool(spool, "event") if e["kind"] == "checkpoint_saved"]
    assert saved and saved[-1]["step"] == total, (line, saved[-1:])
    path = Path(saved[-1]["data"]["path"])
    assert path.is_absolute(), (line, path)  # it names the file wherever it is read
    found, why = checkpoints.inspect(path)
    assert found is not None and found.step == total, (line, why)
    return total


def _check_headless(line: str, cwd: Path, done: subprocess.CompletedProcess) -> None:
    """`cockpit run`'s report: the job, named after its script, finished at its declared
    last step (the step count the line gives, where it gives one), and the report printed
    at the end says so."""
    script = Path(next(a for a in shlex.split(line) if a.endswith(".py"))).stem
    (run_root,) = (cwd / "runs").iterdir()
    assert run_root.name.startswith(f"{script}-"), (line, run_root.name)
    report = subprocess.run([str(BIN / "cockpit"), "report", str(run_root / "recording.duckdb"),
                             "--format", "json"], capture_output=True, text=True,
                            timeout=120, check=True)  # fmt: skip
    facts = json.loads(report.stdout)
    assert facts["job"] == script, (line, facts["job"])
    assert facts["progress"]["state"] == "finished", (line, facts["progress"], done.stdout)
    total = facts["run"]["total_steps"]
    assert total and facts["progress"]["step"] == total, (line, facts["progress"])
    argv = shlex.split(line)
    for flag in ("--steps", "--max-steps"):  # plain_train's, the others'
        if flag in argv:
            assert total == int(argv[argv.index(flag) + 1]), (line, total)
    assert re.search(rf"step +{total:,} / {total:,} \(100\.0%\)", done.stdout), (line, done.stdout)
    newest, skipped = checkpoints.newest_valid(run_root / "run" / "checkpoints")
    assert newest is not None and newest.step == total, (line, skipped)


RUNNABLE = [line for line in documented() if line != CHARLM_RESUME]


def test_every_documented_line_is_run() -> None:
    """The docs show each example's way of running: alone, under torchrun, watched."""
    lines = documented()
    for script in ("plain_train.py", "hf_train.py", "lightning_train.py", "charlm/train.py"):
        shown = [line for line in lines if f"examples/{script}" in line]
        assert any(shlex.split(line)[0] == "python" for line in shown), (script, shown)
        assert any(shlex.split(line)[0] == "torchrun" for line in shown), (script, shown)
    assert CHARLM_RUN in lines and CHARLM_RESUME in lines, lines
    assert set(lines) == {*RUNNABLE, CHARLM_RESUME}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("line", RUNNABLE)
def test_the_documented_line_runs_as_shown(line: str, tmp_path: Path) -> None:
    cwd = _folder(tmp_path)
    done = _run(line, cwd)
    if line.startswith("cockpit run"):
        _check_headless(line, cwd, done)
        return
    total = _check_run(line, cwd)
    if "--config my.toml" in line:
        assert total == 40  # the user's file was read
    if line == CHARLM_RUN:
        # Then the README's next line: it continues from the newest intact checkpoint,
        # which is the last step's, so it says so and has nothing left to train.
        again = _run(CHARLM_RESUME, cwd)
        resumed = [e for e in read_spool(_spool(cwd), "event") if e["kind"] == "resumed"]
        assert [e["step"] for e in resumed] == [total], (resumed, again.stdout[-2000:])
