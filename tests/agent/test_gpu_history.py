"""This host's GPU faults across runs, kept in the agent's state dir
(agent.job.gpu_history): bounded, checked on load (an unusable file is set aside and
counted, never fatal), and read by the elastic job's exclusion of a faulty host and its
choice of a spare (agent.job.membership)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from agent.job import gpu_history
from agent.job.gpu_history import GpuHistory
from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.membership import claim_spare
from agent.job.recovery import Diagnosis
from agent.journal.journal import Journal, JournalReader
from agent.wire import paths
from agent.wire.causes import GPU_FAULT, HANG, USER_CODE
from tests.harness.elastic import NAME, elastic_spec

HARDWARE_XID = 79  # fallen off the bus
APP_XID = sorted(gpu_history.APP_XIDS)[0]


def test_hardware_xids_are_kept_across_agents_and_application_ones_are_not(
    tmp_path: Path,
) -> None:
    history = GpuHistory(tmp_path)
    now = time.time()
    assert history.load() is None  # no file yet: an empty history
    assert history.note_xid(2, HARDWARE_XID, now - 100, ["run1"]) is True
    assert history.note_xid(2, APP_XID, now - 50, ["run1"]) is False
    history.note_xid(2, HARDWARE_XID, now - 10, ["run2"])
    later = GpuHistory(tmp_path)  # the next agent, after a restart
    assert later.load() is None
    found = gpu_history.summary(later.entries, now)
    assert (found["faults"], found["xids"], found["gpus"], found["jobs"]) == (
        2, {str(HARDWARE_XID): 2}, [2], ["run1", "run2"])
    assert gpu_history.describe(found) == (
        f"GPU 2 raised XID {HARDWARE_XID} (x2) in the last "
        f"{gpu_history.WINDOW_S / 86400:g} d")
    # Outside the window, a fault no longer counts.
    assert gpu_history.summary(later.entries, now + gpu_history.WINDOW_S)["faults"] == 0


def test_the_history_is_bounded_in_age_and_count(tmp_path: Path) -> None:
    history = GpuHistory(tmp_path)
    now = time.time()
    history.note_xid(0, HARDWARE_XID, now - gpu_history.KEEP_S - 1)
    # As if the GPU raised XIDs in a loop (one write here rather than a thousand).
    history.entries += [{"at": now + i * 1e-3, "gpu": 1, "kind": "xid",
                         "code": HARDWARE_XID, "jobs": []}
                        for i in range(gpu_history.MAX_ENTRIES + 5)]
    history.note_xid(1, HARDWARE_XID, now + 1.0)
    assert len(history.entries) == gpu_history.MAX_ENTRIES
    assert GpuHistory(tmp_path).load() is None
    assert {e["gpu"] for e in history.entries} == {1}  # the month-old one went first
    # The largest entry there can be, MAX_ENTRIES times, is still a file `load` accepts.
    history.note_xid(1, HARDWARE_XID, now + 2.0, [f"{k:02d}{'j' * 500}" for k in range(50)])
    largest = history.entries[-1]
    assert len(largest["jobs"]) == gpu_history.MAX_JOBS
    history.entries = [dict(largest, at=now + 3.0)] * gpu_history.MAX_ENTRIES
    history.note_ecc(0, "GPU-" + "u" * 500, 0, now)
    assert paths.gpu_history_file(tmp_path).stat().st_size <= gpu_history.MAX_BYTES
    assert GpuHistory(tmp_path).load() is None


def test_ecc_counts_only_rises_the_agent_saw_and_remembers_the_count(tmp_path: Path) -> None:
    history = GpuHistory(tmp_path)
    now = time.time()
    assert history.note_ecc(0, "GPU-a", 7, now) == 0  # first sight: errors of no date
    assert history.note_ecc(0, "GPU-a", 7, now) == 0
    assert history.note_ecc(0, "GPU-a", 10, now) == 3
    again = GpuHistory(tmp_path)
    again.load()
    assert again.note_ecc(0, "GPU-a", 10, now) == 0  # known across an agent restart
    assert gpu_history.summary(again.entries, now)["ecc"] == 3


def test_an_unusable_file_is_set_aside_counted_and_replaced(tmp_path: Path) -> None:
    target = paths.gpu_history_file(tmp_path)
    target.write_text("{not json")
    history = GpuHistory(tmp_path)
    why = history.load()
    assert why is not None and "unreadable" in why and len(history.set_aside) == 1
    assert not target.exists() and Path(f"{target}.corrupt-0").read_text() == "{not json"
    history.note_xid(0, HARDWARE_XID, time.time())  # and it goes on
    assert GpuHistory(tmp_path).load() is None
    # Too large to be one `save` wrote, another version: each set aside in turn.
    target.write_text(" " * (gpu_history.MAX_BYTES + 1))
    assert "more than" in str(GpuHistory(tmp_path).load())
    target.write_text(json.dumps({"v": gpu_history.VERSION + 1, "entries": []}))
    assert "not a version" in str(GpuHistory(tmp_path).load())
    assert sorted(os.listdir(tmp_path)) == [f"{target.name}.corrupt-{n}" for n in range(3)]


def test_unusable_entries_are_left_out_one_by_one(tmp_path: Path) -> None:
    now = time.time()
    paths.gpu_history_file(tmp_path).write_text(json.dumps({
        "v": gpu_history.VERSION, "ecc_seen": {"GPU-a": 4, "GPU-b": "x"},
        "entries": [{"at": now, "gpu": 1, "kind": "xid", "code": HARDWARE_XID},
                    {"at": "soon", "gpu": 1, "kind": "xid", "code": HARDWARE_XID},
                    {"at": now, "gpu": -1, "kind": "xid", "code": HARDWARE_XID},
                    {"at": now, "gpu": 1, "kind": "smoke", "code": 1}, "junk"]}))
    history = GpuHistory(tmp_path)
    assert history.load() is None
    assert [e["gpu"] for e in history.entries] == [1] and history.ecc_seen == {"GPU-a": 4}


def test_a_daemon_starts_with_an_unusable_history_and_says_so(tmp_path: Path) -> None:
    from agent.daemon import Daemon, DaemonConfig
    from agent.samplers.sim import SimGpus

    state = tmp_path / "state"
    state.mkdir()
    paths.gpu_history_file(state).write_text("\0\0garbage")
    daemon = Daemon(DaemonConfig(state), gpus=SimGpus(1), log=lambda m: None)
    try:
        daemon._load_gpu_history()
        daemon._on_xid(0, HARDWARE_XID, time.time())
    finally:
        daemon._shutdown()
    said = [r for r in JournalReader(state).records(0) if r.get("t") == "event"
            and (r.get("data") or {}).get("sampler") == "gpu_history"]
    assert said and "set aside" in said[0]["msg"]
    history = GpuHistory(state)
    assert history.load() is None and [e["code"] for e in history.entries] == [HARDWARE_XID]


# -- the elastic job's exclusion and spare choice ---------------------------------------------
def _spec(tmp_path: Path, host: str = "a") -> dict:
    return elastic_spec(tmp_path, host, spares=("c", "d"), nnodes="1:3",
                        recovery='exclude_on = ["gpu_fault"]')


def _job(tmp_path: Path, host: str = "a") -> ManagedJob:
    job = ManagedJob(LaunchSpec(_spec(tmp_path, host)), Journal(tmp_path / f"state-{host}"))
    job.spec.prepare_dirs()
    return job


def test_a_hang_on_a_host_whose_gpu_faulted_before_excludes_it(tmp_path: Path) -> None:
    job = _job(tmp_path)
    hang = Diagnosis(HANG, ["no step for 600 s"])
    assert job.membership.exclusion(hang) is None  # a clean record: recovered in place
    GpuHistory(job.journal.state_dir).note_xid(3, APP_XID, time.time())
    assert job.membership.exclusion(hang) is None  # the application's own XID
    GpuHistory(job.journal.state_dir).note_xid(3, HARDWARE_XID, time.time() - 3600,
                                               ["an earlier run"])
    found = job.membership.exclusion(hang)
    assert found is not None
    info, decision = found
    assert info["spare"] == "c" and info["gpu_history"]["faults"] == 1
    assert decision.retry is False
    assert f"hang on this host, whose GPU 3 raised XID {HARDWARE_XID}" in decision.reason
    # A user's own bug says nothing of the GPU, whatever its past.
    assert job.membership.exclusion(Diagnosis(USER_CODE, ["KeyError"])) is None
    job.membership.excluded(info)
    alert = [r for r in JournalReader(job.journal.state_dir).records(0)
             if r.get("t") == "alert" and r.get("code") == "host_excluded"]
    assert f"XID {HARDWARE_XID}" in alert[0]["what"]


def test_a_gpu_fault_is_excluded_on_its_own_evidence(tmp_path: Path) -> None:
    """The cause the job excludes on decides alone: the history (which holds this very
    XID, as the daemon noted it) adds nothing to the exclusion's data."""
    job = _job(tmp_path)
    GpuHistory(job.journal.state_dir).note_xid(0, HARDWARE_XID, time.time())
    found = job.membership.exclusion(Diagnosis(GPU_FAULT, ["Xid 79"]))
    assert found is not None and "gpu_history" not in found[0]


def test_the_spare_with_a_clean_record_is_claimed_first(tmp_path: Path) -> None:
    spec = LaunchSpec(_spec(tmp_path))
    # Both spares wait in standby and publish their histories; c's GPU faulted.
    for host in ("c", "d"):
        spare = _job(tmp_path, host)
        if host == "c":
            GpuHistory(spare.journal.state_dir).note_xid(1, HARDWARE_XID, time.time())
        spare.membership.publish_health(time.time())
    assert claim_spare(spec, "a", GPU_FAULT, ["a", "b"]) == "d"
    # The faulty one is still taken when no other is left.
    assert claim_spare(spec, "b", GPU_FAULT, ["a", "b"]) == "c"


def test_spares_that_published_nothing_are_taken_in_the_specs_order(tmp_path: Path) -> None:
    spec = LaunchSpec(_spec(tmp_path))
    health = paths.health_dir(spec.shared_dir, NAME)
    health.mkdir(parents=True)
    (health / "c.json").write_text("not json")  # unusable: taken in its turn
    assert claim_spare(spec, "a", GPU_FAULT, ["a", "b"]) == "c"
