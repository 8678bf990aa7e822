"""The Slurm launcher's checks and scripts, without a cluster.

The scripts are run for real by bash, with `scontrol` and `srun` replaced by small
programs on PATH and the job's interpreter by one that prints its argv: every hostile
value must arrive as exactly one argument (or environment value), byte for byte.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cockpit.control.jobspec import JobSpecError, parse_jobspec
from cockpit.control.slurm import (
    RDZV_PORT_BASE,
    RDZV_PORT_SPAN,
    QueueState,
    ScriptPaths,
    SlurmJob,
    extra_problem,
    launcher_of,
    parse_scontrol,
    queue_wait,
    render_batch,
    render_node,
)
from cockpit.store.database import Store
from cockpit.transport.run_command import CommandResult
from tests.store.wire import count

EVIL = "x $(touch pwned) `touch pwned` ';touch pwned;' \"$HOME\" \\ {}"


def _spec(tmp_path: Path, launcher: str = "", **top: object):
    fields = {"name": "job", "nproc_per_node": 2, "script": "train.py",
              "run_dir": str(tmp_path / "run"), **top}
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()
                   if not isinstance(v, dict))
    for table, items in fields.items():
        if isinstance(items, dict):
            text += f"[{table}]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                              for k, v in items.items())
    text += textwrap.dedent("""\
        [resume]
        args = ["--resume", "at {checkpoint} now"]
        [launcher]
        kind = "slurm"
    """) + ("" if "nodes =" in launcher else "nodes = 2\n") + launcher
    return parse_jobspec(text, "spec.toml")


def _refused(tmp_path: Path, launcher: str) -> str:
    spec = _spec(tmp_path, launcher)
    with pytest.raises(JobSpecError) as info:
        launcher_of(spec)
    return str(info.value)


def test_launcher_keys_are_checked(tmp_path: Path) -> None:
    assert "launcher.partition" in _refused(tmp_path, 'partition = "debug; reboot"\n')
    assert "launcher.account" in _refused(tmp_path, 'account = "a\\nb"\n')
    assert "launcher.qos" in _refused(tmp_path, 'qos = "-x"\n')
    assert "launcher.time_limit" in _refused(tmp_path, 'time_limit = "1h"\n')
    assert "launcher.nodes" in _refused(tmp_path, "nodes = 0\n")
    assert "launcher.signal_seconds" in _refused(tmp_path, "signal_seconds = 0\n")
    assert "launcher.gpus_per_node" in _refused(tmp_path, "gpus_per_node = 65\n")
    ok = launcher_of(_spec(tmp_path, 'partition = "gpu"\ntime_limit = "1-02:00:00"\n'
                                     'gpus_per_node = 8\naccount = "proj.a"\nqos = "high"\n'))
    assert (ok.partition, ok.time_limit, ok.gpus_per_node) == ("gpu", "1-02:00:00", 8)


def test_a_slurm_job_needs_no_hosts_but_an_elastic_one_is_refused(tmp_path: Path) -> None:
    assert _spec(tmp_path).hosts == ()
    with pytest.raises(JobSpecError, match=r"launcher\.kind"):
        parse_jobspec('name = "j"\nhosts = ["a"]\nnproc_per_node = 1\nscript = "t.py"\n'
                      'run_dir = "/r"\n[launcher]\nkind = "pbs"\n')
    with pytest.raises(JobSpecError, match="elastic"):
        launcher_of(_spec(tmp_path, hosts=["a"], nnodes="1:2",
                          rendezvous={"endpoint": "a:1"}))


@pytest.mark.parametrize(("extra", "why"), [
    ("--comment=a\nrm -rf ~", "control character"),
    ("--wrap=touch pwned", "set by the launcher"),
    ("--output=/etc/x", "set by the launcher"),
    ("--job-name=x", "set by the launcher"),
    ("-p debug", "one long option"),
    ("--comment a", "one long option"),
    ("--comment=a\\b", "backslash"),
])
def test_extra_sbatch_refused(extra: str, why: str) -> None:
    assert why in (extra_problem(extra) or "")


def test_extra_sbatch_allowed() -> None:
    assert extra_problem("--exclusive") is None
    assert extra_problem("--comment=" + EVIL.replace("\\", "")) is None
    assert extra_problem("--exclude=n[3-4]") is None


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.starts
def test_batch_script_quotes_every_value(tmp_path: Path) -> None:
    printer = _executable(tmp_path / "py thon", "#!/bin/sh\n"
                          'if [ "$1" = -c ]; then echo "/ck pts/$(printf %s "$3" | wc -c)"; '
                          "exit; fi\nexit 1\n")
    spec = _spec(tmp_path, 'partition = "debug"\nextra_sbatch = '
                 + json.dumps(["--comment=" + EVIL.replace("\\", ""), "--exclusive"]) + "\n",
                 name="n " + EVIL.replace("\\", ""), python=str(printer),
                 env={"EVIL": EVIL})
    launcher = launcher_of(spec)
    paths = ScriptPaths(spec.run_dir, "s")
    batch = render_batch(spec, launcher, paths, resume=True)
    sbatch = [line for line in batch.splitlines() if line.startswith("#SBATCH")]
    assert len(sbatch) == 8, sbatch  # one line per option: nothing spilled over
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "scontrol", "#!/bin/sh\nif [ \"$2\" = hostnames ]; then "
                "echo n7; echo n8; else echo 'NodeName=n7 NodeAddr=10.0.0.7 Port=1'; fi\n")
    _executable(bin_dir / "srun", "#!/bin/sh\nenv > \"$OUT/env\"; "
                "printf '%s\\n' \"$@\" > \"$OUT/argv\"\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path), "HOME": str(tmp_path),
           "SLURM_JOB_NODELIST": "n[7-8]", "SLURM_JOB_ID": "42"}
    done = subprocess.run(["bash", "-c", batch], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("pwned")), "a value ran as a command"
    assert (tmp_path / "argv").read_text().splitlines()[-2:] == ["bash", paths.node]
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines()
                if "=" in line)
    assert seen["EVIL"] == EVIL
    assert seen["COCKPIT_SLURM_RDZV"] == "10.0.0.7:20042"
    assert seen["COCKPIT_SLURM_HEAD"] == "n7"
    # The newest checkpoint was asked of the job's own Python, with the checkpoint dir.
    ckpt = str(tmp_path / "run" / "checkpoints")
    assert seen["COCKPIT_RESUME_FROM"] == f"/ck pts/{len(ckpt)}"


def _listening_in_span() -> socket.socket:
    """A socket listening on a port of the rendezvous span, as another program's would."""
    for port in range(RDZV_PORT_BASE + 4000, RDZV_PORT_BASE + RDZV_PORT_SPAN):
        held = socket.socket()
        try:
            held.bind(("", port))
        except OSError:
            held.close()
            continue
        held.listen()
        return held
    raise AssertionError("no free port in the rendezvous span")


