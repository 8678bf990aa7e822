"""The store's scratch dir (on /dev/shm, which is memory): a cockpit killed mid-flush
leaves its files there, and the next cockpit removes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cockpit.store.loader import SCRATCH_PREFIX, Scratch


def test_a_killed_cockpits_scratch_is_removed_by_the_next_and_nothing_else(
    tmp_path: Path,
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f"{SCRATCH_PREFIX}{int(gone.stdout)}-x1"
    dead.mkdir()
    (dead / "0.ndjson").write_bytes(b"{}\n" * 1000)  # a flush's lines, left in memory
    alive = tmp_path / f"{SCRATCH_PREFIX}{os.getppid()}-x2"  # a running process's
    alive.mkdir()
    unnamed = tmp_path / f"{SCRATCH_PREFIX}x3"  # no process in its name: left alone
    unnamed.mkdir()
    scratch = Scratch(tmp_path)
    assert not dead.exists() and alive.exists() and unnamed.exists()
    assert scratch.dir.parent == tmp_path
    assert scratch.dir.name.startswith(f"{SCRATCH_PREFIX}{os.getpid()}-")
    scratch.close()
    assert not scratch.dir.exists()
