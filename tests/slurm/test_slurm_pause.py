"""A pause of a Slurm job says what happened, without a cluster.

The batch script runs for real under bash; Slurm's clients are small programs on PATH
(`scancel --batch --signal=USR1` sends USR1 to that bash; `scontrol show job` says
RUNNING while it runs, then COMPLETED or FAILED with its exit status), and `srun` runs
a stand-in trainer that saves a checkpoint once `checkpoint_now` reaches the control
file, or never. The cockpit's `SlurmJob.pause` drives it through `LocalCommands`, as it
drives a login node, so the script's words, the events and the operator's line are
checked together:

- a checkpoint saved after the USR1: "checkpoint saved", the end event `ok: true` with
  its path and step, the job paused on the screen only from that event on;
- no checkpoint within `pause_timeout`: the script says so and exits
  NO_CHECKPOINT_EXIT (Slurm: FAILED), the end event `ok: false` with why, the command
  fails and the screen's control raises;
- a job still pending: cancelled, "before it started", nothing checkpointed.

The request (USR1 sent) is journaled `ok: false, pending: true`: it never reads as the
job being paused (`cockpit.analysis.lifecycle`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.lifecycle import paused, took_effect
from cockpit.app.slurm_cli import _run
from cockpit.control.controller import ControlError
from cockpit.control.jobspec import JobSpec, JobSpecError, parse_jobspec
from cockpit.control.slurm import (
    NO_CHECKPOINT_EXIT,
    OUTCOME_NONE,
    OUTCOME_SAVED,
    QueueState,
    ScriptPaths,
    SlurmJob,
    checkpoint_dir,
    control_file,
    current_file,
    launcher_of,
    marker_step,
    pause_files,
    render_batch,
)
from cockpit.control.slurm_controller import SlurmController
from cockpit.read.progress import job_state
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.transport.run_command import LocalCommands

JOB_ID = "42"

SCONTROL = r"""#!/bin/sh
row="JobId=42 JobName=job Partition=debug SubmitTime=2026-01-01T10:00:00"
case "$1 $2" in
  "show hostnames") echo n1 ;;
  "show node") echo "NodeName=n1 NodeAddr=127.0.0.1 Port=1" ;;
  "show job")
    if [ -f "$FAKE/cancelled" ]; then
      echo "$row JobState=CANCELLED Reason=None NodeList=(null) ExitCode=0:0"
    elif [ -f "$FAKE/rc" ]; then
      rc=$(cat "$FAKE/rc"); st=FAILED; if [ "$rc" = 0 ]; then st=COMPLETED; fi
      echo "$row JobState=$st Reason=None NodeList=n1 ExitCode=$rc:0"
    elif [ -f "$FAKE/pending" ]; then
      echo "$row JobState=PENDING Reason=Resources NodeList=(null)"
    else
      echo "$row JobState=RUNNING Reason=None NodeList=n1 ExitCode=0:0"
    fi ;;
  *) exit 1 ;;
esac
"""
SCANCEL = r"""#!/bin/sh
echo "$*" >> "$FAKE/scancel"
if [ "$1" = --batch ]; then kill -USR1 "$(cat "$FAKE/pid")"; else touch "$FAKE/cancelled"; fi
"""
# The job step: a trainer that checkpoints (step 7) once asked to, when SAVES=1.
SRUN = r"""#!/bin/bash
touch "$FAKE/started"
if [ "$SAVES" = 1 ]; then
  until grep -q checkpoint_now "$CONTROL" 2>/dev/null; do sleep 0.05; done
  printf x > "$CKPT/step-7.pt"
  printf '{"step":7,"file":"step-7.pt","kind":"file","bytes":1}' > "$CKPT/step-7.pt.done"
