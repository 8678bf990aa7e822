"""A job outlives its agent: the supervising process is killed with -9, the job keeps
running and writing its output, and a new agent re-attaches to it from the identity the
first one saved -- output, signals and the exit status included. Real processes, no
torchrun (the end-to-end test with torchrun is test_adopt_e2e.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.job.recovery import HangDetector
from agent.job.supervisor import Supervisor, alive
from agent.journal.journal import Journal, JournalReader
from agent.wire import jobstate
from tests.harness.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

# The "agent": starts the job through a Supervisor, saves its identity as the managed
# job does (once here, so the saved offsets are stale by the time it is killed), and
# waits to be killed.
AGENT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from agent.wire import jobstate
    from agent.journal.journal import Journal
    from agent.job.supervisor import Supervisor
    state, run_dir, script = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    sup = Supervisor([sys.executable, "-c", script], "j", run_dir, Journal(state))
    sup.start()
    # Saved once, as soon as the job's pid is known: what is journaled after this is
    # found by the next agent through the supervisor's own note of journaled offsets.
    while sup.identity()["pid"] is None:
        time.sleep(0.01)
    jobstate.save(state, "j", {"process": sup.identity()})
    while True:
        time.sleep(1)
""")

# The job: a line a tick on stdout (and the odd one on stderr) until told to end, then
# exits with code 3. SIGUSR1 is noted, proving signals reach it after the adoption.
JOB = textwrap.dedent("""
    import os, signal, sys, time
    got = []
    signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    i = 0
    while not os.path.exists(os.path.join(os.environ["COCKPIT_RUN_DIR"], "end")):
        print("tick", i, "usr1" if got else "", flush=True)
        if i % 10 == 0:
            print("[rank1]: err", i, file=sys.stderr, flush=True)
        i += 1
        time.sleep(0.02)
    print("bye", flush=True)
    sys.exit(3)
""")


def _log_lines(state: Path) -> list[str]:
    return [r["line"] for r in JournalReader(state).records() if r["t"] == "log"]


@pytest.fixture
def orphan(tmp_path: Path) -> Iterator[dict]:
    """A job whose agent was killed with -9: its saved identity; the job is ended after."""
    state, run_dir = tmp_path / "state1", tmp_path / "run"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(REPO), str(state),
                              str(run_dir), JOB], cwd=tmp_path)  # fmt: skip
    identity: dict = {}
    try:
        def saved_with_pid() -> bool:
            try:
                identity.update(json.loads(jobstate.path(state, "j").read_text())["process"])
            except (OSError, ValueError, KeyError):
                return False
            return identity.get("pid") is not None

        wait_for(saved_with_pid, 30, "the job's identity")
        wait_for(lambda: any(line.split()[:2] == ["tick", "5"] for line in _log_lines(state)),
                 30, "output journaled by the agent")  # fmt: skip
    finally:
        agent.kill()
        agent.wait(10)
    yield identity
    (run_dir / "end").touch()
    for key in ("pid", "wrapper"):
        pid = identity.get(key)
        if pid and alive(pid):
            wait_for(lambda pid=pid: not alive(pid), 10, f"{key} {pid} to end")


def test_adopted_job_keeps_its_output_signals_and_exit_status(
    tmp_path: Path, orphan: dict
) -> None:
    run_dir = tmp_path / "run"
    out = run_dir / "logs" / "j.out"
    # The agent is gone; the job is not, and its output did not end with it (no pipe).
    size = out.stat().st_size
    wait_for(lambda: out.stat().st_size > size, 10, "output after the agent died")
    assert alive(orphan["pid"]) and alive(orphan["wrapper"])

    state = tmp_path / "state2"
    journal = Journal(state)
    exited: list = []
    sup = Supervisor.adopt(orphan, journal, on_exit=exited.append)
    try:
        assert sup.adopted and sup.found_running and sup.running
        assert sup.pid == orphan["pid"]
        assert sup.tree_pids()[0] == orphan["pid"]
        # Output written while no agent watched is journaled from where the first agent
        # left off, stdout and stderr with their ranks.
        wait_for(lambda: any(line.startswith("[rank1]: err") for line in _log_lines(state)),
                 10, "stderr lines")  # fmt: skip
        sup.signal_tree(signal.SIGUSR1)
        wait_for(lambda: any("usr1" in line for line in _log_lines(state)), 10,
                 "a line from after the signal")  # fmt: skip
        (run_dir / "end").touch()
        assert sup.wait(20) == 3  # learnt from the wrapper's status file, not from wait()
    finally:
        if sup.running:
            sup.stop(1.0)
    journal.close()
    assert exited == [3] and sup.ended_at is not None
    records = list(JournalReader(state).records())
    lines = [r["line"] for r in records if r["t"] == "log" and r["stream"] == "stdout"]
    assert lines[-1] == "bye"
    ticks = [int(line.split()[1]) for line in lines if line.startswith("tick")]
    assert ticks == list(range(ticks[0], ticks[-1] + 1))  # nothing missed, nothing twice
    before = [int(line.split()[1]) for line in _log_lines(tmp_path / "state1")
              if line.startswith("tick")]  # fmt: skip
    # No gap and no repeat between the two agents: the second resumes exactly where the
    # first had journaled to (its note of journaled offsets, not the older saved state).
    assert before and ticks[0] == before[-1] + 1
    assert any(r["t"] == "log" and r["rank"] == 1 and r["stream"] == "stderr"
               for r in records)  # fmt: skip
    exit_event = [r for r in records if r["t"] == "event"][-1]
    assert exit_event["kind"] == "job_exited" and exit_event["data"]["returncode"] == 3
    assert exit_event["data"]["pid"] == orphan["pid"]


