"""Slurm jobs on a real slurmctld and two slurmd (tests/harness/slurm.py).

One 2-node charlm job goes through its whole life: submitted and pending behind a
drained node (Slurm's reason, its start estimate, the node's drain reason), running and
training (its agents' records land in a store), paused (checkpoint, then the allocation
released), resumed from that checkpoint in a new allocation, and cancelled. Jobs of a
few lines of Python then show a killed rank, Slurm's own requeue, the time-limit signal,
and a hostile job name and extra `#SBATCH` value that run nothing but the job.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.journal.journal import JournalReader
from cockpit.app.cli import main as cli_main
from cockpit.app.watch import open_watch
from cockpit.control.jobspec import JobSpec, parse_jobspec
from cockpit.control.slurm import PENDING, RUNNING, SlurmJob
from cockpit.read.kpis_report import collect_kpis
from cockpit.read.report import render_report
from cockpit.sessions.live import LiveSession
from cockpit.store.database import Store
from cockpit.transport.run_command import LocalCommands
from tests.harness.slurm import SlurmCluster
from tests.slurm.conftest import slurm_spec, tiny_spec
from tests.store.wire import count, header

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
DRAIN_REASON = "cockpit test: bad GPU"


def _records(state_dir: Path, t: str | None = None) -> list[dict[str, Any]]:
    if not (state_dir / "journal_id").exists():
        return []
    return [r for r in JournalReader(state_dir).records() if t is None or r["t"] == t]


def _wait(what: str, predicate: Callable[[], Any], timeout: float, job: SlurmJob) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        state = job.poll()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                 f"Slurm says {state}{_job_output(job)}")
        time.sleep(0.5)



def _job_output(job: SlurmJob) -> str:
    """The tail of each batch output of the job (`slurm-<id>.out`), to say why it ended."""
    outputs = sorted((Path(job.spec.run_dir) / "slurm").glob("slurm-*.out"))
    return "".join(f"\n--- {out.name}:\n" + "\n".join(
        out.read_text(errors="replace").splitlines()[-40:]) for out in outputs)

def _ingest_agents(store: Store, agents: Path) -> None:
    """Each node's agent journal into the store, as the node's stream would deliver it."""
    for state_dir in sorted(p for p in agents.iterdir() if p.is_dir()):
        reader = JournalReader(state_dir)
        first, head = reader.bounds()
        store.ingest(state_dir.name, header(journal_id=reader.journal_id, first=first,
                                            head=head) + b"".join(reader.chunks(0)))


def test_two_node_job_pending_running_pause_resume_cancel(
        slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Driven by the operator's commands (`cockpit launch|pause|resume|stop JOB.toml`),
    each appending to one recording, while `cockpit watch JOB.toml` (this machine is
    the login node) follows the job through Slurm into a recording of its own and
    streams each allocated node's agent as soon as the job runs."""
    spec = slurm_spec(tmp_path, tmp_path / "data")
    spec_path, rec = tmp_path / "sjob.toml", tmp_path / "rec.duckdb"
    watch_rec = tmp_path / "watch.duckdb"
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    with open_watch([str(spec_path)], store_path=watch_rec, known_hosts=None,
                    accept_new_host_keys=False) as live:
        _life(slurm, spec, spec_path, rec, live)
    _check_watch_recording(watch_rec, spec.name)


def _watched(live: LiveSession, sql: str) -> list[tuple]:
    """Rows of the watch's recording, what its hosts sent so far committed first."""
    live.writer.flush()
    with live.store.cursor() as cur:
        return cur.execute(sql).fetchall()