fi
while :; do sleep 0.05; done
"""
# Runs the batch script as Slurm's batch shell would, keeping its pid and exit status.
BATCH_SHELL = ('bash "$1" > "$FAKE/out" 2>&1 & echo $! > "$FAKE/pid.tmp"; '
               'mv "$FAKE/pid.tmp" "$FAKE/pid"; wait $!; echo $? > "$FAKE/rc.tmp"; '
               'mv "$FAKE/rc.tmp" "$FAKE/rc"')


def _spec(tmp_path: Path, pause_timeout: int) -> JobSpec:
    return parse_jobspec(textwrap.dedent(f"""\
        name = "job"
        nproc_per_node = 1
        script = "train.py"
        python = {json.dumps(sys.executable)}
        run_dir = {json.dumps(str(tmp_path / "run"))}
        pause_timeout = {pause_timeout}
        [launcher]
        kind = "slurm"
        nodes = 1
    """), "spec.toml")


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class FakeSlurm:
    """The fake clients, the batch shell they signal, and the job's recording."""

    def __init__(self, tmp_path: Path, pause_timeout: int = 20) -> None:
        self.spec = _spec(tmp_path, pause_timeout)
        self.fake = tmp_path / "fake"
        self.fake.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, text in (("scontrol", SCONTROL), ("scancel", SCANCEL), ("srun", SRUN),
                           ("squeue", "#!/bin/sh\necho 'N/A|Resources'\n"),
                           ("sinfo", "#!/bin/sh\nexit 0\n")):
            _executable(bin_dir / name, text)
        self.ckpt = Path(checkpoint_dir(self.spec))
        self.ckpt.mkdir(parents=True)
        current = Path(current_file(self.spec))  # RUN_DIR/slurm/, beside the scripts
        current.parent.mkdir(parents=True)
        current.write_text(JOB_ID + "\n")
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE": str(self.fake),
                    "HOME": str(tmp_path), "SLURM_JOB_ID": JOB_ID,
                    "SLURM_JOB_NODELIST": "n1", "CONTROL": control_file(self.spec),
                    "CKPT": str(self.ckpt)}
        self.store = Store(tmp_path / "rec.duckdb")
        # Each pause event as recorded, with the job's state as the screen reads it
        # right after that event was stored.
        self.pauses: list[tuple[dict[str, Any], str, str]] = []
        self.job = SlurmJob(self.spec, LocalCommands(self.env), emit=self._emit)
        self.job.job_id = JOB_ID
        self.batch: subprocess.Popen[bytes] | None = None

    def _emit(self, host: str, chunk: bytes) -> None:
        self.store.ingest(host, chunk)
        for line in chunk.splitlines():
            record = json.loads(line)
            if record.get("t") == "event" and record.get("kind") == "pause":
                self.pauses.append((record, *self.state()))

    def state(self) -> tuple[str, str]:
        """(state, its note) of the job, as the screen reads the recording now."""
        reader = StoreReader(self.store)
        state = job_state(reader, self.spec.name, None, None, reader.frontiers())
        return str(state), str(getattr(state, "note", None) or "")

    def node_event(self, seq: int, kind: str, ts: float, **data: Any) -> None:
        """One event of the node's agent (n1), as its journal would give it."""
        chunk = b"" if seq > 1 else encode("stream", 0, {
            "protocol": 1, "agent_version": "test", "journal_id": "n1-agent", "from": 0,
            "first": 1, "head": 1})
        self.store.ingest("n1", chunk + encode("event", seq, {
            "kind": kind, "job": self.spec.name, "rank": None, "step": None, "msg": kind,
            "data": data}, ts=ts))

    def start(self, saves: bool) -> None:
        """The batch script running (its USR1 trap set, the step started)."""
        batch = render_batch(self.spec, launcher_of(self.spec),
                             ScriptPaths(self.spec.run_dir, "s"), resume=False)
        path = self.fake / "job.sbatch"
        path.write_text(batch)
        env = {**self.env, "SAVES": "1" if saves else "0"}
        self.batch = subprocess.Popen(["bash", "-c", BATCH_SHELL, "wrap", str(path)],
                                      env=env)
        deadline = time.monotonic() + 30
        while not (self.fake / "started").exists():
            assert time.monotonic() < deadline, "the batch script never started its step"
            assert self.batch.poll() is None, self.out()
            time.sleep(0.05)
        self.node_event(1, "job_started", time.time(), reason="launch")

    def out(self) -> str:
        path = self.fake / "out"
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        if self.batch is not None and self.batch.poll() is None:
            self.batch.kill()
            self.batch.wait(10)
        self.store.close()


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[FakeSlurm]:
    fake = FakeSlurm(tmp_path)
    yield fake
    fake.close()


@pytest.fixture
def impatient(tmp_path: Path) -> Iterator[FakeSlurm]:
    """A job whose pause waits 1 s for a checkpoint that never comes."""
    fake = FakeSlurm(tmp_path, pause_timeout=1)
    yield fake
    fake.close()


