"""What a failure is named after: an XID counts as a GPU fault only when it is a hardware
XID of the job's own GPUs; a DataLoader worker the host killed is no bug of the code; an
operator's start gives the job a fresh restart budget; a hang on a GPU that raised a
hardware XID is that GPU's fault. (Before: any XID of the host, an application's own or
another job's, made any failure a GPU fault; a killed loader worker read as `user_code`;
a relaunch kept counting the restarts and repeats of the run before; a hang ignored the
attempt's XIDs.)"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent.job.gpu_history import APP_XIDS
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.progress import Progress
from agent.job.recovery import Diagnosis, HangDetector, RecoveryPolicy, classify
from agent.journal.journal import Journal, JournalReader
from agent.wire.causes import GPU_FAULT, HANG, KILLED, OOM, UNKNOWN, USER_CODE

ILLEGAL_ACCESS = ["[rank0]:Traceback (most recent call last):",
                  '[rank0]:  File "train.py", line 10, in <module>',
                  "[rank0]:RuntimeError: CUDA error: an illegal memory access was encountered"]
SIGKILLED = ["Root Cause (first observed failure):", "[0]:", "  time      : x",
             "  host      : h", "  rank      : 3 (local_rank: 3)",
             "  exitcode  : -9 (pid: 1234)", "  error_file: <N/A>",
             "  traceback : Signal 9 (SIGKILL) received by PID 1234", "====="]


def test_an_application_xid_leaves_the_traceback_or_signal_the_cause() -> None:
    assert {13, 31, 43, 45} == APP_XIDS
    bug = classify(1, ILLEGAL_ACCESS, None, {"xid": [31]})
    assert bug.cause == USER_CODE, bug.as_dict()
    assert any("31" in line and "application" in line for line in bug.evidence)
    killed = classify(1, SIGKILLED, None, {"xid": [45]})
    assert killed.cause == KILLED and killed.where == {"rank": 3}, killed.as_dict()
    # A hardware XID of the job's own GPUs still names the cause.
    fault = classify(1, ILLEGAL_ACCESS, None, {"xid": [79, 45]})
    assert fault.cause == GPU_FAULT and "79" in fault.evidence[0], fault.as_dict()


def test_an_xid_on_a_gpu_not_known_to_be_the_jobs_does_not_override_the_output() -> None:
    bug = classify(1, ILLEGAL_ACCESS, None, {"xid": [], "xid_unsure": [79]})
    assert bug.cause == USER_CODE and any("79" in line for line in bug.evidence)
    assert classify(1, SIGKILLED, None, {"xid_unsure": [79]}).cause == KILLED
    # Nothing else names a cause: the host's GPU fault does, said as not known the job's.
    silent = classify(3, ["bye"], None, {"xid_unsure": [79]})
    assert silent.cause == GPU_FAULT and "not known to be the job's" in silent.evidence[0]
    assert classify(3, ["bye"], None, {"xid_unsure": [43]}).cause == UNKNOWN


def test_the_job_counts_the_xids_of_its_own_gpus_only() -> None:
    progress = Progress(HangDetector())
    progress.note_xid(79, 2, [999])  # its GPUs not yet known: kept, not known its own
    progress.note_gpus([0])
    progress.note_xid(79, 1, [999])  # another process's GPU: not the job's
    progress.note_xid(48, 1, [])  # nothing listed on it: cannot tell
    progress.note_xid(79, 0, [os.getpid()])
    assert progress.telemetry() == {"xid": [79], "xid_unsure": [79, 48]}


def test_a_managed_job_knows_its_gpus_from_nvmls_process_lists(tmp_path: Path) -> None:
    job = ManagedJob(LaunchSpec(_spec(tmp_path)), Journal(tmp_path / "state"))
    job.supervisor = _Torchrun()  # type: ignore[assignment]
    other = os.getppid() if os.getpgid(os.getppid()) != os.getpgrp() else 1
    job.note_gpus({0: [other], 1: [os.getpid()]})
    job.note_xid(0, 79, [other])  # another job's GPU
    assert job.progress.telemetry() == {"xid": [], "xid_unsure": []}
    job.note_xid(1, 79, [os.getpid()])
    d = classify(1, ILLEGAL_ACCESS, None, job.progress.telemetry())
    assert d.cause == GPU_FAULT


def test_a_dataloader_worker_killed_by_the_host_is_no_bug_of_the_code() -> None:
    tail = ["[rank0]:Traceback (most recent call last):",
            '[rank0]:  File "/x/torch/utils/data/dataloader.py", line 1133, in _try_get_data',
            "[rank0]:RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly",
            "[rank0]:RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ",
            "Root Cause (first observed failure):", "[0]:", "  time      : x",
            "  host      : h", "  rank      : 0 (local_rank: 0)",
            "  exitcode  : 1 (pid: 1200)", "  error_file: <N/A>", "  traceback : n/a",
            "====="]
    d = classify(1, tail)
    assert d.cause == KILLED and d.where == {"rank": 0}, d.as_dict()
    assert "OOM killer" in d.hint and "num_workers" in d.hint
    shm = classify(1, ["[rank2]:RuntimeError: DataLoader worker (pid 77) is killed by signal: "
                       "Bus error. It is possible that dataloader's workers are out of "
                       "shared memory. Please try to raise your shared memory limit."])
    assert shm.cause == KILLED and "/dev/shm" in shm.hint and shm.where == {"rank": 2}


def test_an_operators_relaunch_starts_a_fresh_restart_budget(tmp_path: Path) -> None:
    job = ManagedJob(LaunchSpec(_spec(tmp_path, restart_budget=3)),
                     Journal(tmp_path / "state"))
    job._started_by_operator("launch-1")
    t0 = time.time() - 40000
    decisions = [job.decide_restart(Diagnosis(KILLED, ["rank 0 killed by SIGKILL"]),
                                    t0 + 7200 * i) for i in range(4)]
    assert [d.retry for d in decisions] == [True, True, True, False]
    assert job.decide_restart(Diagnosis(OOM, ["CUDA out of memory"]), t0 + 30000).retry is False
    job._started_by_operator("relaunch-2")
    assert job.policy.restarts == 0 and job.describe()["restarts"] == 0
    after = job.decide_restart(Diagnosis(KILLED, ["rank 0 killed by SIGKILL"]), time.time())
    assert after.retry and after.reason == "restart 1 of 3", after.as_dict()
    # The same OOM as before the relaunch is its first since: no repeat yet.
    assert job.decide_restart(Diagnosis(OOM, ["CUDA out of memory"]), time.time()).retry
    policy = RecoveryPolicy(restart_budget=1)
    policy.decide(Diagnosis(OOM, []))
    policy.reset()
    assert policy.state() == {"restarts": 0, "streak": 0, "history": []}


def test_a_hang_on_a_gpu_that_raised_a_hardware_xid_is_a_gpu_fault(tmp_path: Path) -> None:
    job = ManagedJob(LaunchSpec(_spec(tmp_path)), Journal(tmp_path / "state"))
    job.spec.prepare_dirs()
    job.supervisor = _Torchrun()  # type: ignore[assignment]
    job.state = "running"
    job.progress.note_gpus([0])
    job.note_xid(0, 79, [4243])
    job._hang(time.time(), 700.0, 600.0, None, None)
    (cut,) = [r for r in JournalReader(job.journal.state_dir).records()
              if r.get("kind") == "interruption"]
    assert cut["data"]["cause"] == GPU_FAULT, cut
    assert any("79" in line for line in cut["data"]["evidence"])
    assert any("no first step" in line for line in cut["data"]["evidence"])
    # An application's XID alone leaves it a hang, in the evidence.
    job2 = ManagedJob(LaunchSpec(_spec(tmp_path / "2")), Journal(tmp_path / "state2"))
    job2.spec.prepare_dirs()
    job2.supervisor = _Torchrun()  # type: ignore[assignment]
    job2.state = "running"
    job2.progress.note_gpus([0])
    job2.note_xid(0, 43, [4243])
    job2._hang(time.time(), 700.0, 600.0, None, None)
    (cut,) = [r for r in JournalReader(job2.journal.state_dir).records()
              if r.get("kind") == "interruption"]
    assert cut["data"]["cause"] == HANG and any("43" in x for x in cut["data"]["evidence"])


def _spec(tmp_path: Path, restart_budget: int = 10) -> dict:
    return {"name": "solo", "script": "train.py", "hosts": ["a"], "host": "a",
            "run_dir": str(tmp_path / "shared"), "stop_grace": 1,
            "recovery": {"restart_budget": restart_budget, "backoff": 0.01,
                         "backoff_max": 0.01}}


class _Torchrun:
    """The attempt's torchrun as the job sees it: its process group is this test's."""

    started_at = ended_at = None

    def __init__(self) -> None:
        self.pid = os.getpgrp()
        self.running = True
        self.returncode: int | None = None
        self.tail: list[str] = []

    def rank_pids(self) -> dict[int, int | None]:
        return {}

    def pid_ranks(self) -> dict[int, int | None]:
        return {}

    def stop(self, grace: float = 10.0) -> int | None:
        self.running, self.returncode = False, -9
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def tree_pids(self) -> list[int]:
        return []

    def signal_tree(self, sig: int, pids: Any = None) -> None:
        pass

    def identity(self) -> dict:
        return {"pid": self.pid}
