"""What the multi-host end-to-end tests share: a small charlm, one agent daemon per
pretend host, the job's processes on this machine, and the store as the operator reads it.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cockpit.sessions.live import LiveSession
from tests.harness.sshd import REPO_ROOT, SshdHost
from tests.harness.waiting import wait_for
from tests.harness.workers import worker_index

# A charlm small and quick enough for several nodes on two CPU cores, paced
# (`train.pace`) so that its ranks leave the cores to the rest while a test waits.
SMALL_CHARLM = ("train.batch_size=4", "train.log_every=10", "eval.windows=16",
                "data.max_bytes=400000", "checkpoint.every=10", "eval.at_start=false",
                "eval.every=100000", "model.n_layer=1", "model.d_model=48",
                "train.pace=0.05")  # fmt: skip
# SMALL_CHARLM's model, batch and evaluation, for a `cockpit demo` in a test (the demo's
# data cache and checkpoint period stay its own): a fraction of the default's CPU a step.
SMALL_DEMO_MODEL = tuple(s for s in SMALL_CHARLM
                         if s.startswith(("model.", "train.batch_size=", "eval.windows=")))
# ... and paced as SMALL_CHARLM is, for a demo that trains while a test waits on it.
SMALL_DEMO_PACED = (*SMALL_DEMO_MODEL, "train.pace=0.05")


def demo_settings(settings: Sequence[str]) -> list[str]:
    """`cockpit demo`'s arguments for trainer `settings`."""
    return [arg for setting in settings for arg in ("--set", setting)]


# Rendezvous ports come from below the kernel's ephemeral range, in a band per worker.
PORT_BAND_START = 20_000
PORT_BAND_SIZE = 500


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port for a job's rendezvous on 127.0.0.1 that stays free until torchrun binds it.

    Port 0 would give one from the ephemeral range, which every outgoing connection of
    the tests (SSH links, agents, torchrun's own stores) also draws from: in the seconds
    before torchrun binds it, a connection could take it. So the port comes from below
    that range, from a band of its own per pytest-xdist worker (two workers never pick
    the same one), and the next port is free too (a fork of the job rendezvouses on it).
    """
    low = PORT_BAND_START + PORT_BAND_SIZE * worker_index()
    if low + PORT_BAND_SIZE > _ephemeral_low():  # no room below the range here
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    candidates = list(range(low, low + PORT_BAND_SIZE, 2))  # pairs never overlap
    random.shuffle(candidates)  # a port the last test used may still be in TIME_WAIT
    for port in candidates:
        if _bindable(port) and _bindable(port + 1):
            return port
    raise RuntimeError(f"no free pair of ports in {low}-{low + PORT_BAND_SIZE - 1}")


def start_daemon(host: SshdHost) -> subprocess.Popen:
    """The pretend host's agent daemon (one SIM GPU), logging next to its state dir."""
    log = open(host.state_dir.parent / f"{host.name}-daemon.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--state-dir", str(host.state_dir),
         "--simulate-gpus", "1", "--stop-grace", "5"],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # fmt: skip


def stop_daemon(proc: subprocess.Popen) -> None:
    """SIGTERM (the daemon stops its jobs), SIGKILL to its group if it does not end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def job_pids(job: str, under: Path) -> list[int]:
    """Processes of `job` on this machine (every pretend host): torchrun and its ranks,
    known by the job name the agent puts in their environment, and by a run dir `under`
    this test's folder, which tells them from a job of the same name in a test that runs
    beside this one."""
    name = b"COCKPIT_JOB=" + job.encode()
    root = b"COCKPIT_RUN_DIR=" + str(under).encode() + b"/"
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if name in env and any(var.startswith(root) for var in env):
            out.append(int(entry.name))
    return out


class StoreView:
    """The live store as the operator's view reads it: flushed, then plain SQL."""

    # Event kinds left out of a timeout's report (too many to read).
    quiet_kinds: tuple[str, ...] = ()

    def __init__(self, session: LiveSession, job: str) -> None:
        self.session = session
        self.job = job

    def rows(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        self.session.writer.flush()
        with self.session.store.cursor() as cur:
            return cur.execute(sql, params or []).fetchall()

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """`wait_for`, failing with the job's events (all but the quiet kinds) attached."""
        try:
            return wait_for(predicate, timeout, what, poll=0.25)
        except AssertionError as exc:
            skip = "".join(f" AND kind <> '{k}'" for k in self.quiet_kinds)
            seen = self.rows(f"SELECT host, kind, msg FROM event WHERE job = ?{skip} "
                             "ORDER BY ts", [self.job])  # fmt: skip
            raise AssertionError(f"{exc}; events: {seen}") from None