def _life(slurm: SlurmCluster, spec: JobSpec, spec_path: Path, rec: Path,
          live: LiveSession) -> None:

    def cockpit(action: str, *extra: str) -> None:
        assert cli_main([action, str(spec_path), "--store", str(rec), *extra]) == 0, action

    job = SlurmJob(spec, LocalCommands(slurm.env))  # the test's own look at the queue
    run_dir = Path(spec.run_dir)
    agents = run_dir / "agents"

    # A drained node holds the job in the queue: Slurm's reason, its estimate and the
    # node's drain reason are recorded; once the node is back, the job starts.
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={DRAIN_REASON}")
    try:
        cockpit("launch", "--ack-timeout", "2")
        first_id = job.attach()
        pending = job.look()
        assert pending.state == PENDING, pending
        assert pending.reason and pending.estimate, pending
        # The watch saw it pending: the screen says so, with Slurm's reason.
        _wait("the watch to record the pending job", lambda: _watched(
            live, "SELECT data FROM event WHERE kind = 'slurm_pending'"), 30, job)
        shown = live.source.snapshot()
        assert shown.job == spec.name, shown.job
        assert shown.progress.state.startswith(f"queued in Slurm (job {first_id}: "), \
            shown.progress.state
        assert pending.reason in shown.progress.state, shown.progress.state
    finally:
        slurm.run("scontrol", "update", "nodename=n2", "state=resume")
    running = job.wait(lambda s: s.state == RUNNING, 60)
    assert running.nodes == "n[1-2]" and running.partition == "debug"
    assert slurm.queue() == [first_id]

    def trained(least: int) -> Callable[[], list[dict]]:
        return lambda: [r for n in ("n1", "n2") for r in _records(agents / n, "train")
                        if r["step"] >= least]

    _wait("training on both nodes", trained(10), 120, job)
    # Both nodes' agents stream into the watch's recording, added once the job ran.
    _wait("the watch to stream both nodes", lambda: {r[0] for r in _watched(
        live, "SELECT DISTINCT host FROM train")} >= {"n1", "n2"}, 60, job)
    assert {"n1", "n2"} <= set(live.fleet.links)
    assert live.source.snapshot().progress.state == "running"

    # Pause: USR1 to the batch shell -> checkpoint_now -> checkpoint -> step ends.
    cockpit("pause", "--ack-timeout", "120")
    assert job.look().state == "COMPLETED"
    assert slurm.queue() == [], "pause must release the allocation"
    markers = sorted((run_dir / "checkpoints").glob("*.done"))
    assert markers, "pause ended the job without a checkpoint"
    saved_step = max(json.loads(m.read_text())["step"] for m in markers)
    batch_out = (run_dir / "slurm" / f"slurm-{first_id}.out").read_text()
    assert "USR1: checkpoint" in batch_out and "checkpoint saved" in batch_out, batch_out

    # Resume: a new allocation whose trainer starts from that checkpoint's step.
    cockpit("resume", "--ack-timeout", "60")
    assert job.attach() != first_id
    assert job.look().state == RUNNING

    def resumed() -> list[dict]:
        return [r for n in ("n1", "n2") for r in _records(agents / n, "event")
                if r["kind"] == "resumed" and r.get("step") == saved_step]

    _wait(f"a resume at step {saved_step}", resumed, 120, job)
    _wait("training past the checkpoint", trained(saved_step + 10), 120, job)

    cockpit("stop", "--ack-timeout", "120")
    assert job.look().state == "CANCELLED"
    assert slurm.queue() == []

    store = Store(rec)
    _ingest_agents(store, agents)
    with store.cursor() as cur:
        kinds = [row[0] for row in cur.execute(
            "SELECT kind FROM event WHERE host = ? ORDER BY seq", [job.host]).fetchall()]
        pend = cur.execute("SELECT data FROM event WHERE host = ? AND kind = "
                           "'slurm_pending'", [job.host]).fetchall()
        stops = cur.execute("SELECT data FROM event WHERE host = ? AND kind = "
                            "'job_exited'", [job.host]).fetchall()
        waits = cur.execute("SELECT data FROM event WHERE host = ? AND kind = "
                            "'slurm_running'", [job.host]).fetchall()
        pauses = [json.loads(row[0]) for row in cur.execute(
            "SELECT data FROM event WHERE host = ? AND kind = 'pause' ORDER BY seq",
            [job.host]).fetchall()]
    # Every command's events were kept: each went on from the recording's last seq.
    assert kinds[:2] == ["slurm_submitted", "slurm_pending"], kinds
    assert kinds.count("slurm_submitted") == 2 and kinds.count("slurm_running") == 2, kinds
    assert "pause" in kinds and "resume" in kinds, kinds
    # The USR1 sent is journaled as a request (not paused yet); the end as paused, with
    # the checkpoint saved after it.
    assert [(p["ok"], p.get("pending")) for p in pauses] == [(False, True), (True, None)], \
        pauses
    assert pauses[1]["step"] == saved_step and pauses[1]["state"] == "COMPLETED", pauses
    assert Path(pauses[1]["checkpoint"] + ".done") in markers, pauses
    # The operator's stop is journaled as the stop it is, not an outage.
    assert kinds[-1] == "job_exited" and "interruption" not in kinds, kinds
    stopped = json.loads(stops[-1][0])
    assert (stopped["ended_for"], stopped["state"]) == ("stop", "CANCELLED"), stopped
    assert {"node": "n2", "state": "drain", "reason": DRAIN_REASON} in \
        json.loads(pend[0][0])["unavailable"]
    assert all(json.loads(w[0])["queue_wait"] is not None for w in waits)
    # The trainers' records reached the store from both nodes, across both allocations.
    assert count(store, "train", "host = 'n1'") + count(store, "train", "host = 'n2'") > 0
    assert count(store, "train", f"step > {saved_step}") > 0
    store.close()


