"""A stalled job's cause is looked for on its own hosts: on a shared fleet, another
host whose memory is full and whose GPUs idle has nothing to do with it."""

from __future__ import annotations

from pathlib import Path

from agent.wire.protocol import encode
from cockpit.analysis.stalls import CONTENTION
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Progress
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, gpu, train

STEPS = 30


def _host_sample(seq: int, ts: float, mem_used: int) -> bytes:
    return encode("host", seq, {"cpu": 5.0, "mem_used": mem_used, "mem_total": 100,
                                "disk_used": 1, "disk_total": 100}, ts=ts)


def _stalled(tmp_path: Path, job_mem_used: int, other_mem_used: int) -> Progress:
    """The progress of a job on host `job` that stopped stepping five minutes ago, its
    host's GPU idle since, beside host `other` whose GPU idles too."""
    with Store(tmp_path / f"fleet-{job_mem_used}-{other_mem_used}.duckdb") as store:
        for s in range(1, STEPS + 1):
            store.ingest("job", train(3 * s, s, ts=TS0 + s) + gpu(3 * s + 1, 0, 0.0, TS0 + s)
                         + _host_sample(3 * s + 2, TS0 + s, job_mem_used))
            store.ingest("other", gpu(2 * s, 0, 0.0, TS0 + s)
                         + _host_sample(2 * s + 1, TS0 + s, other_mem_used))
        return build_snapshot(StoreReader(store), until_ts=None, label="LIVE",
                              now=TS0 + STEPS + 300).progress


def test_a_full_host_that_runs_none_of_the_ranks_is_not_the_cause(tmp_path: Path) -> None:
    progress = _stalled(tmp_path, job_mem_used=20, other_mem_used=99)
    assert progress.stalled
    assert progress.stall_cause != CONTENTION
    assert "other" not in (progress.stall_detail or "")


def test_the_jobs_own_full_host_is(tmp_path: Path) -> None:
    progress = _stalled(tmp_path, job_mem_used=99, other_mem_used=20)
    assert progress.stalled and progress.stall_cause == CONTENTION
    assert "host job: memory 99%" in (progress.stall_detail or "")