def _data(record: dict[str, Any]) -> dict[str, Any]:
    data = record["data"]
    return data if isinstance(data, dict) else json.loads(data)


@pytest.mark.starts
def test_a_checkpoint_after_the_signal_pauses_the_job_and_only_its_end_says_so(
        slurm: FakeSlurm) -> None:
    slurm.start(saves=True)
    said = SlurmController(slurm.job).pause()
    assert said == (f"Slurm job {JOB_ID} checkpointed at step 7 and ended (COMPLETED); "
                    "its allocation (n1) is released")
    out = slurm.out()
    assert f"checkpoint saved ({slurm.ckpt}/step-7.pt.done)" in out, out
    assert (slurm.fake / "rc").read_text().strip() == "0"
    signal, outcome = pause_files(slurm.spec, JOB_ID)
    assert Path(outcome).read_text().splitlines() == [OUTCOME_SAVED,
                                                      f"{slurm.ckpt}/step-7.pt.done"]
    assert Path(signal).exists()

    (request, state_then, note_then), (end, _, _) = slurm.pauses
    # The USR1 sent is a request: the job is not read as paused after it, nor paused.
    assert state_then != "paused" and "paused" not in note_then, (state_then, note_then)
    assert not paused(request) and not took_effect(request)
    assert _data(request)["ok"] is False and _data(request)["pending"] is True
    # The end: a checkpoint newer than the signal, its path and step.
    data = _data(end)
    assert data["ok"] is True and paused(end)
    assert data["checkpoint"] == f"{slurm.ckpt}/step-7.pt" and data["step"] == 7
    assert (data["state"], data["how"]) == ("COMPLETED", "usr1")
    # The node's agent said its part ended (the step was ended): the job reads paused.
    slurm.node_event(2, "job_exited", float(end["ts"]) - 0.01, returncode=-15)
    assert slurm.state()[0] == "paused"


@pytest.mark.starts
def test_no_checkpoint_in_time_is_not_saved_and_the_pause_fails(
        impatient: FakeSlurm) -> None:
    impatient.start(saves=False)
    text, ok = _run(impatient.job, "pause", 30.0)
    out = impatient.out()
    assert "no checkpoint within 1 s of the USR1" in out, out
    assert "checkpoint saved" not in out, out
    assert (impatient.fake / "rc").read_text().strip() == str(NO_CHECKPOINT_EXIT)
    assert Path(pause_files(impatient.spec, JOB_ID)[1]).read_text().splitlines() == [
        OUTCOME_NONE, "1"]
    # The command says it ended without one, and fails (as an SSH pause not done does).
    assert not ok
    assert text.startswith(f"job: Slurm job {JOB_ID} ended (FAILED) without a checkpoint: "
                           "none was saved within 1 s of the USR1"), text
    assert "checkpointed" not in text, text
    request, end = (record for record, _, _ in impatient.pauses)
    assert _data(request)["ok"] is False and _data(request)["pending"] is True
    data = _data(end)
    assert data["ok"] is False and not paused(end)
    assert data["checkpoint"] is None and data["step"] is None
    assert data["state"] == "FAILED" and data["exit_code"] == f"{NO_CHECKPOINT_EXIT}:0"
    assert "none was saved within 1 s" in data["error"]
    impatient.node_event(2, "job_exited", float(end["ts"]) - 0.01, returncode=-15)
    assert impatient.state()[0] != "paused"


@pytest.mark.starts
def test_the_screen_says_a_pause_without_a_checkpoint_failed(impatient: FakeSlurm) -> None:
    impatient.start(saves=False)
    with pytest.raises(ControlError) as info:
        SlurmController(impatient.job).pause()
    assert f"Slurm job {JOB_ID} ended (FAILED) without a checkpoint" in str(info.value)


def test_a_job_cancelled_while_pending_checkpointed_nothing(slurm: FakeSlurm) -> None:
    (slurm.fake / "pending").touch()
    text, ok = _run(slurm.job, "pause", 30.0)
    assert text == (f"job: Slurm job {JOB_ID} was cancelled before it started (CANCELLED): "
                    "nothing was checkpointed")
    assert ok  # what a pause of a queued job does: nothing ran, nothing is lost
    assert (slurm.fake / "scancel").read_text().split() == [JOB_ID]  # no USR1
    (end, state, _), = slurm.pauses
    data = _data(end)
    assert data["ok"] is False and not paused(end)
    assert data["cancelled_pending"] is True and data["how"] == "scancel"
    assert data["checkpoint"] is None and data["state"] == "CANCELLED"
    assert state != "paused"


