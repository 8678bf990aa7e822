"""What the recording, the report and the KPIs make of a Slurm job, without a cluster.

Slurm's answers are scripted here (the e2e tests in test_slurm_cluster.py ask a real
slurmctld); what is checked is what the cockpit records and shows from them: the
queue's reason and estimate as the job's state, the submissions with their queue
waits and exit states in the report, the queue wait in the turnaround but not in the
GPU time, and a relaunch's excluded nodes in the batch script.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from agent.wire.events import INTERRUPTION, JOB_EXITED
from agent.wire.launch_reasons import FOR_STOP
from cockpit.analysis.kpis import StepTotals, job_kpis
from cockpit.control.jobspec import parse_jobspec
from cockpit.control.slurm import ScriptPaths, SlurmError, SlurmJob, launcher_of, render_batch
from cockpit.control.slurm_watch import SlurmWatcher
from cockpit.read.report import render_report
from cockpit.read.slurm_state import queued_state, slurm_rows, slurm_summary
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.transport.run_command import CommandError, CommandResult


def _spec(tmp_path: Path, launcher: str = ""):
    return parse_jobspec(textwrap.dedent(f"""\
        name = "job"
        nproc_per_node = 1
        script = "train.py"
        run_dir = {json.dumps(str(tmp_path / "run"))}
        [launcher]
        kind = "slurm"
        nodes = 2
        partition = "gpu"
    """) + launcher, "spec.toml")


class _Queue:
    """Slurm's clients answered from what the test says the job's state is now."""

    def __init__(self) -> None:
        self.job = ""
        self.current = ""  # RUN_DIR/slurm/current-job
        self.down: str | None = None  # the login node unreachable: this error
        self.seen: list[list[str]] = []

    def run(self, argv, stdin=None, timeout=60.0):  # type: ignore[no-untyped-def]
        self.seen.append(list(argv))
        if self.down is not None:
            raise CommandError(self.down)
        if argv[0] == "cat":
            return CommandResult(tuple(argv), 0 if self.current else 1, self.current, "")
        if argv[0] == "sbatch":
            return CommandResult(tuple(argv), 0, "41\n", "")
        if argv[:3] == ["scontrol", "show", "job"]:
            return CommandResult(tuple(argv), 0, self.job, "")
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return CommandResult(tuple(argv), 0, "g1\ng2\n", "")
        if argv[:2] == ["squeue", "--start"]:
            return CommandResult(tuple(argv), 0, "2026-01-01T11:00:00|Resources\n", "")
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), 0, "g2|drain|bad GPU 3\n", "")
        return CommandResult(tuple(argv), 0, "", "")


def test_queue_state_report_and_node_drained_under_the_job(tmp_path: Path) -> None:
    store = Store(tmp_path / "rec.duckdb")
    queue = _Queue()
    job = SlurmJob(_spec(tmp_path), queue, emit=store.ingest)
    job.submit()
    queue.job = ("JobId=41 JobState=PENDING Reason=Resources NodeList=(null) "
                 "Partition=gpu SubmitTime=2026-01-01T10:00:00 StartTime=Unknown")
    job.poll()
    reader = StoreReader(store)
    pending = slurm_summary(reader, "job")
    assert pending is not None and pending["current"]["state"] == "PENDING"
    assert queued_state(pending, "unknown") == (
        "queued in Slurm (job 41: Resources, expected start 2026-01-01T11:00:00)")
    queue.job = ("JobId=41 JobState=RUNNING Reason=None NodeList=g[1-2] Partition=gpu "
                 "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:04:00")
    job.poll()
    job.poll()  # the same drain is said once
    queue.job = ("JobId=41 JobState=NODE_FAIL Reason=NodeDown NodeList=g[1-2] "
                 "Partition=gpu SubmitTime=2026-01-01T10:00:00 "
                 "StartTime=2026-01-01T10:04:00 ExitCode=0:1")
    job.poll()
    summary = slurm_summary(reader, "job")
    assert summary is not None
    assert queued_state(summary, "running") is None
    cur = summary["current"]
    assert (cur["state"], cur["nodes"], cur["queue_wait"], cur["exit_code"],
            cur["exit_source"]) == ("NODE_FAIL", "g[1-2]", 240.0, "0:1", "scontrol")
    assert [(c["kind"], c["cause"]) for c in summary["causes"]] == [
        ("slurm_node_unavailable", "drain"), ("interruption", "slurm_node_fail")]
    rows = dict(slurm_rows(summary))
    assert rows["queue wait"] == "240 s (41 240 s)"
    assert rows["Slurm state"] == "NODE_FAIL (NodeDown)"
    assert "bad GPU 3" in rows["slurm node unavailable (41)"]
    assert "--exclude g2" in rows["slurm node unavailable (41)"]
    store.close()
    text = render_report(tmp_path / "rec.duckdb", fmt="text")
    assert "Slurm job" in text and "NODE_FAIL" in text and "240 s" in text, text
    data = json.loads(render_report(tmp_path / "rec.duckdb", fmt="json"))
    assert data["slurm"]["current"]["job_id"] == "41"


def test_queue_wait_counts_in_the_turnaround_not_in_the_gpu_time() -> None:
    t = 1_000_000.0

    def ev(ts: float, kind: str, **data: object) -> dict[str, object]:
        return {"ts": ts, "seq": int(ts), "kind": kind, "job": "j", "data": data}

    events = [ev(t, "slurm_submitted", slurm_job_id="5"),
              ev(t + 60, "slurm_running", slurm_job_id="5", queue_wait=60.0),
              ev(t + 62, "job_started")]
    steps = StepTotals(records=10, first_ts=t + 70, last_ts=t + 160, last_step=10,
                       step_time=90.0)
    k = job_kpis("j", events=events, interruptions=[], steps=steps, first_steps={},
                 gpus=1, gpus_from="world size", recording_end=t + 160)
    assert k.queue_wait_s == 60.0 and k.submitted == t
    assert k.turnaround_s == 160.0  # submit to the last step, the queue included
    assert k.span_s == 98.0  # the allocation: from the start, not the submission
    without = job_kpis("j", events=events[2:], interruptions=[], steps=steps,
                       first_steps={}, gpus=1, gpus_from="world size",
                       recording_end=t + 160)
    assert without.queue_wait_s is None and without.turnaround_s == 98.0
    # A watch records no sbatch of its own: Slurm's SubmitTime stands for it.
    watched = [ev(t + 60, "slurm_running", slurm_job_id="5", queue_wait=60.0,
                  submitted_at=t), events[2]]
    k = job_kpis("j", events=watched, interruptions=[], steps=steps, first_steps={},
                 gpus=1, gpus_from="world size", recording_end=t + 160)
    assert (k.submitted, k.queue_wait_s, k.turnaround_s, k.span_s) == (t, 60.0, 160.0, 98.0)


def test_relaunch_excludes_nodes_with_the_specs_own(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 'extra_sbatch = ["--exclude=g7", "--exclusive"]\n')
    paths = ScriptPaths(spec.run_dir, "s")
    plain = render_batch(spec, launcher_of(spec), paths, resume=False)
    assert "#SBATCH --exclude=g7\n" in plain
    again = render_batch(spec, launcher_of(spec), paths, resume=True, exclude=("g2", "g7"))
    assert again.count("--exclude") == 1 and "#SBATCH --exclude=g7,g2\n" in again
    assert "#SBATCH --exclusive\n" in again and "resume=1" in again
    queue = _Queue()
    job = SlurmJob(spec, queue)
    for bad in ("g2;reboot", "-x", ""):
        try:
            job.relaunch([bad])
        except RuntimeError as exc:
            assert "not a Slurm node name" in str(exc)
        else:
            raise AssertionError(f"relaunch excluding {bad!r} was accepted")
    assert not any(argv[0] == "sbatch" for argv in queue.seen)


def test_the_watcher_follows_the_current_submission_and_hands_on_its_nodes(
        tmp_path: Path) -> None:
    queue = _Queue()
    events: list[dict] = []
    job = SlurmJob(_spec(tmp_path), queue, emit=lambda host, chunk: events.extend(
        json.loads(line) for line in chunk.splitlines() if b'"event"' in line))
    told: list[tuple[str, ...]] = []
    watcher = SlurmWatcher(job, told.append, every=0.05)
    watcher.look_once()
    assert events == [] and told == []  # nothing submitted yet
    queue.current = "41\n"
    queue.job = "JobId=41 JobState=PENDING Reason=Priority NodeList=(null) Partition=gpu"
    watcher.look_once()
    assert [e["kind"] for e in events] == ["slurm_pending"] and told == []
    queue.job = ("JobId=41 JobState=RUNNING Reason=None NodeList=g[1-2] Partition=gpu "
                 "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:00:09")
    watcher.look_once()
    watcher.look_once()
    assert told == [("g1", "g2")]  # once per Slurm job
    assert [e["kind"] for e in events][1:] == ["slurm_running", "slurm_node_unavailable"]
    # A resume from another terminal: the next look watches the new id.
    queue.current = "42\n"
    queue.job = queue.job.replace("JobId=41", "JobId=42")
    watcher.look_once()
    assert job.job_id == "42" and told == [("g1", "g2"), ("g1", "g2")]
    # The login node gone: said once while it stays gone, the watch goes on.
    queue.down = "login1: connection refused"
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while not any(e["kind"] == "slurm_unreachable" for e in events) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # several more failed looks
    finally:
        watcher.stop()
    said = [e for e in events if e["kind"] == "slurm_unreachable"]
    assert len(said) == 1 and "connection refused" in said[0]["msg"], said


def test_an_answer_cut_at_the_output_limit_is_an_error_not_a_job_state(tmp_path: Path) -> None:
    """Output past the kept megabyte ends mid-line: read as the whole answer it would
    misstate the job, so the client says what happened instead."""
    queue = _Queue()
    job = SlurmJob(_spec(tmp_path), queue, emit=lambda host, chunk: None)
    job.submit()
    flood = _Queue.run

    def cut(self, argv, stdin=None, timeout=60.0):  # type: ignore[no-untyped-def]
        done = flood(self, argv, stdin, timeout)
        if argv[:3] == ["scontrol", "show", "job"]:
            return CommandResult(done.argv, 0, "JobId=41 JobState=RUNN", "", dropped=5 << 20)
        return done

    queue.run = cut.__get__(queue)  # type: ignore[method-assign]
    with pytest.raises(SlurmError, match=r"not kept.*too much output to read as an answer"):
        job.poll()


def test_a_wait_on_slurm_ends_when_the_cockpit_closes(tmp_path: Path) -> None:
    """A pause waits minutes for its checkpoint: the closing screen abandons the wait
    (the job goes on as Slurm has it) rather than hold the cockpit's exit."""
    import threading

    queue = _Queue()
    queue.job = ("JobId=41 JobState=RUNNING Reason=None NodeList=g[1-2] Partition=gpu "
                 "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:04:00")
    job = SlurmJob(_spec(tmp_path), queue, emit=lambda host, chunk: None)
    job.submit()
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            job.wait_ended(300.0)
        except SlurmError as exc:
            failed.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.3)  # it waits: the job runs on
    assert waiter.is_alive()
    job.abandon()
    waiter.join(10)  # bounds a hang only
    assert not waiter.is_alive()
    (error,) = failed
    assert "the cockpit closed while it waited on Slurm job 41 (RUNNING)" in str(error)


def test_the_operators_cancel_is_a_stop_not_an_outage(tmp_path: Path) -> None:
    """`cockpit stop` of a Slurm job (scancel) is journaled as the stop it is, as an
    agent journals an operator's stop; no interruption, no "not recovered" outage."""
    store = Store(tmp_path / "rec.duckdb")
    queue = _Queue()
    job = SlurmJob(_spec(tmp_path), queue, emit=store.ingest)
    job.submit()
    queue.job = ("JobId=41 JobState=CANCELLED Reason=None NodeList=g[1-2] Partition=gpu "
                 "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:04:00 "
                 "ExitCode=0:15")
    job.stop(timeout=5)
    reader = StoreReader(store)
    with store.cursor() as cur:
        rows = cur.execute("SELECT kind, data FROM event ORDER BY seq").fetchall()
    kinds = [k for k, _d in rows]
    assert INTERRUPTION not in kinds, kinds
    (exited,) = [json.loads(d) if isinstance(d, str) else d for k, d in rows
                 if k == JOB_EXITED]
    assert exited["ended_for"] == FOR_STOP and exited["state"] == "CANCELLED"
    assert reader.interruptions(_spec(tmp_path).name) == []
    store.close()