def _check_watch_recording(path: Path, name: str) -> None:
    """What the watch kept: Slurm's view of both submissions beside both nodes' steps,
    and a report and KPIs that carry it."""
    store = Store(path)
    with store.cursor() as cur:
        rows = cur.execute("SELECT kind, data FROM event WHERE host = ? ORDER BY seq",
                           [f"slurm:{name}"]).fetchall()
        hosts = {r[0] for r in cur.execute("SELECT DISTINCT host FROM train").fetchall()}
    store.close()
    kinds = [r[0] for r in rows]
    assert kinds.count("slurm_running") == 2 and "slurm_pending" in kinds, kinds
    ends = [json.loads(d) for k, d in rows if k == "slurm_finished"]
    assert [(e["state"], e["exit_source"]) for e in ends] == [
        ("COMPLETED", "scontrol"), ("CANCELLED", "scontrol")], ends
    assert {"n1", "n2"} <= hosts, hosts
    text = render_report(path, fmt="text")
    second = ends[-1]["slurm_job_id"]
    assert f"{second} (2 submissions" in text, text
    assert "CANCELLED" in text and "queue wait" in text, text
    kpis = collect_kpis(path, job=name)[0]
    assert kpis.queue_wait_s is not None and kpis.queue_wait_s > 0, kpis
    assert kpis.submitted is not None and kpis.launched is not None
    assert kpis.submitted < kpis.launched  # the GPU time starts with the allocation
    assert kpis.turnaround_s is not None and kpis.turnaround_s > kpis.queue_wait_s


