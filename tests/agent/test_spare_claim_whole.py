"""A spare's claim file appears whole or not at all, and claiming one never fails the job.

Before, the claim was created (O_EXCL) and written after: a full shared dir, or a kill in
between, left an empty file, which the spare reads as "still being written" forever and
which keeps every other host from claiming that spare; the OSError went up to the job's
loop, which marked the job failed and stopped its processes. The claim also ran on the
job's thread itself, where a hung mount left the job waiting in silence."""

from __future__ import annotations

import builtins
import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job import managed, membership
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.membership import CLAIM_ABANDONED, claim_spare, read_claim, takeover_dir
from agent.job.recovery import Diagnosis
from agent.journal.journal import Journal, JournalReader
from agent.wire.causes import GPU_FAULT
from tests.harness.elastic import elastic_spec
from tests.harness.waiting import wait_for


def _spec(tmp_path: Path, host: str = "b", nnodes: str = "2:3") -> LaunchSpec:
    """Hosts a and b (a serves the rendezvous), spare c; excluded on a GPU fault."""
    return LaunchSpec(elastic_spec(tmp_path, host, spares=("c",), rendezvous_host="a",
                                   nnodes=nnodes, recovery='exclude_on = ["gpu_fault"]'))


class _Ended:
    """Host b's torchrun, ended after a GPU fault of its ranks."""

    pid = 4242
    running = False
    returncode = 1
    started_at = ended_at = None
    ended_for = None
    tail: list[str] = []

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def stop(self, grace: float = 10.0) -> int:
        raise AssertionError("nothing to stop")

    def identity(self) -> dict:
        return {"pid": self.pid}


def _job(tmp_path: Path, nnodes: str = "2:3") -> ManagedJob:
    job = ManagedJob(_spec(tmp_path, "b", nnodes), Journal(tmp_path / "state-b"))
    job.spec.prepare_dirs()
    job.supervisor = _Ended()  # type: ignore[assignment]
    job.state = "running"
    return job


def _said(job: ManagedJob) -> list[dict]:
    return [r for r in JournalReader(job.journal.state_dir).records()
            if r.get("t") == "event" and r.get("kind") == "sampler_error"]


def _gpu_fault() -> Diagnosis:
    return Diagnosis(GPU_FAULT, ["GPU XID error(s) during the attempt: 79"])


class _FullFile:
    """A file on a full filesystem: what is written never lands (ENOSPC)."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


class _FullOs:
    """`os` as agent.job.membership sees it on a full shared dir: a file is created, and
    writing to it, or syncing it, fails with ENOSPC (NFS often says so only then)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def fdopen(fd: int, *args: Any, **kwargs: Any) -> _FullFile:
        return _FullFile(os.fdopen(fd, *args, **kwargs))

    @staticmethod
    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    @staticmethod
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def _full_shared_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    def full_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 - the caller closes it
        return _FullFile(f) if any(m in mode for m in "wax+") else f

    monkeypatch.setattr(membership, "os", _FullOs())
    monkeypatch.setattr(membership, "open", full_open, raising=False)


def test_a_claim_that_cannot_be_written_leaves_no_claim_and_fails_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = _job(tmp_path)
    _full_shared_dir(monkeypatch)
    folder = takeover_dir(job.spec)
    with pytest.raises(OSError) as info:
        claim_spare(job.spec, "b", GPU_FAULT, ["a", "b"])
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in folder.iterdir()) == []  # no empty claim, no temp file
    # In the job: no spare was claimed, said with why; b cannot leave (MIN 2 without a
    # spare), so it restarts in place as any failure would: not failed, nothing stopped.
    assert job._failed(time.time(), time.time(), None, _gpu_fault()) is not None
    assert job.state == "backoff"
    (said,) = _said(job)
    assert said["msg"].startswith(
        f"job el: cannot claim a spare in {folder} (OSError: [Errno {errno.ENOSPC}]")
    assert "going on as if none were free" in said["msg"]
    assert said["data"]["dir"] == str(folder) and said["data"]["claimed"] is None
    assert sorted(p.name for p in folder.iterdir()) == []
    # Once the shared dir has room again, the spare is claimed, whole.
    monkeypatch.undo()
    job.state = "running"
    info_decision = job.membership.exclusion(_gpu_fault())
    assert info_decision is not None and info_decision[0]["spare"] == "c"
    assert read_claim(job.spec, "c")["replaced"] == "b"


def test_a_job_that_could_go_on_without_the_host_excludes_it_without_a_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = _job(tmp_path, nnodes="1:3")
    _full_shared_dir(monkeypatch)
    assert job._failed(time.time(), time.time(), None, _gpu_fault()) is None
    assert job.state == "excluded" and job.spec.hosts == ["a"]
    assert len(_said(job)) == 1
    assert list(takeover_dir(job.spec).iterdir()) == []


def test_an_empty_claim_left_by_an_older_agent_is_taken_as_abandoned(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    folder = takeover_dir(spec)
    folder.mkdir(parents=True)
    empty = folder / "c.json"
    empty.write_text("")  # created, never written: a kill or a full disk in between
    # Just made: it may still be being written (an older agent), so the spare is taken.
    assert claim_spare(spec, "b", GPU_FAULT, ["a", "b"]) is None
    assert empty.read_text() == ""
    # Older than CLAIM_ABANDONED: abandoned; the spare is claimed, the claim whole.
    old = time.time() - CLAIM_ABANDONED - 5
    os.utime(str(empty), (old, old))
    assert claim_spare(spec, "b", GPU_FAULT, ["a", "b"]) == "c"
    claim = read_claim(spec, "c")
    assert claim is not None and claim["replaced"] == "b" and claim["hosts"] == ["a", "c"]
    assert sorted(p.name for p in folder.iterdir()) == ["c.json"]  # nothing set aside left
    # A whole claim, however old, is never taken from its host.
    os.utime(str(empty), (old, old))
    assert claim_spare(spec, "a", GPU_FAULT, ["a", "b"]) is None
    assert read_claim(spec, "c")["replaced"] == "b"


def test_a_claim_on_a_hung_mount_is_made_off_the_job_thread_which_says_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hard-mounted NFS whose server went away: the claim hangs in the kernel. It is
    made on a thread of its own; the job's thread is free to journal that it waits (and
    again when the mount answered), instead of hanging in the call in silence."""
    job = _job(tmp_path)
    monkeypatch.setattr(managed, "SLOW_LOOK", 0.05)
    answer = threading.Event()
    callers: list[str] = []
    real = membership.spare_faults

    def hung(spec: LaunchSpec, spare: str) -> int:
        callers.append(threading.current_thread().name)
        answer.wait(30)
        return real(spec, spare)

    monkeypatch.setattr(membership, "spare_faults", hung)
    result: list[Any] = []
    job_thread = threading.Thread(
        target=lambda: result.append(job.membership.exclusion(_gpu_fault())),
        name="job-el", daemon=True)
    job_thread.start()
    try:
        waiting = wait_for(lambda: _said(job), 5, "the job's thread to say it waits")
    finally:
        answer.set()
    job_thread.join(10)
    assert not job_thread.is_alive()
    assert callers and all(name != "job-el" for name in callers), callers
    folder = str(takeover_dir(job.spec))
    assert f"claiming a spare in {folder} has taken" in waiting[0]["msg"]
    assert waiting[0]["data"]["answered"] is False
    said = _said(job)
    assert [e["data"]["answered"] for e in said] == [False, True], said
    (info, _decision), = result
    assert info["spare"] == "c" and read_claim(job.spec, "c")["replaced"] == "b"
