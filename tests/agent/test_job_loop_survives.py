"""The job's thread outlives an unexpected error in one of its steps: a look at the
attempt, a restart after a failure, an operation. The error is journaled (once per step
and kind of error, however often it recurs), the looks back off, and the trainer that was
healthy goes on: the job is not marked failed, and its processes are not stopped. Before,
any exception but an operation's OSError ended the loop, the job was marked failed, and
the loop's `finally` stopped the trainer."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job import managed
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.journal.journal import Journal, JournalReader
from agent.wire import checkpoints
from tests.harness.waiting import wait_for


class _Torchrun:
    """The attempt's torchrun as the job's thread sees it; its first `fail_looks` looks
    at the ranks raise, as a bug in one look would."""

    pid = 4242
    started_at = ended_at = None

    def __init__(self, fail_looks: int = 0, returncode: int | None = None) -> None:
        self.fail_looks = fail_looks
        self.returncode = returncode
        self.running = returncode is None
        self.ended_for: str | None = None
        self.stops: list[float] = []
        self.looks: list[float] = []
        self.tail: list[str] = []

    def rank_pids(self) -> dict[int, int | None]:
        self.looks.append(time.monotonic())
        if len(self.looks) <= self.fail_looks:
            raise RuntimeError(f"a bug in look {len(self.looks)}")
        return {}

    def stop(self, grace: float = 10.0) -> int | None:
        self.stops.append(grace)
        self.running = False
        self.returncode = -15
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def tree_pids(self) -> list[int]:
        return [self.pid] if self.running else []

    def pid_ranks(self) -> dict[int, int | None]:
        return {}

    def signal_tree(self, sig: int, pids: Any = None) -> None:
        pass

    def identity(self) -> dict:
        return {"pid": self.pid}


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sup: _Torchrun,
         launched: list[str] | None = None) -> ManagedJob:
    """A one-host job whose attempt is `sup`; its launches are recorded in `launched` (a
    recovery's gets a healthy torchrun), not run. Looks every 10 ms, backs off from 20
    ms up to 160 ms."""
    spec = LaunchSpec({"name": "solo", "script": "train.py", "hosts": ["a"], "host": "a",
                       "run_dir": str(tmp_path / "shared"), "stop_grace": 1,
                       "recovery": {"backoff": 0.01, "backoff_max": 0.01}})
    job = ManagedJob(spec, Journal(tmp_path / "state"))
    job.spec.prepare_dirs()
    job.supervisor = sup  # type: ignore[assignment]
    job.state = "running"
    record = launched if launched is not None else []

    def launch(checkpoint: Any, reason: str = "launch") -> None:
        record.append(reason)
        if reason == "recovery":
            job.supervisor = _Torchrun()  # type: ignore[assignment]
            job.state = "running"

    monkeypatch.setattr(job, "launch", launch)
    monkeypatch.setattr(managed, "WATCH", 0.01)
    job.LOOP_BACKOFF, job.LOOP_BACKOFF_MAX = 0.02, 0.16  # type: ignore[misc]
    return job


def _start(job: ManagedJob) -> threading.Thread:
    thread = threading.Thread(target=job._run, args=(False, None), daemon=True)
    thread.start()
    return thread


def _close(job: ManagedJob, thread: threading.Thread) -> None:
    job._closing.set()
    job._commands.put(("close", {}))
    thread.join(5)
    assert not thread.is_alive()


def _said(job: ManagedJob) -> list[dict]:
    return [r for r in JournalReader(job.journal.state_dir).records()
            if r.get("t") == "event" and r.get("kind") == "sampler_error"]


def test_an_error_in_one_look_is_said_and_the_job_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sup = _Torchrun(fail_looks=1)
    job = _job(tmp_path, monkeypatch, sup)
    looks = []
    real_watch = job._watch

    def watch() -> float | None:
        looks.append(time.monotonic())
        return real_watch()

    monkeypatch.setattr(job, "_watch", watch)
    thread = _start(job)
    wait_for(lambda: len(sup.looks) >= 2 and len(looks) >= 5, 10, "more looks after the error")
    assert thread.is_alive() and job.state == "running"
    assert sup.stops == [] and sup.running  # the trainer was left alone
    (said,) = _said(job)
    assert said["data"]["doing"] == "watching its attempt"
    assert said["data"]["error"] == "RuntimeError: a bug in look 1"
    assert said["data"]["where"].endswith("in rank_pids")
    assert said["data"]["job_state"] == "running" and said["data"]["repeats"] == 0
    assert said["msg"].startswith("job solo: watching its attempt failed: RuntimeError: a "
                                  "bug in look 1; the job goes on as it was (running)")
    _close(job, thread)


def test_an_error_in_every_look_is_said_once_and_the_looks_back_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sup = _Torchrun(fail_looks=10**6)
    job = _job(tmp_path, monkeypatch, sup)
    thread = _start(job)
    time.sleep(1.5)
    looks = list(sup.looks)
    assert thread.is_alive() and job.state == "running" and sup.stops == []
    # Every 10 ms without the backoff (about 150 looks); 20, 40, 80, then 160 ms with it.
    assert 5 <= len(looks) <= 20, len(looks)
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert gaps[-1] >= 0.16 and gaps[0] < gaps[-1], gaps  # growing, up to the bound
    said = _said(job)
    assert len(said) == 1, said  # the same error, recurring, is not said again
    # Said again, with its count, once LOOP_REPORT_EVERY has passed since.
    job.LOOP_REPORT_EVERY = 0.3  # type: ignore[misc]
    wait_for(lambda: len(_said(job)) >= 2, 5, "the error said again")
    again = _said(job)[1]
    assert again["data"]["repeats"] >= 1
    assert "more time(s) since it was last said" in again["msg"]
    # An operation still gets carried out while the looks back off.
    job.request("stop")
    wait_for(lambda: job.state == "stopped", 5, "the stop")
    assert sup.stops == [1.0]
    _close(job, thread)


def test_a_restart_that_raises_stays_due_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    launched: list[str] = []
    job = _job(tmp_path, monkeypatch, _Torchrun(returncode=1), launched)
    calls = []

    def newest_valid(directory: Path) -> tuple:
        calls.append(directory)
        if len(calls) == 1:
            raise RuntimeError("a bug in the checkpoint look")
        return None, []

    monkeypatch.setattr(checkpoints, "newest_valid", newest_valid)
    thread = _start(job)
    wait_for(lambda: "recovery" in launched, 10, "the restart")
    assert job.state == "running" and launched.count("recovery") == 1
    (said,) = _said(job)
    assert said["data"]["doing"] == "restarting after a failure"
    assert said["data"]["job_state"] == "backoff"
    _close(job, thread)


def test_an_operation_that_raises_is_said_and_the_job_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sup = _Torchrun()
    job = _job(tmp_path, monkeypatch, sup)

    def thaw(why: str) -> None:
        raise KeyError("freeze_until")

    monkeypatch.setattr(job, "_thaw", thaw)
    job.state = "frozen"
    thread = _start(job)
    job._commands.put(("thaw", {}))
    wait_for(lambda: _said(job), 5, "the failed thaw said")
    (said,) = _said(job)
    assert said["data"]["doing"] == "carrying out the operator's thaw"
    assert "KeyError" in said["data"]["error"]
    time.sleep(0.2)
    assert thread.is_alive() and job.state == "frozen" and sup.stops == []
    _close(job, thread)
