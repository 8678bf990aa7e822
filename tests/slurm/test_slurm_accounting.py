"""A finished job's end once slurmctld forgot it, on the real cluster.

slurmctld keeps a finished job for `MinJobAge` seconds (300 by default); a cockpit that
looks later asks `sacct`. This cluster, like many small ones, has no accounting
(`AccountingStorageType=accounting_storage/none`: sacct says "Slurm accounting storage
is disabled"), but keeps a job completion record per job (`JobCompType=jobcomp/
filetxt`). Here MinJobAge is 2 s: a completed, a failed and a cancelled job are each
looked at only after slurmctld forgot them, and their state, exit code and elapsed time
come from that record and reach the report, with where they came from. A job nobody
knows is UNKNOWN with both reasons.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.control.jobspec import parse_jobspec
from cockpit.control.slurm import RUNNING, SlurmJob, parse_scontrol
from cockpit.read.report import render_report
from cockpit.store.database import Store
from cockpit.transport.run_command import LocalCommands
from tests.harness.slurm import SlurmCluster, SlurmUnavailable, slurm_cluster
from tests.slurm.conftest import tiny_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LIMIT_S = 180.0  # bounds a hang only: slurmctld purges forgotten jobs on its own clock


@pytest.fixture(scope="module")
def forgetful() -> Iterator[SlurmCluster]:
    """The test cluster, forgetting a finished job after 2 s (MinJobAge)."""
    try:
        with slurm_cluster({"MinJobAge": "2"}) as cluster:
            yield cluster
    except SlurmUnavailable as exc:
        pytest.skip(f"no real Slurm here: {exc}")


def _completion(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """Slurm's own completion record of the job, read by the test."""
    lines = [ln for ln in (cluster.root / "jobcomp.txt").read_text().splitlines()
             if ln.startswith(f"JobId={job_id} ")]
    assert lines, f"no completion record of {job_id}"
    return parse_scontrol(lines[-1])


def _forgotten(cluster: SlurmCluster, job_id: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while cluster.run("scontrol", "show", "job", job_id, check=False).returncode == 0:
        assert time.monotonic() < deadline, f"slurmctld still knows job {job_id}"
        time.sleep(1)


def test_a_forgotten_jobs_end_comes_from_the_completion_record(
        forgetful: SlurmCluster, tmp_path: Path) -> None:
    codes = {"done": "import time\ntime.sleep(2)\n",
             "failed": "import sys\nsys.exit(3)\n",
             "cancelled": "import time\ntime.sleep(600)\n"}
    jobs: dict[str, SlurmJob] = {}
    stores: dict[str, Store] = {}
    for name, code in codes.items():
        text = tiny_spec(tmp_path, name, name, code, nodes=1)
        stores[name] = Store(tmp_path / f"{name}.duckdb")
        jobs[name] = SlurmJob(parse_jobspec(text, f"{name}.toml"), LocalCommands(
            forgetful.env, cwd=str(tmp_path)), emit=stores[name].ingest)
        jobs[name].submit()
    # Seen running once by the cockpit, then cancelled by someone else.
    jobs["cancelled"].wait(lambda s: s.state == RUNNING, LIMIT_S)
    forgetful.run("scancel", str(jobs["cancelled"].job_id))
    for job in jobs.values():
        _forgotten(forgetful, str(job.job_id))
    sacct = forgetful.run("sacct", "-j", str(jobs["done"].job_id), check=False)
    assert sacct.returncode != 0  # no accounting here: the path below is the one taken

    expected = {"done": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}
    for name, job in jobs.items():
        ended = job.poll()
        record = _completion(forgetful, str(job.job_id))
        assert (ended.state, ended.source) == (expected[name], "jobcomp"), ended
        assert ended.exit_code == record["ExitCode"], (ended, record)
        assert ended.start_time == record["StartTime"] and ended.end_time == record[
            "EndTime"]
        assert ended.elapsed is not None
        stores[name].close()
        data = json.loads(render_report(tmp_path / f"{name}.duckdb", fmt="json"))["slurm"]
        current = data["current"]
        assert (current["state"], current["exit_code"], current["exit_source"]) == (
            expected[name], record["ExitCode"], "jobcomp"), current
        assert current["elapsed"] == ended.elapsed
        text = render_report(tmp_path / f"{name}.duckdb", fmt="text")
        assert expected[name] in text and f"{record['ExitCode']} (from jobcomp)" in text, text
        assert f"{ended.elapsed:.0f} s (Slurm's start to end)" in text, text
        causes = [c["cause"] for c in data["causes"]]
        # A cancel by a person (here from outside the cockpit) ends the job as a stop,
        # not as a failure to recover from.
        assert causes == ({"done": [], "failed": ["slurm_failed"],
                           "cancelled": []}[name]), data["causes"]
    assert jobs["done"].last is not None and jobs["done"].last.elapsed is not None
    assert jobs["done"].last.elapsed >= 2  # it slept 2 s
    assert jobs["failed"].last is not None and jobs["failed"].last.exit_code != "0:0"


def test_a_job_no_one_knows_is_unknown_with_both_reasons(forgetful: SlurmCluster,
                                                         tmp_path: Path) -> None:
    text = tiny_spec(tmp_path, "ghost", "ghost", "pass\n", nodes=1)
    job = SlurmJob(parse_jobspec(text, "ghost.toml"), LocalCommands(forgetful.env))
    job.job_id = "999999999"  # never submitted on this cluster
    state = job.look()
    assert (state.state, state.source) == ("UNKNOWN", "none"), state
    assert "sacct: Slurm accounting storage is disabled" in state.reason, state.reason
    assert "no completion record in" in state.reason, state.reason