@pytest.mark.starts
def test_rendezvous_port_held_by_another_program_is_stepped_past(tmp_path: Path) -> None:
    """The job id picks a port below the ephemeral range; when something on the head
    node already listens there, the batch script exports the next free one instead."""
    assert RDZV_PORT_BASE + RDZV_PORT_SPAN <= 32768  # Linux's ephemeral ports start there
    spec = _spec(tmp_path, python=sys.executable)
    paths = ScriptPaths(spec.run_dir, "s")
    batch = render_batch(spec, launcher_of(spec), paths, resume=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "scontrol", "#!/bin/sh\nif [ \"$2\" = hostnames ]; then "
                "echo n7; else echo 'NodeName=n7 NodeAddr=127.0.0.1 Port=1'; fi\n")
    _executable(bin_dir / "srun", "#!/bin/sh\nenv > \"$OUT/env\"\n")
    with _listening_in_span() as held:
        port = held.getsockname()[1]
        job_id = port - RDZV_PORT_BASE + 3 * RDZV_PORT_SPAN
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path),
               "HOME": str(tmp_path), "SLURM_JOB_NODELIST": "n7",
               "SLURM_JOB_ID": str(job_id)}
        done = subprocess.run(["bash", "-c", batch], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines()
                if "=" in line)
    host, _, chosen = seen["COCKPIT_SLURM_RDZV"].rpartition(":")
    assert host == "127.0.0.1"
    assert port < int(chosen) < RDZV_PORT_BASE + RDZV_PORT_SPAN, (port, chosen)


