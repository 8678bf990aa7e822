"""`cockpit demo`: a real job on this machine, watched through the real pipeline.

It starts the host agent as a daemon, streams its journal through the local transport
into a DuckDB recording exactly like a remote host would over SSH, and launches the
example trainer under `torchrun` (gloo, CPU) through the agent with a job spec — so the
job is controllable from the UI and recovered by the agent if it crashes or hangs. With no NVIDIA
driver the agent simulates GPUs, and every screen labels them SIM. Leaving the demo
stops everything it started (the agent stops the job it supervises). The machinery is
`cockpit.app.local_run.LocalRun`'s, which `cockpit run -- CMD…` shares.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agent.lockfile import running_daemon
from cockpit.app.local_run import RECORDING_NAME, LocalRun
from cockpit.control.jobspec import JobSpec
from cockpit.errors import CockpitError
from cockpit.store import Store, StoreError
from cockpit.store.queries import StoreReader

DEMO_JOB = "demo"
# Demo runs kept in the default place (each holds a recording and checkpoints, ~20 MB):
# enough to replay the last few, without `make demo` filling a disk over the months.
DEMO_RUNS_KEPT = 5
_STAMP = re.compile(r"\d{8}-\d{6}")


def prune_demo_runs(root: Path, keep: int = DEMO_RUNS_KEPT) -> list[Path]:
    """Remove all but the newest `keep` demo runs under `root`; return what went.

    Only directories named like a demo run's time stamp are candidates, and a run whose
    agent daemon still runs (another demo open in a second terminal) is never touched.
    A run that recorded no training step (a demo quit while it started) goes whatever
    its age: it would otherwise push a run worth replaying out of the `keep`.
    """
    if not root.is_dir():
        return []
    runs = sorted((p for p in root.iterdir() if p.is_dir() and _STAMP.fullmatch(p.name)),
                  key=lambda p: p.name, reverse=True)
    removed = []
    kept = 0
    for run in runs:
        if running_daemon(run / "agent") is not None:
            continue
        if kept < keep and _trained(run):
            kept += 1
            continue
        shutil.rmtree(run, ignore_errors=True)
        removed.append(run)
    return removed


def _trained(run: Path) -> bool:
    """Whether the run's recording holds a training step. A recording that cannot be
    read (another version's, damaged, open elsewhere) counts as trained: what cannot be
    judged is not deleted for being empty."""
    recording = run / RECORDING_NAME
    if not recording.exists():
        return False
    try:
        with Store(recording, read_only=True) as store:
            return StoreReader(store).newest_train_row() is not None
    except (StoreError, OSError):
        return True


def example_trainer() -> Path:
    """The example trainer: next to the package in a checkout, inside it when installed."""
    here = Path(__file__).resolve().parents[1]  # the cockpit package (this is cockpit/app/)
    installed = here / "_examples" / "examples" / "charlm"
    for candidate in (here.parent / "examples" / "charlm", installed):
        if (candidate / "train.py").is_file():
            return candidate
    raise CockpitError("the example trainer (examples/charlm) is missing from this install")


def nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


class DemoRun(LocalRun):
    """Everything the demo starts, as one context manager."""

    noun = "demo run"

    def __init__(self, run_root: Path | None = None, steps: int = 3000, nproc: int = 2,
                 simulate_gpus: int | None = None, fault_at: int = 0,
                 settings: Sequence[str] = ()) -> None:
        """`fault_at`: the step at which the last rank (rank 1 of the usual 2) is killed
        with SIGKILL, once, as a host's OOM killer would, so that the demo shows the
        agent recovering the job from its newest checkpoint (0: never). `settings`:
        `SECTION.KEY=VALUE` settings of the example trainer's config (`--set`), given
        after the demo's own, so they win (a smaller model for a small machine)."""
        if importlib.util.find_spec("torch") is None:
            raise CockpitError(
                "the demo trains a real model and needs torch on this machine: "
                "pip install 'training-cockpit[train]' (or run `make demo`)"
            )
        if steps < 1 or nproc < 1:
            raise CockpitError("--steps and --nproc must be at least 1")
        if simulate_gpus is not None and simulate_gpus < 0:
            raise CockpitError(f"--simulate-gpus must be 0 or more, not {simulate_gpus}")
        self.pruned: list[Path] = []  # older demo runs removed to make room for this one
        if run_root is None:
            from platformdirs import user_data_path

            demo_root = user_data_path("training-cockpit") / "demo"
            self.pruned = prune_demo_runs(demo_root, keep=DEMO_RUNS_KEPT - 1)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            run_root = demo_root / stamp
        self.steps = steps
        self.nproc = nproc
        if fault_at < 0:
            raise CockpitError(f"--fault-at must be a step >= 0 (0: never), not {fault_at}")
        self.fault_at = fault_at
        self.settings = tuple(settings)
        super().__init__(Path(run_root), (0 if nvml_available() else 2)
                         if simulate_gpus is None else simulate_gpus)

    def _data_dir(self) -> Path:
        from platformdirs import user_cache_path

        return user_cache_path("training-cockpit") / "charlm-data"

    def job_spec(self, host: str) -> JobSpec:
        """The demo job, as an operator's job spec would describe it: launched, watched
        and recovered by the agent, and controllable from the UI (pause, fork, adjust…)."""
        trainer = example_trainer()
        return JobSpec(
            name=DEMO_JOB, hosts=(host,), nproc_per_node=self.nproc,
            python=sys.executable, script=str(trainer / "train.py"),
            args=("--config", str(trainer / "config.toml"), "--max-steps", str(self.steps),
                  "--set", f"data.dir={self._data_dir()}",
                  "--set", f"fault.kill_at={self.fault_at}",
                  "--set", f"fault.kill_rank={min(1, self.nproc - 1)}",
                  *(arg for setting in self.settings for arg in ("--set", setting))),
            run_dir=str(self.run_dir), workdir=str(self.run_root),
            env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
            resume_args=("--resume", "{checkpoint}"),
            stop_grace=5.0,
        )