def test_the_outcome_without_the_scripts_word_is_read_from_the_markers(
        slurm: FakeSlurm) -> None:
    """A batch shell that wrote no outcome (a script of an older cockpit, a job that
    ended before it handled the signal): only a marker newer than the cockpit's stamp
    counts."""
    signal, outcome = pause_files(slurm.spec, JOB_ID)
    Path(signal).parent.mkdir(parents=True, exist_ok=True)
    Path(signal).touch()
    os.utime(signal, (time.time() - 60, time.time() - 60))
    old = slurm.ckpt / "step-3.pt"
    old.write_text("x")
    (slurm.ckpt / "step-3.pt.done").write_text('{"step":3}')
    os.utime(slurm.ckpt / "step-3.pt.done", (time.time() - 120, time.time() - 120))
    ended = QueueState(JOB_ID, "COMPLETED", nodes="n1", exit_code="0:0")
    none = slurm.job._pause_outcome(ended, signal, outcome)
    assert not none.ok and none.checkpoint is None
    assert "the batch shell said nothing of it" in none.describe()
    (slurm.ckpt / "step-9.pt").write_text("x")
    (slurm.ckpt / "step-9.pt.done").write_text('{"step":9}')
    (slurm.ckpt / "step-8.pt").write_text("x")
    (slurm.ckpt / "step-8.pt.done").write_text("not json")
    found = slurm.job._pause_outcome(ended, signal, outcome)
    assert found.ok and (found.checkpoint, found.step) == (str(slurm.ckpt / "step-9.pt"), 9)
    assert found.describe().startswith(f"Slurm job {JOB_ID} checkpointed at step 9 and ")


def test_marker_step() -> None:
    assert marker_step("/c/step-12.pt", '{"step": 7}') == 7
    assert marker_step("/c/step-12.pt", "{}") == 12
    assert marker_step("/c/ep3-step-12.pt", "not json") == 12
    assert marker_step("/c/last.pt", '{"step": -1}') is None
    assert marker_step("/c/last.pt", '{"step": true}') is None


def test_the_script_says_saved_only_with_a_checkpoint(tmp_path: Path) -> None:
    """The trap's text: "saved" on the found branch only; the timeout branch exits
    NO_CHECKPOINT_EXIT and writes its outcome."""
    spec = _spec(tmp_path, 5)
    batch = render_batch(spec, launcher_of(spec), ScriptPaths(spec.run_dir, "s"), False)
    trap = batch[batch.index("checkpoint_then_end() {"):batch.index("trap checkpoint_")]
    saved, _, rest = trap.partition("  else\n")
    assert 'if [ -n "$saved" ]; then' in saved and "checkpoint saved" in saved
    assert "checkpoint saved" not in rest and "no checkpoint within 5 s" in rest
    assert f"code={NO_CHECKPOINT_EXIT}" in rest and 'exit "$code"' in rest
    assert "exit 0" not in trap


@pytest.mark.parametrize("field", ["run_dir", "checkpoint_dir"])
def test_a_slurm_jobs_paths_may_not_start_with_a_tilde(tmp_path: Path, field: str) -> None:
    """The login host's commands and the #SBATCH options take a Slurm job's paths as
    written: `~/runs` would be a directory named `~` there, and the nodes would look in
    $HOME; the spec says so, naming the field."""
    paths = {"run_dir": str(tmp_path / "runs"), "checkpoint_dir": "checkpoints"}
    paths[field] = "~/runs/j" if field == "run_dir" else "~/ckpt"
    text = (f'name = "j"\nnproc_per_node = 1\nscript = "train.py"\n'
            f'run_dir = "{paths["run_dir"]}"\n'
            f'checkpoint_dir = "{paths["checkpoint_dir"]}"\n'
            '[launcher]\nkind = "slurm"\nnodes = 1\n')
    with pytest.raises(JobSpecError, match=field) as raised:
        parse_jobspec(text, "job.toml")
    assert "starts with ~" in str(raised.value)
    # Over SSH each host's agent expands ~ in its own home: allowed there.
    parse_jobspec(text.replace('[launcher]\nkind = "slurm"\nnodes = 1\n', 'hosts = ["a"]\n'),
                  "job.toml")
