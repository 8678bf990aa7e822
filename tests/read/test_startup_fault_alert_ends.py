"""An alert about a failed start (a start-up fault the agent read from torchrun's
output, a failed launch) stands while the start is pending, and only then: through the
agent's own restarts that hit it again, until that host's part makes a step (a restart
got through), the operator relaunches it, stops or pauses the job, or takes the host
out of it. Read through a real store and `build_snapshot`, as the screen reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.read import synthetic as syn

CODE = "rdzv_unresolvable"
LAST = syn.step_ts(syn.STEPS - 1)
_seq = [10**6]


def _next() -> int:
    _seq[0] += 1
    return _seq[0]


def _fault(ts: float) -> bytes:
    """node-b's agent names an unresolvable rendezvous endpoint, as startup_faults does."""
    return encode("alert", _next(), {
        "job": "job-1", "rank": None, "kind": "resource", "severity": "critical",
        "code": CODE, "where": {"endpoint": "gpu1:29400"},
        "what": "job job-1: the rendezvous endpoint gpu1:29400 does not resolve on this host",
        "hint": "use a name or address every host of the job resolves"}, ts=ts)


def _event(kind: str, ts: float, **data: object) -> bytes:
    return encode("event", _next(), {"kind": kind, "job": "job-1", "rank": None,
                                     "step": None, "msg": kind, "data": data}, ts=ts)


def _steps(ts: float, ranks: tuple[int, ...]) -> bytes:
    return b"".join(encode("train", _next(), {
        "job": "job-1", "rank": rank, "step": syn.STEPS, "loss": 0.6,
        "samples": syn.SAMPLES_PER_RANK, "step_time": 1.0}, ts=ts + 0.001 * rank)
        for rank in ranks)


def _standing(path: Path) -> bool:
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="LIVE")
    return CODE in {a.code for a in snap.alerts}


@pytest.fixture
def faulted(tmp_path: Path) -> Path:
    """The job's node-b failed its start (relaunched by the operator 1 s after the last
    step, the fault 2 s after); its agent's own restart then hit the fault again."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-a", _event("job_started", LAST + 1, reason="relaunch"))
        store.ingest("node-b", _event("job_started", LAST + 1, reason="relaunch"))
        store.ingest("node-b", _fault(LAST + 2))
        store.ingest("node-b", _event("job_started", LAST + 10, reason="recovery"))
        store.ingest("node-b", _fault(LAST + 11))
    assert _standing(path)
    return path


@pytest.mark.slow
def test_it_ends_when_that_hosts_part_steps_after_a_restart_got_through(
        faulted: Path) -> None:
    """node-a's ranks stepping does not end node-b's alert (node-a may train on alone
    in an elastic job); node-b's own step after the fault does, and the report, which
    reads the same snapshot, drops it too."""
    with Store(faulted) as store:
        store.ingest("node-a", _steps(LAST + 20, (0, 1)))
    assert _standing(faulted)
    with Store(faulted) as store:
        store.ingest("node-b", _steps(LAST + 21, (2, 3)))
    assert not _standing(faulted)
    assert CODE not in render_report(faulted)


def test_a_step_before_the_newest_fault_does_not_end_it(tmp_path: Path) -> None:
    """node-b trained (a step), then a later restart failed its start again: the
    fault is news, and the earlier step does not end it."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-b", _steps(LAST + 5, (2, 3)))
        store.ingest("node-b", _event("job_started", LAST + 10, reason="recovery"))
        store.ingest("node-b", _fault(LAST + 11))
    assert _standing(path)


@pytest.mark.slow
@pytest.mark.parametrize("end", ["stop", "stop_on_a_peer", "pause", "excluded", "scale"])
def test_it_ends_when_the_operator_ends_the_job_or_takes_the_host_out(
        faulted: Path, end: str) -> None:
    """The operator stopped the job (on the host the stop went to, or on a peer that
    followed it), paused it, relaunched it without node-b, or scaled node-b out: no
    start is pending on node-b any more."""
    host, record = {
        "stop": ("node-b", _event("job_exited", LAST + 30, returncode=-15,
                                  ended_for="stop")),
        "stop_on_a_peer": ("node-a", _event("job_exited", LAST + 30, returncode=-15,
                                            ended_for="stop")),
        "pause": ("node-a", _event("pause", LAST + 30, mode="checkpoint", ok=True)),
        "excluded": ("node-b", _event("relaunch", LAST + 30, excluded=True)),
        "scale": ("node-b", _event("job_exited", LAST + 30, returncode=-15,
                                   ended_for="scale")),
    }[end]
    with Store(faulted) as store:
        store.ingest(host, record)
    assert not _standing(faulted)


@pytest.mark.slow
@pytest.mark.parametrize("record", [
    _event("job_exited", LAST + 30, returncode=1),  # the attempt failed again
    _event("job_exited", LAST + 30, returncode=-15, ended_for="shutdown"),
    _event("pause", LAST + 30, mode="checkpoint", ok=False),  # a pause that failed
    _event("job_started", LAST + 30, reason="recovery"),
])
def test_what_leaves_the_start_pending_does_not_end_it(faulted: Path, record: bytes) -> None:
    """A failed attempt, the agent shutting down, a refused pause, another restart by
    the agent: the start is still pending, and the alert stays."""
    with Store(faulted) as store:
        store.ingest("node-b", record)
    assert _standing(faulted)
