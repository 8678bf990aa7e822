"""A job spec the code cannot start from, and operations on a job waiting to restart.

The classification cases are what real torchrun (2.x) printed for each mistake; the
end-to-end ones run the agent daemon over real torchrun with tiny scripts.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.job.recovery import USER_CODE, RecoveryPolicy, classify
from agent.journal.control_inbox import append_op
from tests.harness.waiting import wait_for

from .conftest import REPO, dump_journal

ROOT_CAUSE = """\
E1201 01:09:01.736000 10585 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: {code}) local_rank: 0 (pid: 10591) of binary: /venv/bin/python
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, \
in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_01:09:01
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 10591)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
MISSING = "/work/main/examples/charlm/nope.py"
NO_SCRIPT = f"/venv/bin/python: can't open file '{MISSING}': [Errno 2] No such file or directory"
NO_MODULE = ("/venv/bin/python: Error while finding module specification for 'pkg.train' "
             "(ModuleNotFoundError: No module named 'pkg')")
NO_TORCH = ("/usr/bin/python3: Error while finding module specification for "
            "'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')")
NO_COMPILE = '  File "/src/train.py", line 7\n    def (\n        ^\nSyntaxError: invalid syntax'
BAD_ARGS = ("usage: train.py [-h] [--steps STEPS]\n"
            "train.py: error: unrecognized arguments: --bogus")
REFUSED = ("[rank0]: charlm: error: --set nosuch.key=1: unknown setting 'nosuch.key'; "
           "known: data.max_bytes, train.max_steps")
NO_PYTHON = "/opt/venv/bin/python: line 2: /gone/bin/python3: No such file or directory"
NO_IMPORT = ('Traceback (most recent call last):\n  File "/src/train.py", line 1, in '
             "<module>\n    import nosuchmod\nModuleNotFoundError: No module named 'nosuchmod'")

# case: (what the job printed, the failed rank's exit code in torchrun's Root Cause block
# (None: no block, torchrun itself failed), torchrun's exit code, where, what the hint names)
SPEC_MISTAKES = {
    "missing script": (NO_SCRIPT + "\n" + NO_SCRIPT, 2, 1, {"file": MISSING, "rank": 0},
                       MISSING),
    "missing module": (NO_MODULE, 1, 1, {"rank": 0}, "pkg.train"),
    "script does not compile": (NO_COMPILE, 1, 1, {"file": "/src/train.py", "rank": 0},
                                "/src/train.py"),
    "script rejects its args": (BAD_ARGS, 2, 1, {"rank": 0}, "--bogus"),
    "trainer refuses its config": (REFUSED, 2, 1, {"rank": 0}, "nosuch.key"),
    "python without torch": (NO_TORCH, None, 1, {}, "No module named 'torch'"),
    "python not found": (NO_PYTHON, None, 127, {}, "exit code 127"),
    "import in the script": (NO_IMPORT, 1, 1, {}, "No module named 'nosuchmod'"),
}


@pytest.mark.parametrize("case", list(SPEC_MISTAKES))
def test_a_spec_the_code_cannot_start_from_is_the_users_error_and_stops_retrying(
    case: str
) -> None:
    printed, rank_exit, returncode, where, named = SPEC_MISTAKES[case]
    output = printed + "\n" + ROOT_CAUSE.format(code=rank_exit) if rank_exit else printed
    diagnosis = classify(returncode, output.splitlines())
    assert diagnosis.cause == USER_CODE, diagnosis.as_dict()
    assert diagnosis.where == where
    assert named in diagnosis.hint and "launch again" in diagnosis.hint
    policy = RecoveryPolicy(restart_budget=10, backoff=2.0)
    assert policy.decide(diagnosis).retry is True
    again = classify(returncode, output.splitlines())
    stop = policy.decide(again)
    assert stop.retry is False and "repeated 2 times" in stop.reason
    assert named in (stop.hint or "")


