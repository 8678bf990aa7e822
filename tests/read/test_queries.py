from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.read import synthetic as syn


@pytest.mark.slow
def test_time_range_frontier_and_jobs(reader: StoreReader) -> None:
    first, last = reader.time_range() or (0.0, 0.0)
    assert first == syn.T0
    assert last >= syn.step_ts(syn.STEPS - 1)
    assert reader.frontier() == last
    assert reader.frontier(until_ts=syn.T0 + 100) <= syn.T0 + 100
    assert reader.jobs() == ["job-1"]
    assert reader.current_job() == "job-1"
    assert reader.current_job(until_ts=syn.T0 + 0.5) is None


def test_run_info_merges_run_records_and_host_environments(reader: StoreReader) -> None:
    info = reader.run_info("job-1")
    assert info["total_steps"] == syn.TOTAL_STEPS and info["world_size"] == 4
    assert info["config"] == {"lr": 3e-4, "batch": 128}
    assert info["git_commit"] == "abc123" and info["declared"]
    assert info["env"]["node-b"]["torch"] == "2.13.0"
    assert info["env"]["node-a"]["driver"] == "550.54"
    assert reader.run_info("job-1", until_ts=syn.T0 + 0.5)["declared"] is False


def test_hosts_carry_hello_facts_and_last_seen(reader: StoreReader) -> None:
    hosts = {h["host"]: h for h in reader.hosts()}
    assert set(hosts) == set(syn.HOSTS)
    a = hosts["node-a"]
    assert a["gpu_state"] == "ok" and a["gpu_source"] == "nvml" and len(a["gpus"]) == 2
    assert a["high_water"] > 0 and a["last_seen"] >= syn.step_ts(syn.STEPS - 1)
    early = {h["host"]: h for h in reader.hosts(until_ts=syn.T0 + 50)}
    assert early["node-b"]["last_seen"] <= syn.T0 + 50


def test_latest_train_is_per_rank_and_respects_the_cursor(reader: StoreReader) -> None:
    latest = reader.latest_train("job-1")
    assert [r["rank"] for r in latest] == [0, 1, 2, 3]
    assert {r["step"] for r in latest} == {syn.STEPS - 1}
    cursor = syn.step_ts(100) + 0.5
    assert {r["step"] for r in reader.latest_train("job-1", until_ts=cursor)} == {100}


def test_recent_steps_is_a_bounded_step_range(reader: StoreReader) -> None:
    rows = reader.recent_steps("job-1", 5)
    assert sorted({r["step"] for r in rows}) == list(range(syn.STEPS - 5, syn.STEPS))
    assert len(rows) == 5 * 4
    early = reader.recent_steps("job-1", 3, until_ts=syn.step_ts(50) + 0.5)
    assert sorted({r["step"] for r in early}) == [48, 49, 50]


def test_recent_steps_takes_the_newest_run_of_a_repeated_step(tmp_path: Path) -> None:
    """After a rollback the same steps run again: the rerun wins, nothing twice."""
    lines = [encode("train", i + 1, {"job": "j", "rank": 0, "step": step, "step_time": t,
                                       "loss": 1.0}, ts=100.0 + i)
             for i, (step, t) in enumerate([(1, 1.0), (2, 1.0), (3, 1.0), (2, 5.0), (3, 5.0)])]
    with Store(tmp_path / "r.duckdb") as store:
        store.ingest("h", b"".join(lines))
        rows = StoreReader(store).recent_steps("j", 5)
    assert [(r["step"], r["step_time"]) for r in rows] == [(1, 1.0), (2, 5.0), (3, 5.0)]


def _event(seq: int, ts: float, kind: str, data: dict) -> bytes:
    return encode("event", seq, {"kind": kind, "job": "j", "rank": None, "step": 40,
                                 "msg": kind, "data": data}, ts=ts)


