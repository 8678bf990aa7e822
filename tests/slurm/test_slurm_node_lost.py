"""A node that stops answering under a running job, on the real cluster.

The job's node's slurmd is frozen (SIGSTOP): the node is alive for its processes but
dead to slurmctld, as after a kernel hang or a network cut. After `SlurmdTimeout` (6 s
on this cluster, 300 s by default) slurmctld sets the node DOWN, "Not responding", and
ends the job NODE_FAIL (this one may not be requeued). The cockpit records the end and
an interruption naming the node and Slurm's reason. Thawed, the node answers again
and comes back by itself (`ReturnToService=1`).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.control.jobspec import parse_jobspec
from cockpit.control.slurm import RUNNING, SlurmJob
from cockpit.transport.run_command import LocalCommands
from tests.harness.slurm import SlurmCluster, SlurmUnavailable, slurm_cluster
from tests.slurm.conftest import tiny_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LIMIT_S = 180.0  # bounds a hang only: slurmctld's ping and timeout clocks


@pytest.fixture(scope="module")
def quick_to_down() -> Iterator[SlurmCluster]:
    """The test cluster, setting a silent node DOWN after 6 s (SlurmdTimeout)."""
    try:
        with slurm_cluster({"SlurmdTimeout": "6"}) as cluster:
            yield cluster
    except SlurmUnavailable as exc:
        pytest.skip(f"no real Slurm here: {exc}")


def test_a_node_that_stops_answering_ends_the_job_node_fail_not_responding(
        quick_to_down: SlurmCluster, tmp_path: Path) -> None:
    slurm = quick_to_down
    started = tmp_path / "started"
    text = tiny_spec(tmp_path, "lost", "lost",
                     f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
                     "time.sleep(600)\n", 'extra_sbatch = ["--no-requeue"]\n', nodes=1)
    records: list[bytes] = []
    job = SlurmJob(parse_jobspec(text, "lost.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)), emit=lambda host, chunk: records.append(chunk))
    job.submit()
    bad = job.wait(lambda s: s.state == RUNNING, LIMIT_S).nodes
    # The job step's tasks too: frozen before it launched them, the node's slurmd leaves
    # srun's launch unanswered, srun gives up and the job ends FAILED, not lost. The step
    # is listed (squeue -s) before its launch reaches the node, so the test waits for the
    # training script itself to have started.
    deadline = time.monotonic() + LIMIT_S
    while not started.exists():
        assert time.monotonic() < deadline, f"the job's script never started on {bad}"
        time.sleep(0.2)
    (slurmd,) = [p for p in slurm.procs
                 if isinstance(p.args, list) and "slurmd" in str(p.args[0]) and bad in p.args]
    slurmd.send_signal(signal.SIGSTOP)
    try:
        ended = job.wait_ended(LIMIT_S)
        assert ended.state == "NODE_FAIL" and ended.nodes == bad, ended
        causes = [json.loads(line)["data"] for chunk in records
                  for line in chunk.splitlines() if b'"interruption"' in line]
        assert [c["cause"] for c in causes] == ["slurm_node_fail"], causes
        (failed,) = causes[0]["failed_nodes"]
        assert failed["node"] == bad and failed["state"].startswith("down"), failed
        assert failed["reason"] == "Not responding", failed
    finally:
        slurmd.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + LIMIT_S
    while not slurm.node_states().get(bad, "").startswith("idle"):
        assert time.monotonic() < deadline, slurm.node_states()
        time.sleep(0.5)