def test_a_trainer_log_line_about_a_module_does_not_hide_the_real_cause() -> None:
    tail = ["Warning: No module named 'apex'",
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"]
    assert classify(1, tail).cause == "oom"
    # Nor does a library's "PROG: error:" line, with or without a traceback after it.
    for cause in ("[rank0]: torch.OutOfMemoryError: CUDA out of memory",
                  'Traceback (most recent call last):\n  File "t.py", line 3\n'
                  "ValueError: bad shape"):
        tail = ["[rank0]: urllib3: error: retrying in 2 s", *cause.splitlines()]
        assert classify(1, tail).cause != USER_CODE or "refused" not in classify(
            1, tail).hint, cause


# -- end to end: the daemon, real torchrun, tiny scripts -------------------------------

FAILS = "import sys\nprint('no luck', file=sys.stderr)\nsys.exit(3)\n"
BACKOFF = 4.0  # s: long enough for an op to arrive while the job waits to restart


def _spec(tmp_path: Path, name: str, script: Path, nproc: int = 1,
          backoff: float = BACKOFF) -> dict:  # fmt: skip
    return {"name": name, "python": sys.executable, "script": str(script),
            "nproc_per_node": nproc, "run_dir": str(tmp_path / "runs" / name),
            "env": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, "stop_grace": 2,
            "recovery": {"restart_budget": 5, "backoff": backoff, "backoff_max": backoff}}


def _op(state: Path, op: str, **args: object) -> dict:
    """One control op through the daemon's inbox; its ack's data."""
    op_id = secrets.token_hex(6)
    append_op(state, {"op": op, "id": op_id, "_rx": time.time(), **args})
    return wait_for(lambda: next((r["data"] for r in _events(state, "control_ack")
                                  if r["data"]["id"] == op_id), None), 20, f"ack of {op}")


def _events(state: Path, kind: str, job: str | None = None) -> list[dict]:
    if not (state / "journal_id").exists():
        return []
    return [r for r in dump_journal(state) if r["t"] == "event" and r["kind"] == kind
            and (job is None or r.get("job") == job)]  # fmt: skip


def _wait_events(state: Path, kind: str, job: str, count: int = 1) -> list[dict]:
    wait_for(lambda: len(_events(state, kind, job)) >= count, 60, f"{count} {kind} of {job}")
    return _events(state, kind, job)


@pytest.fixture
def daemon(tmp_path: Path, procs: Callable) -> Path:
    pytest.importorskip("torch")  # the agent starts every attempt with torchrun
    state = tmp_path / "state"
    procs("run", "--state-dir", str(state), "--stop-grace", "2")
    return state


def _job_state(state: Path, job: str) -> str:
    return next(j["state"] for j in _op(state, "jobs")["jobs"] if j["job"] == job)


@pytest.mark.slow
@pytest.mark.timeout(120)
class TestUnderTheAgent:
    """The daemon with real torchrun: launches go through its control inbox."""

    def test_missing_script_stops_on_its_second_failure_with_an_alert_naming_it(
        self, tmp_path: Path, daemon: Path
    ) -> None:
        missing = tmp_path / "nope.py"
        _op(daemon, "launch", spec=_spec(tmp_path, "nope", missing, nproc=2, backoff=0.2))
        alert = wait_for(lambda: next((r for r in dump_journal(daemon) if r["t"] == "alert"
                                       and r["code"] == "recovery_stopped"), None), 60,
                         "recovery to stop")  # fmt: skip
        interruptions = _events(daemon, "interruption", "nope")
        assert [i["data"]["cause"] for i in interruptions] == [USER_CODE, USER_CODE]
        assert [i["data"]["decision"]["retry"] for i in interruptions] == [True, False]
        assert f"can't open file '{missing}'" in interruptions[0]["data"]["evidence"][0]
        assert alert["kind"] == "parameter" and alert["severity"] == "critical"
        assert str(missing) in alert["hint"] and alert["where"]["file"] == str(missing)
        assert len(_events(daemon, "job_started", "nope")) == 2
        assert _job_state(daemon, "nope") == "failed"

    def test_a_launch_that_cannot_start_ends_the_jobs_lifecycle_as_failed(
        self, tmp_path: Path, daemon: Path
    ) -> None:
        spec = {**_spec(tmp_path, "nopython", tmp_path / "t.py"),
                "python": str(tmp_path / "gone" / "python")}
        _op(daemon, "launch", spec=spec)
        (failed,) = _wait_events(daemon, "interruption", "nopython")
        assert failed["data"]["cause"] == "launch_failed"
        assert failed["data"]["decision"]["retry"] is False
        assert "could not start" in failed["msg"]
        alerts = [r for r in dump_journal(daemon) if r["t"] == "alert"
                  and r["code"] == "launch_failed"]  # fmt: skip
        assert alerts and alerts[0]["severity"] == "critical"
        assert _job_state(daemon, "nopython") == "failed"

    def test_stop_while_waiting_to_restart_ends_the_job_as_a_stop_of_a_running_one_does(
        self, tmp_path: Path, daemon: Path
    ) -> None:
        crash, ack = _while_waiting_to_restart(tmp_path, daemon, "waits", "stop")
        assert ack["ok"], ack
        (process_exit, stopped) = _wait_events(daemon, "job_exited", "waits", 2)
        assert stopped["seq"] > max(r["seq"] for r in _events(daemon, "control_ack")
                                    if r["data"]["id"] == ack["id"])  # fmt: skip
        # The same event as a stopped process's: the cockpit's lifecycle ends there, and
        # reads it as a stop (not as the clean end the last exit code might suggest).
        assert stopped["data"].keys() == {*process_exit["data"].keys(), "ended_for"}
        assert stopped["data"]["ended_for"] == "stop"
        assert stopped["data"]["pid"] == process_exit["data"]["pid"]
        assert stopped["data"]["returncode"] == process_exit["data"]["returncode"] == 1
        assert "restart is cancelled" in stopped["msg"]
        assert _job_state(daemon, "waits") == "stopped"
        _no_restart_after(daemon, "waits", crash)
        assert _job_state(daemon, "waits") == "stopped"

    def test_pause_while_waiting_to_restart_ends_the_job_paused_and_freeze_is_refused(
        self, tmp_path: Path, daemon: Path
    ) -> None:
        crash, freeze = _while_waiting_to_restart(tmp_path, daemon, "held", "pause",
                                                  freeze=True)
        assert freeze["ok"] is False and "no process to freeze" in freeze["error"]
        ack = _op(daemon, "pause", job="held")
        assert ack["ok"] and ack["state"] == "backoff", ack
        (paused,) = _wait_events(daemon, "pause", "held")
        data = paused["data"]
        assert data["ok"] is True and data["restart_cancelled"] is True
        assert data["checkpoint"] is None and data["step"] == 0  # a resume starts afresh
        assert _job_state(daemon, "held") == "paused"
        _no_restart_after(daemon, "held", crash)
        # No process reads the knob now: the ack says when it takes effect, not "done".
        adjust = _op(daemon, "adjust", job="held", knobs={"lr_scale": 0.5})
        assert adjust["ok"] and adjust["applies_at"] == "resume", adjust
        (said,) = [r["msg"] for r in _events(daemon, "control_ack", "held")
                   if r["data"]["id"] == adjust["id"]]
        assert said == "control op adjust (lr_scale=0.5) stored: applies when the job resumes"
        # Stopped while paused: no process to end, and still the lifecycle's end.
        _op(daemon, "stop", job="held")
        (_process_exit, stopped) = _wait_events(daemon, "job_exited", "held", 2)
        assert "(it was paused)" in stopped["msg"]
        assert _job_state(daemon, "held") == "stopped"


def _while_waiting_to_restart(tmp_path: Path, state: Path, job: str, op: str,
                              **args: object) -> tuple[dict, dict]:  # fmt: skip
    """Launch a job that fails at once and send `op` while it waits out the backoff;
    the interruption and the op's ack."""
    script = tmp_path / "fails.py"
    script.write_text(FAILS)
    _op(state, "launch", spec=_spec(tmp_path, job, script))
    (crash,) = _wait_events(state, "interruption", job)
    assert crash["data"]["decision"]["retry"] is True, crash
    ack = _op(state, op, job=job, **args)
    assert ack.get("state", "backoff") == "backoff", ack  # refusals carry no state
    return crash, ack


def _no_restart_after(state: Path, job: str, crash: dict) -> None:
    """Past the moment the cancelled restart was due, nothing started the job again."""
    due = crash["data"]["detected_at"] + crash["data"]["decision"]["delay"]
    time.sleep(max(0.0, due + 1.5 - time.time()))
    assert len(_events(state, "job_started", job)) == 1
