"""`cockpit demo`: a real job on this machine, watched through the real pipeline.

It starts the host agent as a daemon, streams its journal through the local transport
into a DuckDB recording exactly like a remote host would over SSH, and launches the
example trainer under `torchrun` (gloo, CPU) through the agent with a job spec — so the
job is controllable from the UI and recovered by the agent if it crashes or hangs. With no NVIDIA
driver the agent simulates GPUs, and every screen labels them SIM. Leaving the demo
stops everything it started (the agent stops the job it supervises).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from agent.lockfile import running_daemon
from cockpit.control.controller import Controller
from cockpit.control.jobspec import JobSpec
from cockpit.control.operations import wait_streaming
from cockpit.errors import CockpitError
from cockpit.live import LiveSession, LiveSource
from cockpit.store import Store, StoreError
from cockpit.store.queries import StoreReader
from cockpit.transport.inventory import LOCAL_ADDRESS, HostSpec

DEMO_JOB = "demo"
STOP_GRACE_S = 20.0
CONNECT_TIMEOUT_S = 60.0
# Demo runs kept in the default place (each holds a recording and checkpoints, ~20 MB):
# enough to replay the last few, without `make demo` filling a disk over the months.
DEMO_RUNS_KEPT = 5
RECORDING_NAME = "recording.duckdb"
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
    here = Path(__file__).resolve().parent
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


class DemoRun:
    """Everything the demo starts, as one context manager."""

    def __init__(self, run_root: Path | None = None, steps: int = 3000, nproc: int = 2,
                 simulate_gpus: int | None = None, fault_at: int = 0) -> None:
        """`fault_at`: the step at which the last rank (rank 1 of the usual 2) is killed
        with SIGKILL, once, as a host's OOM killer would, so that the demo shows the
        agent recovering the job from its newest checkpoint (0: never)."""
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
        self.run_root = Path(run_root).resolve()
        self.state_dir = self.run_root / "agent"
        self.run_dir = self.run_root / "run"
        self.store_path = self.run_root / RECORDING_NAME
        self.steps = steps
        self.nproc = nproc
        if fault_at < 0:
            raise CockpitError(f"--fault-at must be a step >= 0 (0: never), not {fault_at}")
        self.fault_at = fault_at
        self.simulate_gpus = (0 if nvml_available() else 2) if simulate_gpus is None \
            else simulate_gpus
        self._daemon: subprocess.Popen[bytes] | None = None
        self.session: LiveSession | None = None

    def _data_dir(self) -> Path:
        from platformdirs import user_cache_path

        return user_cache_path("training-cockpit") / "charlm-data"

    def daemon_argv(self) -> list[str]:
        return [
            sys.executable, "-m", "agent", "run",
            "--state-dir", str(self.state_dir), "--run-dir", str(self.run_dir),
            "--simulate-gpus", str(self.simulate_gpus),
            # Its own session (a ctrl-c in the terminal is the cockpit's to handle), so
            # no signal of the terminal reaches it: it ends with this process instead,
            # however that ends (a closed terminal, a kill).
            "--exit-with", str(os.getpid()),
        ]

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
                  "--set", f"fault.kill_rank={min(1, self.nproc - 1)}"),
            run_dir=str(self.run_dir), workdir=str(self.run_root),
            env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
            resume_args=("--resume", "{checkpoint}"),
            stop_grace=5.0,
        )

    def __enter__(self) -> DemoRun:
        try:
            for path in (self.state_dir, self.run_dir):
                path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CockpitError(f"--dir {self.run_root}: cannot make the demo run's folders "
                               f"there ({exc.strerror or exc}): give a folder, new or "
                               "one of an earlier demo run") from None
        log = open(self.run_root / "agent.log", "ab")
        try:
            self._daemon = subprocess.Popen(
                self.daemon_argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, cwd=self.run_root,
            )
        finally:
            log.close()
        host = HostSpec(
            name=socket.gethostname() or "local", address=LOCAL_ADDRESS,
            state_dir=str(self.state_dir), run_dirs=(str(self.run_dir),),
        )
        try:
            self.session = LiveSession([host], self.store_path).start()
            wait_streaming(self.session, [host.name], CONNECT_TIMEOUT_S)
            self._check_daemon()
            controller = Controller(self.job_spec(host.name), self.session.fleet.send)
            controller.launch()
            self.session.source.controller = controller
        except BaseException:
            if self.session is not None:
                self.session.stop()
            self._stop_daemon()
            raise
        return self

    @property
    def source(self) -> LiveSource:
        assert self.session is not None
        return self.session.source

    def record_for(self, seconds: float) -> None:
        """Record for `seconds`, or until the demo job has trained its last step: past
        its end a headless demo would only add idle samples to the recording."""
        assert self.session is not None
        self.session.record_for(seconds, done=self.finished)

    def finished(self) -> bool:
        """Whether the job ran to its end and exited cleanly (a crash it recovers from,
        or a failure, is not an end: the agent may start it again)."""
        return self.source.snapshot().progress.state == "finished"

    def __exit__(self, *exc: object) -> None:
        try:
            if self.session is not None:
                self.session.stop()
        finally:
            self._stop_daemon()

    def _check_daemon(self) -> None:
        """The agent daemon refused to start (its arguments, its state dir): its reason
        is in agent.log, which the operator would otherwise never open."""
        proc = self._daemon
        if proc is None or proc.poll() is None:
            return
        log = self.run_root / "agent.log"
        try:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        except OSError:
            tail = []
        why = "\n  ".join(tail) or "(agent.log is empty)"
        raise CockpitError(f"the demo's agent daemon exited with status {proc.returncode} "
                           f"before the job started; {log} ends:\n  {why}")

    def _stop_daemon(self) -> None:
        proc = self._daemon
        if proc is None or proc.poll() is not None:
            return
        # The daemon stops the job it supervises on SIGTERM; SIGKILL the group as a last
        # resort so the demo never leaves training processes behind.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
