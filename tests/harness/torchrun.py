"""Start the example trainer for real: under `torchrun` (gloo on CPU) or as one process.

Tests that need a live job (spool tailing, supervision, recovery) use `run_trainer`; it
returns at once with a `TrainerRun` whose process lives in its own process group, so a
test can SIGKILL the whole job the way a node failure would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = ROOT / "examples" / "charlm" / "train.py"

# Small and fast enough for tests on two shared cores, still the real model and loop: a
# step of the default model (2 layers of 96, 16 windows) costs a rank 90 ms of CPU, this
# one 15 ms, and it still learns (validation loss 4.8 -> under 3 in 300 steps). Paced
# (`train.pace`, 50 ms of rest a step): a rank no longer holds a core while a test waits.
FAST_SETTINGS = (
    "train.batch_size=4",
    "model.n_layer=1",
    "model.d_model=48",
    "train.log_every=10",
    "eval.windows=32",
    "data.max_bytes=1500000",
    "train.pace=0.05",
)


@dataclass
class TrainerRun:
    proc: subprocess.Popen
    run_dir: Path
    job: str
    data_dir: Path
    log_path: Path
    argv: list[str] = field(default_factory=list)

    @property
    def spool_dir(self) -> Path:
        return self.run_dir / "spool" / self.job

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def control_path(self) -> Path:
        return self.run_dir / "control" / f"{self.job}.ndjson"

    def wait(self, timeout: float = 60.0) -> int:
        """Exit code; kills the job and fails with its output if it runs past `timeout`."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"trainer still running after {timeout} s; output:\n{self.output()}"
            ) from None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole job -- torchrun and every rank -- as a crashed node would.

        torchrun starts each rank in a session of its own, so signalling torchrun's
        process group alone would leave the ranks training as orphans: every process
        of the tree is found first, then all are signalled.
        """
        if self.proc.poll() is not None:
            return
        tree = [self.proc.pid, *descendants(self.proc.pid)]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), sig)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        self.proc.wait(timeout=30)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            _wait_gone(tree[1:], timeout=30)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def records(self, t: str | None = None) -> list[dict[str, Any]]:
        """Complete spool records of the job (all ranks, all files), headers excluded."""
        return read_spool(self.spool_dir, t)

    def wait_for(self, predicate: Any, timeout: float = 60.0, poll: float = 0.2) -> Any:
        """Poll `predicate(self)` until it returns something truthy; fail if the job dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate(self)
            if found:
                return found
            if self.proc.poll() is not None:
                found = predicate(self)
                if found:
                    return found
                raise AssertionError(
                    f"trainer exited ({self.proc.returncode}) before the condition; "
                    f"output:\n{self.output()}"
                )
            time.sleep(poll)
        self.kill()
        raise AssertionError(f"condition not met within {timeout} s; output:\n{self.output()}")


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie is dead, only not yet reaped


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {[p for p in pids if _alive(p)]} survived SIGKILL")
        time.sleep(0.05)


def spool_files(spool_dir: Path) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(header, complete records) of every spool file, oldest file first.

    Files are ordered by header timestamp and part, so the records of a restarted job's
    new process come after those of the process it replaced.
    """
    files = []
    for path in spool_dir.glob("rank-*.ndjson") if spool_dir.is_dir() else ():
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # rotated away by the agent since the listing
            continue
        lines = data[: data.rfind(b"\n") + 1].splitlines()
        if lines:
            header = json.loads(lines[0])
            files.append((header, [json.loads(raw) for raw in lines[1:]]))
    return sorted(files, key=lambda f: (f[0]["ts"], f[0].get("part", 0)))


def read_spool(spool_dir: Path, t: str | None = None) -> list[dict[str, Any]]:
    """Every complete record under `spool_dir` (all ranks, all files), headers excluded."""
    return [
        record
        for _header, records in spool_files(spool_dir)
        for record in records
        if t is None or record["t"] == t
    ]


def run_trainer(
    tmp_path: Path,
    nproc: int = 2,
    steps: int = 300,
    extra_args: Sequence[str] = (),
    *,
    job: str = "test-charlm",
    run_dir: Path | None = None,
    data_dir: Path | None = None,
    torchrun: bool | None = None,
    fast: bool = True,
    env: dict[str, str] | None = None,
    log_name: str = "trainer.log",
) -> TrainerRun:
    """Start the charlm trainer with `nproc` ranks; returns without waiting.

    `torchrun` defaults to `nproc > 1`; with one process and `torchrun=False` it runs
    the script directly. `data_dir` may point at shards prepared once per session.
    """
    run_dir = run_dir or tmp_path / "run"
    data_dir = data_dir or tmp_path / "data"
    use_torchrun = nproc > 1 if torchrun is None else torchrun
    argv = [sys.executable]
    if use_torchrun:
        argv += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    elif nproc != 1:
        raise ValueError("more than one rank needs torchrun")
    argv += [str(TRAIN_SCRIPT), "--run-dir", str(run_dir), "--job", job,
             "--max-steps", str(steps), "--set", f"data.dir={data_dir}"]  # fmt: skip
    for setting in FAST_SETTINGS if fast else ():
        argv += ["--set", setting]
    argv += list(extra_args)
    full_env = dict(os.environ)
    full_env.update({
        "PYTHONPATH": str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", ""),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": full_env.get("GLOO_SOCKET_IFNAME", "lo"),
    })  # fmt: skip
    full_env.pop("COCKPIT_JOB", None)
    full_env.pop("COCKPIT_RUN_DIR", None)
    full_env.update(env or {})
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / log_name
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return TrainerRun(proc, run_dir, job, data_dir, log_path, argv)
