"""A pause pressed as the job reached its end: the processes exit while the pause waits
for its checkpoint. The pause says so (not "no checkpoint within 300 s", which is not
what happened), and the job ends as it ended: finished."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.journal.journal import Journal, JournalReader
from tests.harness.waiting import wait_for


def _wait_for(cond: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """`timeout` only bounds a hang (`tests.harness.waiting.wait_for`, polled every 20 ms)."""
    wait_for(cond, timeout, what, poll=0.02)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pause_the_jobs_end_overtook_says_so_and_the_job_is_finished(
        tmp_path: Path) -> None:
    pytest.importorskip("torch")  # every attempt starts under torchrun
    from agent.job.launch import LaunchSpec
    from agent.job.managed import FINISHED, RUNNING, ManagedJob

    gate = tmp_path / "go"
    script = tmp_path / "last_steps.py"
    # Its last steps: it ends soon after the pause is asked, with no checkpoint.
    script.write_text("import pathlib, sys, time\n"
                      f"while not pathlib.Path({str(gate)!r}).exists():\n"
                      "    time.sleep(0.05)\n"
                      "time.sleep(0.5)\n")
    spec = LaunchSpec({"name": "ending", "python": sys.executable, "script": str(script),
                       "nproc_per_node": 1, "run_dir": str(tmp_path / "run"),
                       "stop_grace": 2, "pause_timeout": 300,
                       "env": {"OMP_NUM_THREADS": "1"}})
    journal = Journal(tmp_path / "state")
    job = ManagedJob(spec, journal, {}, log=lambda msg: None)
    job.start()
    try:
        _wait_for(lambda: job.state == RUNNING and job.supervisor is not None
                  and job.supervisor.running, "the job to start")
        gate.touch()
        job.request("pause", {"id": "p-1"})

        def pauses() -> list[dict]:
            return [r for r in JournalReader(tmp_path / "state").records()
                    if r["t"] == "event" and r["kind"] == "pause"]

        _wait_for(pauses, "the pause's outcome")
        (event,) = pauses()
        assert event["data"]["ok"] is False
        assert "pause not done: its processes exited with code 0 after" in event["msg"]
        assert "before a checkpoint was saved" in event["msg"]
        assert "300 s" not in event["msg"] and "keeps running" not in event["msg"]
        _wait_for(lambda: job.state == FINISHED, "the job to read finished")
    finally:
        job.close(2.0)
        journal.close()