def test_a_restart_that_fails_before_its_first_step_is_the_same_outage(tmp_path: Path) -> None:
    """Killed, then the restart dies on the re-forming group, then the next one trains:
    one interruption, recovered once, its failed restart named; an interruption after a
    decision not to retry is a new one (the operator relaunched)."""
    retry, stop = {"retry": True}, {"retry": False}
    lines = [
        _event(1, 100.0, "interruption", {"cause": "killed", "decision": retry}),
        _event(2, 110.0, "interruption", {"cause": "nccl", "decision": retry}),
        _event(3, 130.0, "recovery", {"cause": "killed", "recovery_seconds": 31.0,
                                      "steps_lost": 4, "restart_count": 2,
                                      "failed_restarts": ["nccl"]}),
        _event(4, 200.0, "interruption", {"cause": "oom", "decision": stop}),
        _event(5, 300.0, "interruption", {"cause": "user_code", "decision": retry}),
    ]
    with Store(tmp_path / "r.duckdb") as store:
        store.ingest("h", b"".join(lines))
        items = StoreReader(store).interruptions("j")
    assert [(i["cause"], i["failed_restarts"], i["recovered_in"], i["restart_count"])
            for i in items] == [("killed", ["nccl"], 31.0, 2), ("oom", [], None, None),
                                ("user_code", [], None, None)]  # fmt: skip


def test_an_outage_the_operator_ended_is_over_and_a_later_failure_is_its_own(
    tmp_path: Path,
) -> None:
    """Killed; while the agent waited to restart, the operator paused (the restart is
    cancelled), then resumed. The outage is over, by the pause, not "not recovered" for
    ever; the failure after the resume is an interruption of its own, not a failed
    restart of the old one. A stop, or a relaunch after a give-up, ends one the same
    way; a freeze or a pause that failed does not."""
    retry, stop = {"retry": True}, {"retry": False}
    lines = [
        _event(1, 100.0, "interruption", {"cause": "killed", "decision": retry}),
        _event(2, 101.0, "pause", {"mode": "checkpoint", "ok": True,
                                   "restart_cancelled": True}),
        _event(3, 200.0, "job_started", {"reason": "resume"}),
        _event(4, 300.0, "interruption", {"cause": "oom", "decision": retry}),
        _event(5, 301.0, "pause", {"mode": "freeze", "ok": True}),
        _event(6, 302.0, "pause", {"mode": "checkpoint", "ok": False}),
        _event(7, 303.0, "job_exited", {"returncode": -15, "ended_for": "stop"}),
        _event(8, 400.0, "job_started", {"reason": "launch"}),
        _event(9, 500.0, "interruption", {"cause": "user_code", "decision": stop}),
        _event(10, 600.0, "job_started", {"reason": "relaunch"}),
        _event(11, 700.0, "interruption", {"cause": "hang", "decision": retry}),
        _event(12, 701.0, "job_started", {"reason": "recovery"}),
    ]
    with Store(tmp_path / "r.duckdb") as store:
        store.ingest("h", b"".join(lines))
        items = StoreReader(store).interruptions("j")
    assert [(i["cause"], i["failed_restarts"], i["recovered_in"], i["ended_by"])
            for i in items] == [("killed", [], None, "pause"), ("oom", [], None, "stop"),
                                ("user_code", [], None, "relaunch"),
                                ("hang", [], None, None)]  # fmt: skip


def test_latest_samples_only_see_the_past(reader: StoreReader) -> None:
    gpus = reader.latest_gpus()
    assert {(g["host"], g["gpu"]) for g in gpus} == {(h, i) for h in syn.HOSTS for i in (0, 1)}
    hot = next(g for g in gpus if g["host"] == "node-b" and g["gpu"] == 1)
    assert hot["throttle"] == 0x40 and hot["procs"][0]["rank"] == 3
    early = reader.latest_gpus(until_ts=syn.T0 + 100)
    assert all(g["ts"] <= syn.T0 + 100 and g["throttle"] == 0 for g in early)
    samples = reader.latest_host_samples(until_ts=syn.T0 + 100)
    assert {s["host"] for s in samples} == set(syn.HOSTS)
    assert all(syn.T0 + 90 < s["ts"] <= syn.T0 + 100 for s in samples)


