"""A real agent daemon driving the real example trainer under torchrun (gloo, CPU)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.journal.control_inbox import append_op
from cockpit.control.jobspec import parse_jobspec
from tests.harness.journal_tail import JournalTail

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "charlm" / "train.py"
# Small and quick on two shared cores, still the real model, data and loop (the model of
# tests.harness.torchrun.FAST_SETTINGS: a sixth of the default one's CPU per step),
# paced to 50 ms of rest a step: these tests wait on controls, not on steps, and a rank
# training flat out would take a core from the suite's other tests the whole time.
FAST = ("train.batch_size=4", "model.n_layer=1", "model.d_model=48", "train.log_every=10",
        "eval.windows=32", "data.max_bytes=1500000", "checkpoint.every=10",
        "eval.at_start=false", "eval.every=100000", "train.pace=0.05")  # fmt: skip


class AgentDaemon:
    """`cockpit-agent run` as a subprocess; ops go in through its control inbox."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._journal = JournalTail(state_dir)  # polled often: each record read once
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = open(state_dir.parent / "daemon.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--state-dir",
                                      str(state_dir), "--stop-grace", "5"], cwd=REPO, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip

    def op(self, op: str, /, *, op_id: str | None = None, **args: Any) -> dict:
        """Send one op and wait for its ack; returns the ack's data (fails if refused).
        `op_id`: the id a cockpit would give it (`BASE-HOST`); a random one by default."""
        op_id = op_id or secrets.token_hex(6)
        append_op(self.state_dir, {"op": op, "id": op_id, "_rx": time.time(), **args})
        ack = self.wait_for(lambda: self.event("control_ack", lambda e: isinstance(
            e.get("data"), dict) and e["data"].get("id") == op_id),
                            20, f"ack of {op}")  # fmt: skip
        assert ack["data"]["ok"], ack
        return ack["data"]

    def lately(self, n: int = 8) -> str:
        """The last `n` events and daemon log lines, newest last: what a timeout shows
        first (a whole list is cut off in a CI log before its end, the part that tells)."""
        events = [f"{e['kind']}: {e['msg']}" for e in self.records("event")][-n:]
        try:
            log = (self.state_dir.parent / "daemon.log").read_text(errors="replace")
        except OSError as exc:
            log = f"(no daemon log: {exc})"
        tail = log.splitlines()[-n:]
        shown, said = " | ".join(events) or "none", " | ".join(tail) or "empty"
        return f"last events: {shown}; daemon log: {said}"

    def records(self, t: str | None = None) -> list[dict]:
        return [r for r in self._journal.records() if t is None or r["t"] == t]

    def events(self, kind: str, job: str | None = None) -> list[dict]:
        return [r for r in self.records("event") if r["kind"] == kind
                and (job is None or r.get("job") == job)]  # fmt: skip

    def event(self, kind: str, where: Callable[[dict], bool] = lambda e: True) -> dict | None:
        return next((e for e in self.events(kind) if where(e)), None)

    def train(self, job: str) -> list[dict]:
        return [r for r in self.records("train") if r["job"] == job]

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"agent daemon exited ({self.proc.returncode}) while "
                                     f"waiting for {what}")  # fmt: skip
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                     + self.lately())
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def agent_daemon(tmp_path: Path) -> Iterator[AgentDaemon]:
    daemon = AgentDaemon(tmp_path / "state")
    yield daemon
    daemon.close()


@pytest.fixture(scope="session")
def charlm_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards shared by the session's jobs (the first job prepares them)."""
    return tmp_path_factory.mktemp("charlm-shards")


def charlm_spec(tmp_path: Path, data: Path, name: str = "job", steps: int = 2000,
                extra: str = "", sets: tuple[str, ...] = (), ranks: int = 2) -> dict:  # fmt: skip
    """The launch spec of a charlm job (2 ranks unless `ranks` says otherwise), written
    and parsed as an operator's TOML; `sets` are more of the trainer's `--set`
    overrides."""
    settings = [f"data.dir={data}", *FAST, *sets]
    args = ["--max-steps", str(steps)]
    for setting in settings:
        args += ["--set", setting]
    text = textwrap.dedent(f"""\
        name = {json.dumps(name)}
        hosts = ["local"]
        nproc_per_node = {ranks}
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp_path / "runs" / name))}
        stop_grace = 5
        [env]
        PYTHONPATH = {json.dumps(str(REPO))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [resume]
        args = ["--resume", "{{checkpoint}}"]
        [recovery]
        backoff = 0.2
    """) + extra
    (tmp_path / f"{name}.toml").write_text(text)
    return parse_jobspec(text, str(tmp_path / f"{name}.toml")).for_host("local")


def children(pid: int) -> list[int]:
    from agent.job.supervisor import children_of

    return children_of(pid)


def process_alive(pid: int) -> bool:
    from agent.job.supervisor import alive

    return alive(pid)
