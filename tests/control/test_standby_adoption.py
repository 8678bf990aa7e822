"""A spare waiting in standby outlives its agent: a new agent adopts the standby and
takes up a claim made while no agent was running. No torchrun: the launch a takeover
starts is recorded instead of run (the takeover end to end is test_scale_e2e.py)."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from agent import jobstate
from agent.job import ManagedJob
from agent.journal import Journal, JournalReader
from agent.launch import LaunchSpec
from agent.membership import claim_spare
from cockpit.control.jobspec import parse_jobspec

NAME = "el"


def spare_spec(tmp_path: Path) -> dict:
    text = textwrap.dedent(f"""\
        name = "{NAME}"
        hosts = ["a", "b"]
        spares = ["c"]
        nnodes = "2:3"
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(tmp_path / "train.py"))}
        run_dir = {json.dumps(str(tmp_path / "shared" / NAME))}
        [resume]
        newest_args = ["--resume", "auto"]
        [rendezvous]
        endpoint = "127.0.0.1:29999"
        host = "a"
        [recovery]
        exclude_on = ["gpu_fault"]
    """)
    (tmp_path / "train.py").write_text("")
    return parse_jobspec(text, str(tmp_path / "job.toml")).for_host("c")


def wait_for(what: str, check: Callable[[], object], timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_standby_spare_is_adopted_and_takes_up_a_claim_made_meanwhile(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    spec = spare_spec(tmp_path)
    first = ManagedJob(LaunchSpec(spec), journal)
    first.start(standby=True)
    saved_path = jobstate.path(state, NAME)
    saved = wait_for("the standby to be saved", lambda: (
        s := jobstate.read(saved_path)) and s["state"] == "standby" and s)
    assert isinstance(saved, dict) and saved["standby_since"] > 0
    # The agent dies (as with kill -9: nothing more is saved) ...
    first._closing.set()
    first._commands.put(("close", {}))
    first._thread.join(5)  # type: ignore[union-attr]
    # ... and, while none runs, host b's agent excludes b and claims the spare.
    assert claim_spare(LaunchSpec(spec), "b", "gpu_fault", ["a", "b"]) == "c"

    second = ManagedJob(LaunchSpec(saved["spec"]), journal, saved.get("overrides"))
    launched: list[str] = []
    second._launch = lambda checkpoint, reason="launch": launched.append(reason)  # type: ignore[method-assign]
    second.adopt(saved)
    wait_for("the takeover", lambda: launched)
    assert launched == ["takeover"]
    second._closing.set()
    second._commands.put(("close", {}))
    events = [r for r in JournalReader(state).records(0) if r.get("t") == "event"]
    adopted = [e for e in events if e["kind"] == "job_adopted"]
    assert adopted and "still in standby" in adopted[0]["msg"]
    takeover = [e for e in events if e["kind"] == "takeover"]
    assert takeover and takeover[0]["data"]["replaced"] == "b"


def test_a_claim_from_before_the_standby_is_not_taken_up_after_adoption(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    spec = spare_spec(tmp_path)
    assert claim_spare(LaunchSpec(spec), "b", "gpu_fault", ["a", "b"]) == "c"  # stale
    time.sleep(0.01)
    first = ManagedJob(LaunchSpec(spec), journal)
    first.start(standby=True)
    saved = wait_for("the standby to be saved", lambda: (
        s := jobstate.read(jobstate.path(state, NAME))) and s["state"] == "standby" and s)
    first._closing.set()
    first._commands.put(("close", {}))
    first._thread.join(5)  # type: ignore[union-attr]
    second = ManagedJob(LaunchSpec(saved["spec"]), journal, saved.get("overrides"))  # type: ignore[index]
    launched: list[str] = []
    second._launch = lambda checkpoint, reason="launch": launched.append(reason)  # type: ignore[method-assign]
    second.adopt(saved)  # type: ignore[arg-type]
    time.sleep(1.5)  # three looks at the claims
    second._closing.set()
    second._commands.put(("close", {}))
    assert launched == [] and second.state == "standby"