def test_events_filters_and_order(reader: StoreReader) -> None:
    events = reader.events()
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    ckpt = reader.events(kinds=["checkpoint_saved"])
    assert [e["step"] for e in ckpt] == [200, 400]
    assert [e["kind"] for e in reader.events(text="XID")] == ["xid"]
    assert len(reader.events(limit=2)) == 2
    assert all(e["ts"] <= syn.T0 + 150 for e in reader.events(until_ts=syn.T0 + 150))


def test_logs_alerts_evals_nonfinite_and_checkpoints(reader: StoreReader) -> None:
    logs = reader.logs("job-1", limit=3)
    assert [r["line"].split()[1] for r in logs] == ["450", "500", "550"]
    assert [r["line"] for r in reader.logs(text="step 550")] == [
        f"step 550 loss {syn.train_loss(550):.4f}"
    ]
    assert all(r["ts"] <= syn.T0 + 100 for r in reader.logs(until_ts=syn.T0 + 100))
    (alert,) = reader.alerts()
    assert alert["code"] == "thermal_throttle" and alert["where"] == {"gpu": 1}
    assert reader.alerts(until_ts=syn.THROTTLE_FROM_TS - 1) == []
    evals = reader.eval_losses("job-1")
    assert sorted(evals) == list(range(50, syn.STEPS, 50))
    assert all(loss is not None for _, _, loss in evals.values())
    assert reader.eval_losses("job-1", until_ts=syn.step_ts(50) - 1) == {}
    assert reader.nonfinite_steps("job-1") == [syn.NAN_STEP]
    assert reader.nonfinite_steps("job-1", until_ts=syn.step_ts(syn.NAN_STEP) - 1) == []
    costs = reader.checkpoint_costs("job-1")
    assert [(c["step"], c["seconds"]) for c in costs] == [(200, 30.0), (400, 30.0)]


def test_interruption_paired_with_its_recovery(reader: StoreReader) -> None:
    (item,) = reader.interruptions("job-1")
    assert item["cause"] == "rank 2 killed (SIGKILL)" and item["evidence"] == "exit code -9"
    assert item["recovered_in"] == pytest.approx(syn.OUTAGE_S - 5)
    assert item["steps_lost"] == 10 and item["restart_count"] == 1
    during = reader.interruptions("job-1", until_ts=syn.step_ts(syn.INTERRUPT_AFTER_STEP) + 10)
    assert len(during) == 1 and during[0]["recovered_in"] is None


def test_the_recovery_an_agent_reports_after_the_operator_ended_its_outage_adds_none(
    tmp_path: Path,
) -> None:
    """Killed and restarted, then paused before the restart's first step and resumed: the
    agent still reports the recovery at the first step after the resume. The outage was
    ended by the pause; its late recovery is not a second outage of its own."""
    lines = [
        _event(1, 100.0, "interruption", {"cause": "killed", "decision": {"retry": True}}),
        _event(2, 105.0, "job_started", {"reason": "recovery"}),
        _event(3, 110.0, "pause", {"mode": "checkpoint", "ok": True}),
        _event(4, 200.0, "job_started", {"reason": "resume"}),
        _event(5, 230.0, "recovery", {"cause": "killed", "recovery_seconds": 130.0,
                                      "steps_lost": 4, "restart_count": 1}),
        _event(6, 300.0, "recovery", {"cause": "hang", "recovery_seconds": 20.0}),
    ]
    with Store(tmp_path / "r.duckdb") as store:
        store.ingest("h", b"".join(lines))
        items = StoreReader(store).interruptions("j")
    # The last recovery, with no outage before it that it could be of, is still listed.
    assert [(i["cause"], i["recovered_in"], i["ended_by"]) for i in items] == [
        ("killed", None, "pause"), ("hang", 20.0, None)]
