"""The agent runs on each GPU host's own Python, 3.8 and later, with nothing installed
beside it (the zipapp carries only the agent). No Python 3.8 runs these tests, so the two
halves of that promise are checked apart:

- its standard-library calls exist on 3.8: `vermin` reads every agent module for the
  members, modules, keyword arguments and syntax each needs (`str.removeprefix`,
  `functools.cache`, `zoneinfo`, `zip(strict=...)` are 3.9+ and would pass every other
  test here, then fail on the host at start-up or mid-run);
- it imports with the standard library alone: every agent module is imported in a Python
  started without site-packages, so an import of an installed package outside a guard
  (the optional NVML, psutil and trainer frameworks are imported lazily) fails here.

tests/test_boundaries.py parses the agent with the 3.8 grammar as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLDEST = "3.8"


@pytest.mark.slow
def test_the_agent_calls_nothing_newer_than_python_38() -> None:
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())",
         f"-t={OLDEST}-", "--violations", "--no-tips", "--eval-annotations", "agent"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr


def test_vermin_catches_a_call_python_38_lacks(tmp_path: Path) -> None:
    """The check above can fail: the same command on a 3.9 call says so."""
    (tmp_path / "newer.py").write_text('print("job-1".removeprefix("job-"))\n')
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())",
         f"-t={OLDEST}-", "--violations", "--no-tips", str(tmp_path)],
        capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "str.removeprefix" in run.stdout


def test_every_agent_module_imports_with_the_standard_library_alone() -> None:
    # -S: no site-packages (so no pip-installed package); -E: no PYTHONPATH. The
    # working directory (sys.path[0] == "") makes `agent` importable from the checkout.
    code = (
        "import importlib, json, pkgutil, sys\n"
        "names = ['agent'] + [i.name for i in pkgutil.walk_packages(['agent'], 'agent.')\n"
        "                     if not i.name.endswith('__main__')]\n"
        "failed = {}\n"
        "for name in names:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed[name] = repr(exc)\n"
        "outside = sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "                 - {'agent', '__main__'})\n"
        "print(json.dumps({'names': len(names), 'failed': failed, 'outside': outside}))\n"
    )
    run = subprocess.run([sys.executable, "-S", "-E", "-c", code], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert found["names"] > 1 and not found["failed"] and not found["outside"], found
