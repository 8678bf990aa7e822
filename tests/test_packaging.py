"""The wheel, installed non-editable, finds its themes and the demo's trainer.

`CSS_PATH` and friends resolve relative to modules, and top-level folders are easy to
forget in a wheel: build the real wheel and import from the unpacked copy alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def unpacked_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    site = out / "site"
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(site)
    return site


def _run_in(site: Path, code: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


@pytest.mark.slow
def test_installed_copy_finds_themes_and_example_trainer(unpacked_wheel: Path,
                                                          tmp_path: Path) -> None:
    out = _run_in(unpacked_wheel, (
        "import cockpit, agent\n"
        "from cockpit.ui.themes import themes_dir, load_themes\n"
        "from cockpit.app.demo import example_trainer\n"
        "print(cockpit.__file__); print(agent.__file__)\n"
        "import json; print(themes_dir()); print(json.dumps(sorted(load_themes().names())))\n"
        "print(example_trainer())\n"
    ), cwd=tmp_path)
    lines = out.splitlines()
    for line in lines[:3] + lines[4:]:
        assert line.startswith(str(unpacked_wheel)), f"{line} is not from the installed copy"
    assert {"dark", "light", "high-contrast"} <= set(json.loads(lines[3]))
    assert Path(lines[4], "train.py").is_file()


@pytest.mark.slow
def test_installed_example_trainer_imports_its_modules(unpacked_wheel: Path,
                                                       tmp_path: Path) -> None:
    trainer = unpacked_wheel / "cockpit" / "_examples" / "examples" / "charlm" / "train.py"
    env = {**os.environ, "PYTHONPATH": str(unpacked_wheel)}
    done = subprocess.run([sys.executable, str(trainer), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--resume" in done.stdout
