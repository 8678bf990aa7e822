"""Shared helpers for the agent tests: a spool writer that follows the Reporter's
contract, and real `cockpit-agent` subprocesses."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class SpoolWriter:
    """Writes `RUN_DIR/spool/JOB/rank-R.<file_id>.ndjson` exactly as the contract says."""

    def __init__(self, run_dir: Path, job: str, rank: int) -> None:
        self.dir = run_dir / "spool" / job
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job, self.rank = job, rank
        self.path: Path | None = None
        self.file_id = ""

    def new_file(self, ts: float | None = None) -> Path:
        self.file_id = secrets.token_hex(8)
        self.path = self.dir / f"rank-{self.rank}.{self.file_id}.ndjson"
        header = {"t": "spool", "v": 1, "file_id": self.file_id, "job": self.job,
                  "rank": self.rank, "pid": os.getpid(), "ts": ts or time.time()}
        self.raw(json.dumps(header) + "\n")
        return self.path

    def raw(self, text: str) -> None:
        assert self.path is not None
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)

    def train(self, step: int, **extra: object) -> None:
        record = {"t": "train", "job": self.job, "rank": self.rank, "step": step,
                  "loss": 1.0 / (step + 1), "step_time": 0.01, "ts": time.time(), **extra}
        self.raw(json.dumps(record) + "\n")


def agent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent", *args]


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Proc:
    """A `cockpit-agent` subprocess that is always reaped, killed if need be."""

    def __init__(self, *args: str, stdin: int | None = subprocess.DEVNULL) -> None:
        self.popen = subprocess.Popen(agent_cmd(*args), cwd=REPO, env=agent_env(),
                                      stdin=stdin, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)

    def kill9(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def close(self) -> None:
        """SIGTERM first: a daemon then stops the job it started (its stop grace), where
        a SIGKILL would leave the job training on as an orphan; SIGKILL if it hangs."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def procs() -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def start(*args: str, stdin: int | None = subprocess.DEVNULL) -> Proc:
        proc = Proc(*args, stdin=stdin)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def dump_journal(state_dir: Path, after: int = 0) -> list[dict]:
    from agent.journal.journal import JournalReader

    return list(JournalReader(state_dir).records(after))