def test_a_recycled_pid_is_not_taken_for_the_job(tmp_path: Path, orphan: dict) -> None:
    stranger = dict(orphan, pid_start=(orphan["pid_start"] or 0) + 1,
                    wrapper_start=(orphan["wrapper_start"] or 0) + 1)
    journal = Journal(tmp_path / "state2")
    sup = Supervisor.adopt(stranger, journal)
    assert not sup.found_running
    assert sup.tree_pids() == [] and sup.rank_pids() == {}
    assert sup.wait(10) is None and not sup.running  # ended, its exit status unknown
    sup.signal_tree(signal.SIGSTOP)  # reaches nobody: the real job keeps going
    out = tmp_path / "run" / "logs" / "j.out"
    size = out.stat().st_size
    wait_for(lambda: out.stat().st_size > size, 10, "the job still writing")
    journal.close()
    exited = [r for r in JournalReader(tmp_path / "state2").records() if r["t"] == "event"]
    assert exited[-1]["kind"] == "job_exited" and exited[-1]["data"]["returncode"] is None
    assert "exit status is unknown" in exited[-1]["msg"]


def test_killed_wrapper_leaves_the_status_unknown_but_the_end_seen(
    tmp_path: Path, orphan: dict
) -> None:
    os.kill(orphan["wrapper"], signal.SIGKILL)
    wait_for(lambda: not alive(orphan["wrapper"]), 10, "the wrapper gone")
    journal = Journal(tmp_path / "state2")
    sup = Supervisor.adopt(orphan, journal)
    assert sup.found_running  # the command itself still runs
    (tmp_path / "run" / "end").touch()
    assert sup.wait(20) is None and not sup.running
    journal.close()


def test_hang_deadline_is_the_last_step_plus_the_limit() -> None:
    det = HangDetector(k=3.0, floor=10.0, startup=60.0)
    assert det.deadline() is None and not det.hung(1e12)
    det.reset(100.0)
    assert det.deadline() == 160.0  # before the first step: the startup limit
    for step in range(1, 6):
        det.observe(step, 5.0, 200.0 + step)
    assert det.deadline() == 205.0 + 15.0  # k × median 5 s beats the 10 s floor
    assert not det.hung(219.999) and det.hung(220.0)  # at the deadline, not a tick after
    saved = det.state()
    other = HangDetector(k=3.0, floor=10.0, startup=60.0)
    other.restore(saved)
    assert other.deadline() == 220.0 and other.last_step == 5
    other.reset(300.0, new_attempt=False)  # an adoption: silence counted from it
    assert other.deadline() == 315.0 and other.last_step == 5


def test_run_command_is_adopted_by_a_restarted_daemon_not_started_twice(
    tmp_path: Path,
) -> None:
    state, run_dir = tmp_path / "state", tmp_path / "run"
    argv = [sys.executable, "-m", "agent", "run", "--state-dir", str(state), "--run-dir",
            str(run_dir), "--job", "cmd", "--stop-grace", "2", "--",
            sys.executable, "-c", JOB]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def events() -> list[dict]:
        if not (state / "journal_id").exists():
            return []
        return [r for r in JournalReader(state).records() if r["t"] == "event"]

    first = subprocess.Popen(argv, cwd=tmp_path, env=env)
    second = None
    try:
        started = wait_for(lambda: [e for e in events() if e["kind"] == "job_started"], 30,
                           "the command")[0]  # fmt: skip
        pid = started["data"]["pid"]
        wait_for(lambda: (state / "command.json").exists(), 10, "its saved identity")
        first.kill()
        first.wait(10)
        second = subprocess.Popen(argv, cwd=tmp_path, env=env)
        adopted = wait_for(lambda: [e for e in events() if e["kind"] == "job_adopted"], 30,
                           "the adoption")[0]  # fmt: skip
        assert adopted["data"]["pid"] == pid and alive(pid)
        assert len([e for e in events() if e["kind"] == "job_started"]) == 1
        second.send_signal(signal.SIGTERM)  # a clean stop ends the command with it
        assert second.wait(30) == 0
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        (run_dir / "end").touch()
    assert not alive(pid)
    exited = [e for e in events() if e["kind"] == "job_exited"]
    assert [e["data"]["pid"] for e in exited] == [pid]
    assert not (state / "command.json").exists()  # nothing left to adopt


def test_unusable_saved_job_is_reported_and_the_daemon_runs_on(tmp_path: Path) -> None:
    state = tmp_path / "state"
    jobstate.save(state, "broken", {"state": "running", "spec": {"name": "broken"}})
    (state / "jobs" / "torn.json").write_text('{"v": 1, "state": "runn')
    jobstate.save(state, "done", {"state": "finished", "spec": {}})  # nothing to adopt
    daemon = subprocess.Popen([sys.executable, "-m", "agent", "run", "--state-dir",
                               str(state)], cwd=tmp_path, env=dict(os.environ,
                                                                   PYTHONPATH=str(REPO)))
    try:
        def adoptions() -> list[dict]:
            if not (state / "journal_id").exists():
                return []
            return [r for r in JournalReader(state).records()
                    if r["t"] == "event" and r["kind"] == "job_adopted"]

        found = wait_for(lambda: a if len(a := adoptions()) == 2 else None, 30,
                         "two refusals")  # fmt: skip
        assert daemon.poll() is None
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    by_job = {e["job"]: e for e in found}
    assert set(by_job) == {"broken", "torn"}
    assert all(e["data"]["ok"] is False for e in found)
    assert "script" in by_job["broken"]["msg"]  # the spec's own complaint
    assert "unreadable" in by_job["torn"]["msg"]
