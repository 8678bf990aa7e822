"""The job operations as an operator types them: `cockpit launch/adjust/pause/resume/stop
JOB.toml --inventory INV.toml`, each returning only once every host acknowledged, against
a real agent daemon running the real trainer; the acks land in the job's recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from .conftest import FAST, REPO, TRAIN, AgentDaemon

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(200)]


def cockpit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=150)


def test_cli_operations_are_sent_and_acknowledged(
    tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path
) -> None:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(textwrap.dedent(f"""\
        [[hosts]]
        name = "local"
        address = "local"
        state_dir = {json.dumps(str(agent_daemon.state_dir))}
    """))
    args = ["--max-steps", "3000"]
    for setting in (f"data.dir={charlm_shards}", *FAST):
        args += ["--set", setting]
    job = tmp_path / "job.toml"
    job.write_text(textwrap.dedent(f"""\
        name = "cli"
        hosts = ["local"]
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp_path / "runs" / "cli"))}
        stop_grace = 5
        [env]
        PYTHONPATH = {json.dumps(str(REPO))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [resume]
        args = ["--resume", "{{checkpoint}}"]
    """))
    store = tmp_path / "cli.duckdb"
    common = [str(job), "--inventory", str(inventory), "--store", str(store)]

    launched = cockpit("launch", *common)
    assert launched.returncode == 0, launched.stderr + launched.stdout
    assert "local: ok" in launched.stdout and "Start job cli with torchrun" in launched.stdout
    d = agent_daemon
    d.wait_for(lambda: any(t["step"] >= 12 for t in d.train("cli")), 90, "step 12")

    adjusted = cockpit("adjust", *common, "--lr-scale", "0.5")
    assert adjusted.returncode == 0, adjusted.stderr + adjusted.stdout
    # The agent only wrote the knob for the trainer; the trainer's own ack says it applied.
    assert ("local: ok — control op adjust (lr_scale=0.5) written to the trainer's control "
            "file") in adjusted.stdout, adjusted.stdout
    assert "local: applied — rank 0: applied lr_scale=0.5" in adjusted.stdout, adjusted.stdout

    paused = cockpit("pause", *common)
    assert paused.returncode == 0, paused.stderr + paused.stdout
    event = d.wait_for(lambda: d.event("pause", lambda e: e["job"] == "cli"), 60, "pause")
    assert event["data"]["ok"] is True
    # Accepted is said as accepted; the command returns once the pause is complete, with
    # its step and checkpoint.
    assert "local: ok — control op pause accepted" in paused.stdout, paused.stdout
    assert f"local: paused — job cli paused at step {event['data']['step']} (checkpoint " \
        in paused.stdout, paused.stdout

    resumed = cockpit("resume", *common)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    # A second launch of the running job is refused before anything is sent (a host that
    # missed the first would start afresh and set the running part's checkpoints aside).
    again = cockpit("launch", *common)
    assert again.returncode != 0, again.stdout + again.stderr
    assert "job cli already runs on local (running): stop it to launch it afresh" in \
        again.stderr and "Nothing was sent." in again.stderr, again.stdout + again.stderr
    # A fork has no spec file of its own: it is operated through its parent's.
    forked = cockpit("fork", *common, "--name", "cli-fork-a")
    assert forked.returncode == 0, forked.stderr + forked.stdout
    # Its run dir is said once the agent's fork event says the checkpoint was copied.
    assert "local: forked — job cli-fork-a forked from cli at step " in forked.stdout, \
        forked.stdout
    assert f"fork: job cli-fork-a in {tmp_path / 'runs' / 'cli-fork-a'}" in forked.stdout, \
        forked.stdout
    d.wait_for(lambda: d.event("job_started", lambda e: e["job"] == "cli-fork-a"), 60,
               "the fork's start")  # fmt: skip
    fork_stopped = cockpit("stop", *common, "--fork-of-job", "cli-fork-a")
    assert fork_stopped.returncode == 0, fork_stopped.stderr + fork_stopped.stdout
    assert "Stop job cli-fork-a" in fork_stopped.stdout, fork_stopped.stdout
    d.wait_for(lambda: d.event("job_exited", lambda e: e["job"] == "cli-fork-a"), 60,
               "the fork's exit")  # fmt: skip
    stopped = cockpit("stop", *common)
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout

    # A refusal is reported per host with the agent's reason, and the exit status says so.
    ghost = tmp_path / "ghost.toml"
    ghost.write_text(job.read_text().replace('name = "cli"', 'name = "ghost"'))
    refused = cockpit("resume", str(ghost), "--inventory", str(inventory), "--store", str(store))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "local: FAILED" in refused.stdout and "ghost" in refused.stdout

    con = duckdb.connect(str(store), read_only=True)
    acks = con.execute("SELECT json_extract_string(data, '$.op'), "
                       "json_extract(data, '$.ok')::BOOLEAN FROM event "
                       "WHERE kind = 'control_ack' AND rank IS NULL ORDER BY seq").fetchall()
    con.close()
    ops = [op for op, ok in acks if ok]
    for op in ("launch", "adjust", "pause", "resume", "stop"):
        assert op in ops, acks


def test_a_fork_target_that_is_not_a_fork_of_the_spec_job_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'name = "x"\nhosts = ["local"]\nnproc_per_node = 1\nscript = "t.py"\n'
                   f'run_dir = {json.dumps(str(tmp_path / "runs"))}\n')
    done = cockpit("stop", str(job), "--fork-of-job", "other-fork-1")
    assert done.returncode != 0
    assert "--fork-of-job other-fork-1: not a fork of job x" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def _unreachable_job(tmp_path: Path) -> list[str]:
    """A one-host job whose host (and the inventory's other, gpu2) nothing listens for:
    the spec, inventory and recording arguments of a command on it."""
    job = tmp_path / "job.toml"
    job.write_text(f'name = "x"\nhosts = ["local"]\nnproc_per_node = 1\nscript = "t.py"\n'
                   f'run_dir = {json.dumps(str(tmp_path / "runs"))}\n')
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "local"\naddress = "127.0.0.1"\nport = 1\n\n'
                         '[[hosts]]\nname = "gpu2"\naddress = "127.0.0.1"\nport = 2\n')
    return [str(job), "--inventory", str(inventory), "--store", str(tmp_path / "r.duckdb")]


def test_scaling_a_job_that_is_not_elastic_is_refused_before_any_host_is_dialled(
        tmp_path: Path) -> None:
    """Its one host is not reachable: the refusal does not wait for it."""
    done = cockpit("scale", *_unreachable_job(tmp_path), "--add", "gpu2")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == ('cockpit: job x is not elastic: its spec needs nnodes = "MIN:MAX" '
                           "to add or remove hosts\n")


def test_excluding_a_host_the_inventory_does_not_know_is_refused_before_dialling(
        tmp_path: Path) -> None:
    done = cockpit("relaunch", *_unreachable_job(tmp_path), "--exclude", "gX")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith("cockpit: gX: not in the inventory "), done.stderr


def test_bad_job_spec_is_reported_with_file_and_line(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\nhosts = ["local"]\nnproc_per_node = "two"\n')
    done = cockpit("launch", str(job))
    assert done.returncode == 2
    assert f"{job}:3" in done.stderr and "nproc_per_node" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_connect_timeout_bounds_the_wait_for_a_host_that_is_down(tmp_path: Path) -> None:
    done = cockpit("pause", *_unreachable_job(tmp_path), "--connect-timeout", "1.5")
    assert done.returncode == 2, done
    assert "connecting to local (up to 1.5 s)" in done.stdout, done.stdout
    assert done.stderr.startswith("cockpit: no host of job x is connected after 1.5 s (local: "
                                  "unreachable"), done.stderr
    assert done.stderr.rstrip().endswith("nothing was sent; the pause needs at least one")
    assert "Ask rank 0" not in done.stdout  # no description of what is not done