def test_a_killed_rank_fails_the_job_with_its_cause(slurm: SlurmCluster,
                                                     tmp_path: Path) -> None:
    """A rank killed by SIGKILL: its torchrun and agent fail, srun ends the step on the
    other node too (--kill-on-bad-exit), and Slurm's FAILED state and exit code are
    recorded beside the agent's own account of the exit."""
    text = tiny_spec(tmp_path, "killed", "killed", textwrap.dedent("""\
        import os, signal, time
        if os.environ.get("RANK") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
    """))
    records: list[bytes] = []
    job = SlurmJob(parse_jobspec(text, "killed.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)), emit=lambda host, chunk: records.append(chunk))
    job.submit()
    ended = job.wait_ended(120)
    assert ended.state == "FAILED" and ended.exit_code != "0:0", ended
    finished = [json.loads(line) for chunk in records for line in chunk.splitlines()
                if b'"slurm_finished"' in line]
    assert finished and finished[-1]["data"]["state"] == "FAILED", records
    # Slurm's end is an interruption of the job, its cause Slurm's state.
    causes = [json.loads(line)["data"] for chunk in records for line in chunk.splitlines()
              if b'"interruption"' in line]
    assert [c["cause"] for c in causes] == ["slurm_failed"], causes
    assert causes[0]["exit_code"] == ended.exit_code
    exits = [r for n in ("n1", "n2") for r in _records(tmp_path / "runs" / "killed" /
                                                        "agents" / n, "event")
             if r["kind"] == "job_exited"]
    assert any(r["data"]["returncode"] not in (0, None) for r in exits), exits
    assert slurm.queue() == []


def test_slurm_requeue_is_an_interruption_and_resumes_from_the_checkpoint(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    """Slurm's own requeue (`scontrol requeue`, as after a node failure) runs the same
    batch script again; it finds the newest valid checkpoint by itself."""
    text = tiny_spec(tmp_path, "requeued", "requeued", textwrap.dedent("""\
        import os, sys, time
        from pathlib import Path
        from agent.wire.checkpoints import mark_complete
        if "--resume" in sys.argv:
            print("resumed from", sys.argv[sys.argv.index("--resume") + 1])
            sys.exit(0)
        if os.environ.get("RANK") == "0":
            folder = Path(os.environ["COCKPIT_CHECKPOINT_DIR"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "step-5.pt").write_bytes(b"weights")
            mark_complete(folder / "step-5.pt", 5)
        time.sleep(120)
    """), tables='[resume]\nargs = ["--resume", "{checkpoint}"]\n')
    records: list[bytes] = []
    job = SlurmJob(parse_jobspec(text, "requeued.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)), emit=lambda host, chunk: records.append(chunk))
    job.submit()
    marker = tmp_path / "runs" / "requeued" / "checkpoints" / "step-5.pt.done"
    _wait("the checkpoint", marker.exists, 120, job)
    slurm.run("scontrol", "requeue", str(job.job_id))
    # A requeued job waits ~120 s (BeginTime) unless told to start now.
    _wait("the requeued job pending", lambda: (lambda s: s.restarts == 1 and s.state ==
                                                PENDING)(job.look()), 60, job)
    slurm.run("scontrol", "update", f"jobid={job.job_id}", "starttime=now")
    ended = job.wait_ended(120)
    assert ended.state == "COMPLETED", ended
    events = [json.loads(line) for chunk in records for line in chunk.splitlines()
              if b'"event"' in line]
    requeues = [e for e in events if e["kind"] == "interruption"]
    assert requeues and requeues[0]["data"]["cause"] == "slurm_requeue", events
    logs = "".join(p.read_text() for p in (tmp_path / "runs" / "requeued" / "nodes")
                   .glob("*/logs/*.out"))
    assert logs.count(f"resumed from {marker.with_suffix('')}") == 2, logs


def test_time_limit_signal_checkpoints_before_the_kill(slurm: SlurmCluster,
                                                        tmp_path: Path) -> None:
    """`--signal=B:USR1@N` from Slurm itself: the batch shell asks for a checkpoint
    through the control file, waits for its marker, then ends the job before its limit.
    (A trainer of a few lines that honours `checkpoint_now`, so the test waits for
    Slurm's signal, not for torch to start.)"""
    text = tiny_spec(tmp_path, "limited", "limited", textwrap.dedent("""\
        import os, time
        from pathlib import Path
        from agent.wire.checkpoints import mark_complete
        run, job = Path(os.environ["COCKPIT_RUN_DIR"]), os.environ["COCKPIT_JOB"]
        control = run / "control" / f"{job}.ndjson"
        while True:
            if (os.environ.get("RANK") == "0" and control.exists()
                    and "checkpoint_now" in control.read_text()):
                folder = Path(os.environ["COCKPIT_CHECKPOINT_DIR"])
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "step-7.pt").write_bytes(b"weights")
                mark_complete(folder / "step-7.pt", 7)
                time.sleep(600)
            time.sleep(0.2)
    """), 'time_limit = "2"\nsignal_seconds = 115\n')
    job = SlurmJob(parse_jobspec(text, "limited.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)))
    job.submit()
    ended = job.wait_ended(150)
    out = (tmp_path / "runs" / "limited" / "slurm" / f"slurm-{job.job_id}.out").read_text()
    assert "USR1: checkpoint" in out and "checkpoint saved" in out, out
    # Ended by the script once the checkpoint was saved: the limit would say TIMEOUT.
    assert ended.state == "COMPLETED", (ended, out)
    marker = tmp_path / "runs" / "limited" / "checkpoints" / "step-7.pt.done"
    assert marker.exists()
    said = tmp_path / "runs" / "limited" / "slurm" / f"pause-{job.job_id}.outcome"
    assert said.read_text().splitlines() == ["saved", str(marker)], said.read_text()


HOSTILE_NAME = "pw $(touch pwned1) `touch pwned2` ';touch pwned3;'"
HOSTILE_EXTRA = "--comment=x\"; touch pwned4; echo \"$(touch pwned5)"


def test_hostile_name_and_extra_sbatch_run_nothing_else(
        slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Submitted with `cockpit launch`, as an operator would."""
    text = tiny_spec(tmp_path, HOSTILE_NAME, "hostile",
                      "import os\nprint('hello from', os.environ.get('RANK'))\n",
                      f"extra_sbatch = {json.dumps([HOSTILE_EXTRA])}\n")
    spec_path = tmp_path / "hostile.toml"
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", str(spec_path), "--store", str(tmp_path / "rec.duckdb")]) == 0
    job = SlurmJob(parse_jobspec(text, str(spec_path)), LocalCommands(slurm.env))
    job.attach()
    ended = job.wait_ended(120)
    out = "".join(p.read_text() for p in (tmp_path / "runs" / "hostile" / "slurm")
                  .glob("slurm-*.out"))
    assert ended.state == "COMPLETED" and ended.exit_code == "0:0", (ended, out)
    shown = slurm.run("scontrol", "show", "job", "-o", str(job.job_id)).stdout
    assert f"JobName={HOSTILE_NAME} " in shown, shown
    assert "Comment=" + HOSTILE_EXTRA.split("=", 1)[1] in shown, shown
    planted = [p for p in tmp_path.rglob("pwned*")] + list(Path.cwd().glob("pwned*"))
    assert planted == [], planted
    # The command itself ran, on both nodes.
    logs = "".join(p.read_text() for p in (tmp_path / "runs" / "hostile" / "nodes")
                   .glob("*/logs/*.out"))
    assert logs.count("hello from") == 2, logs
    store = Store(tmp_path / "rec.duckdb")
    with store.cursor() as cur:
        rows = cur.execute("SELECT job, data FROM event WHERE kind = 'slurm_submitted'"
                           ).fetchall()
    store.close()
    assert [(r[0], json.loads(r[1])["slurm_job_id"]) for r in rows] == [
        (HOSTILE_NAME, job.job_id)]


CHECKPOINTING_TRAINER = textwrap.dedent("""\
    import os, sys, time
    from pathlib import Path
    from agent.wire.checkpoints import mark_complete
    if "--resume" in sys.argv:
        print("resumed from", sys.argv[sys.argv.index("--resume") + 1], flush=True)
        time.sleep(600)
    run, job = Path(os.environ["COCKPIT_RUN_DIR"]), os.environ["COCKPIT_JOB"]
    control = run / "control" / f"{job}.ndjson"
    while not (control.exists() and "checkpoint_now" in control.read_text()):
        time.sleep(0.2)
    folder = Path(os.environ["COCKPIT_CHECKPOINT_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step-3.pt").write_bytes(b"weights")
    mark_complete(folder / "step-3.pt", 3)
    time.sleep(600)
""")


def test_a_node_drained_under_the_job_is_reported_and_relaunch_excludes_it(
        slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An admin drains the node a running job holds (a bad GPU): the cockpit records
    it with the admin's reason, and `cockpit relaunch JOB.toml --exclude NODE`
    checkpoints the job, ends its allocation and resubmits it without that node, from
    the checkpoint."""
    tiny_spec(tmp_path, "drained", "drained", CHECKPOINTING_TRAINER,
              tables='[resume]\nargs = ["--resume", "{checkpoint}"]\n', nodes=1)
    spec_path, rec = tmp_path / "drained.toml", tmp_path / "rec.duckdb"
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", str(spec_path), "--store", str(rec)]) == 0
    records: list[bytes] = []
    job = SlurmJob(parse_jobspec(spec_path.read_text(), str(spec_path)),
                   LocalCommands(slurm.env), emit=lambda host, chunk: records.append(chunk))
    first_id = job.attach()
    bad = job.wait(lambda s: s.state == RUNNING, 60).nodes
    assert bad in ("n1", "n2"), bad
    reason = "cockpit test: ECC errors on GPU 3"
    slurm.run("scontrol", "update", f"nodename={bad}", "state=drain", f"reason={reason}")
    try:
        job.poll()
        said = [json.loads(line)["data"] for chunk in records for line in chunk.splitlines()
                if b'"slurm_node_unavailable"' in line]
        assert len(said) == 1 and said[0]["node"] == bad and said[0]["reason"] == reason, said
        assert said[0]["node_state"] in ("drng", "drain"), said

        assert cli_main(["relaunch", str(spec_path), "--store", str(rec), "--exclude", bad,
                         "--ack-timeout", "120"]) == 0
        second = job.attach()
        assert second != first_id
        now = job.wait(lambda s: s.state == RUNNING, 60)
        assert now.nodes not in ("", bad), now
        run_dir = tmp_path / "runs" / "drained"
        first_out = (run_dir / "slurm" / f"slurm-{first_id}.out").read_text()
        assert "checkpoint saved" in first_out, first_out
        checkpoint = run_dir / "checkpoints" / "step-3.pt"

        def resumed() -> bool:
            return any(f"resumed from {checkpoint}" in p.read_text()
                       for p in (run_dir / "nodes" / now.nodes).glob("logs/*.out"))

        _wait("the relaunched job to resume from the checkpoint", resumed, 60, job)
        job.stop()
    finally:
        slurm.run("scontrol", "update", f"nodename={bad}", "state=resume")
    store = Store(rec)
    with store.cursor() as cur:
        rows = cur.execute("SELECT kind, data FROM event WHERE host = 'slurm:drained' "
                           "ORDER BY seq").fetchall()
    store.close()
    relaunch = [json.loads(d) for k, d in rows if k == "relaunch"]
    assert relaunch and relaunch[0]["exclude"] == [bad], rows
    assert relaunch[0]["previous"] == first_id and relaunch[0]["slurm_job_id"] == second
    submitted = [json.loads(d) for k, d in rows if k == "slurm_submitted"]
    assert f"#SBATCH --exclude={bad}" in submitted[-1]["batch_text"]