@pytest.mark.starts
def test_node_script_passes_every_value_as_one_argument(tmp_path: Path) -> None:
    printer = _executable(tmp_path / "py thon", "#!/bin/sh\nprintf '%s\\0' \"$@\" > "
                          "\"$OUT/argv\"\n")
    spec = _spec(tmp_path, name="n " + EVIL.replace("\\", ""), python=str(printer),
                 script=EVIL, args=[EVIL, "--flag"], run_dir=str(tmp_path / ("r " + "$(x)")))
    node = render_node(spec, launcher_of(spec))
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "SLURMD_NODENAME": "n8",
           "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2", "COCKPIT_SLURM_HEAD": "n7",
           "COCKPIT_SLURM_RDZV": "10.0.0.7:20042", "COCKPIT_RESUME_FROM": "/c p/$(x)"}
    done = subprocess.run(["bash", "-c", node], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().split("\0")[:-1]
    shared = tmp_path / "r $(x)"
    assert argv[:argv.index("--")] == [
        "-m", "agent", "run", "--state-dir", f"{shared}/agents/n8", "--run-dir",
        f"{shared}/nodes/n8", "--job", spec.name, "--stop-grace", "10", "--exit-with-job"]
    torchrun = argv[argv.index("--") + 1:]
    assert torchrun[0] == str(printer)
    assert torchrun[torchrun.index("--rdzv-id") + 1] == spec.name + "-42"
    assert torchrun[torchrun.index("--rdzv-conf") + 1] == "is_host=0"
    assert torchrun[-5:] == [EVIL, EVIL, "--flag", "--resume", "at /c p/$(x) now"]
    # This node's run dir sees the shared checkpoints and controls.
    assert os.readlink(shared / "nodes" / "n8" / "checkpoints") == str(shared / "checkpoints")
    assert os.readlink(shared / "nodes" / "n8" / "control") == f"{shared}/control"
    assert not list(tmp_path.rglob("pwned"))


def test_scontrol_and_queue_wait() -> None:
    fields = parse_scontrol("JobId=7 JobName=a b JobState=PENDING Reason=Nodes required "
                            "for job are DOWN NodeList=(null) SubmitTime=2026-01-01T10:00:00 "
                            "StartTime=2026-01-01T10:02:30")
    assert fields["JobState"] == "PENDING"
    assert fields["Reason"] == "Nodes required for job are DOWN"
    assert fields["JobName"] == "a b"
    state = QueueState("7", "RUNNING", submit_time=fields["SubmitTime"],
                       start_time=fields["StartTime"])
    assert queue_wait(state) == 150.0
    assert queue_wait(QueueState("7", "PENDING", start_time="Unknown")) is None


class _Scripted:
    """Commands answered from a table (the e2e tests use the real Slurm clients)."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.seen = answers, []

    def run(self, argv, stdin=None, timeout=60.0):  # type: ignore[no-untyped-def]
        self.seen.append(list(argv))
        out = self.answers.get(argv[0], "")
        return CommandResult(tuple(argv), 0, out, "")


def test_events_reach_a_store(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    store = Store(tmp_path / "rec.duckdb")
    commands = _Scripted({"sbatch": "17;cluster\n", "scontrol": (
        "JobId=17 JobState=RUNNING Reason=None NodeList=n[1-2] Partition=debug "
        "SubmitTime=2026-01-01T10:00:00 StartTime=2026-01-01T10:00:05 ExitCode=0:0")})
    job = SlurmJob(spec, commands, emit=store.ingest)
    assert job.submit() == "17"
    assert [argv[:2] for argv in commands.seen if argv[0] == "sbatch"] == [
        ["sbatch", "--parsable"]]
    # The id is kept on the cluster side, for a later command's `attach`.
    assert commands.seen[-1][-1] == str(tmp_path / "run" / "slurm" / "current-job")
    assert job.poll().state == "RUNNING"
    with store.cursor() as cur:
        rows = cur.execute("SELECT kind, data FROM event WHERE host = 'slurm:job' "
                           "ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == ["slurm_submitted", "slurm_running"]
    submitted, running = (json.loads(r[1]) for r in rows)
    assert submitted["slurm_job_id"] == "17" and "#SBATCH --nodes=2" in submitted["batch_text"]
    assert running["queue_wait"] == 5.0 and running["nodes"] == "n[1-2]"
    assert count(store, "event", "host = 'slurm:job'") == 2
    store.close()
