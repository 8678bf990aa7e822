from __future__ import annotations

from cockpit.analysis import alerts as A
from cockpit.analysis.alert_groups import gpu_scope, index_ranges
from cockpit.analysis.divergence import Divergence
from cockpit.analysis.signal_alerts import acknowledge
from cockpit.analysis.stalls import DATA_STARVED, StallVerdict
from cockpit.snapshot import Alert


def _codes(alerts: list[Alert]) -> set[str]:
    return {a.code for a in alerts}


def test_gpu_rules_throttle_ecc_and_remap() -> None:
    gpus = [
        {"host": "a", "gpu": 0, "ts": 5.0, "throttle": 0x40, "temp": 91.0, "ecc_vol_unc": 0},
        {"host": "a", "gpu": 1, "ts": 5.0, "throttle": 0x80, "power": 700.0,
         "power_limit": 700.0, "ecc_vol_unc": 2, "remap_pending": True},
        {"host": "b", "gpu": 0, "ts": 5.0, "throttle": 0x04, "ecc_vol_unc": None},
    ]
    out = A.gpu_alerts(gpus)
    by_code = {a.code: a for a in out}
    assert _codes(out) == {"thermal_throttle", "power_throttle", "ecc_uncorrected",
                           "remap_pending"}
    assert by_code["thermal_throttle"].where == "host a / gpu 0"
    assert "91" in by_code["thermal_throttle"].what
    assert by_code["ecc_uncorrected"].severity == "critical"
    assert all(a.kind == "resource" and a.hint for a in out)


def test_a_simulated_gpus_alert_says_so() -> None:
    gpus = [{"host": "a", "gpu": 0, "ts": 5.0, "throttle": 0x40, "temp": 91.0, "sim": True},
            {"host": "a", "gpu": 1, "ts": 5.0, "throttle": 0x40, "temp": 90.0}]
    sim, real = A.gpu_alerts(gpus)
    assert sim.what.startswith("SIM: GPU clocks throttled") and "(simulated GPU)" in sim.what
    assert "SIM" not in real.what


def test_a_hosts_gpus_with_the_same_alert_are_one_alert() -> None:
    """A host's cooling fails for all its GPUs at once (a rack's for dozens): one alert
    per host and kind, naming its GPUs, not one per GPU."""
    hot = [{"host": "r", "gpu": g, "ts": 5.0 + g, "throttle": 0x20, "temp": 88.0 + g}
           for g in range(8)]
    lone = {"host": "s", "gpu": 3, "ts": 5.0, "throttle": 0x20, "temp": 90.0}
    ecc = {"host": "r", "gpu": 2, "ts": 5.0, "ecc_vol_unc": 4}
    out = A.gpu_alerts([*hot, lone, ecc])
    assert [(a.code, a.where) for a in out] == [  # in the order they were first raised
        ("thermal_throttle", "host r / gpus 0-7"), ("thermal_throttle", "host s / gpu 3"),
        ("ecc_uncorrected", "host r / gpu 2")]
    grouped = out[0]
    assert grouped.what == ("GPU clocks throttled for temperature (88 °C) on gpu 0, "
                            "and on 7 more GPUs")
    assert grouped.ts == 12.0 and grouped.severity == "warning"
    sim = A.gpu_alerts([{**g, "sim": True} for g in hot])
    assert [a.what for a in sim] == ["SIM: GPU clocks throttled for temperature (88 °C) on "
                                     "gpu 0, and on 7 more GPUs (simulated GPUs)"]


def test_gpu_indexes_read_as_runs() -> None:
    assert index_ranges([7, 0, 1, 2, 5, 8]) == "0-2, 5, 7-8"
    assert index_ranges([3]) == "3" and index_ranges([]) == ""
    assert index_ranges([1, None, 0]) == "0-1, None"


def test_an_acknowledged_group_stays_so_while_it_names_no_new_gpu() -> None:
    """Acknowledged with eight GPUs hot, the host's alert stays acknowledged as they cool
    one by one (down to one GPU), and is active again once a GPU it did not name joins,
    or on another host; another alert's acknowledgement covers nothing here."""
    def hot(host: str, gpus: range | list[int]) -> list[dict]:
        return [{"host": host, "gpu": g, "ts": 5.0, "throttle": 0x20, "temp": 90.0}
                for g in gpus]

    (first,) = A.gpu_alerts(hot("r", range(4, 8)))
    acked = {(first.code, first.where)}
    for now in (hot("r", range(5, 8)), hot("r", [4, 6]), hot("r", [7])):
        assert [a.state for a in acknowledge(A.gpu_alerts(now), acked)] == ["acknowledged"]
    for now in (hot("r", range(3, 8)), hot("r", [0]), hot("q", range(4, 8))):
        assert [a.state for a in acknowledge(A.gpu_alerts(now), acked)] == ["active"]
    power = [{"host": "r", "gpu": 5, "ts": 5.0, "throttle": 0x80, "power": 700.0,
              "power_limit": 700.0}]
    assert [a.state for a in acknowledge(A.gpu_alerts(power), acked)] == ["active"]


def test_a_gpu_alerts_place_reads_back_as_its_host_and_gpus() -> None:
    assert gpu_scope("host a / gpus 0-2, 5") == ("host a", frozenset({"0", "1", "2", "5"}))
    assert gpu_scope("host a / gpu 3") == ("host a", frozenset({"3"}))
    assert gpu_scope("host a / gpus 0-1, None") == ("host a", frozenset({"0", "1", "None"}))
    for other in ("host a", "job", "host a / gpus ", "host a / gpus 0-999999"):
        assert gpu_scope(other) is None
    # A host named to look like a GPU list is read as text, never as numbers.
    assert gpu_scope("host q / gpus ²-³") == ("host q", frozenset({"²-³"}))
    assert gpu_scope("host q / gpus 1-٣") == ("host q", frozenset({"1-٣"}))


def test_xid_severity_and_hint_from_catalogue() -> None:
    events = [{"kind": "xid", "host": "a", "ts": 3.0, "msg": "XID 79 on GPU 2",
               "data": {"gpu": 2, "xid": 79}},
              {"kind": "xid", "host": "a", "ts": 4.0, "msg": "", "data": {"gpu": 1, "xid": 999}},
              {"kind": "checkpoint_saved", "host": "a", "ts": 4.0}]
    out = A.xid_alerts(events)
    assert len(out) == 2
    assert out[0].severity == "critical" and "bus" in out[0].hint
    assert out[0].where == "host a / gpu 2"
    assert out[1].what == "XID 999" and "catalogue" in out[1].hint


def test_host_link_staleness_disk_and_memory() -> None:
    hosts = [{"host": "a", "state": "streaming", "last_seen": 100.0},
             {"host": "b", "state": "unreachable", "detail": "timed out", "last_seen": 10.0},
             {"host": "c", "state": None, "last_seen": 20.0}]
    samples = [{"host": "a", "ts": 100.0, "disk_path": "/data", "disk_used": 98,
                "disk_total": 100, "mem_used": 96, "mem_total": 100},
               {"host": "c", "ts": 20.0, "disk_used": 10, "disk_total": 100}]
    out = A.host_alerts(hosts, samples, now=100.0)
    by = {(a.code, a.where): a for a in out}
    assert by[("host_unreachable", "host b")].severity == "critical"
    assert "timed out" in by[("host_unreachable", "host b")].what
    assert "1m 20s" in by[("host_stale", "host c")].what
    assert by[("disk_nearly_full", "host a")].severity == "critical"
    assert "/data" in by[("disk_nearly_full", "host a")].what
    assert ("memory_pressure", "host a") in by
    assert not any(a.where == "host a" and a.code.startswith("host_") for a in out)


def test_data_rules_starvation_spool_errors_and_drops() -> None:
    events = [
        {"kind": "spool_error", "host": "a", "ts": 1.0,
         "data": {"file": "spool/j/rank-1.ndjson", "line": 40, "error": "bad json"}},
        {"kind": "spool_error", "host": "a", "ts": 2.0,
         "data": {"file": "spool/j/rank-1.ndjson", "line": 12, "error": "bad json"}},
        {"kind": "dropped", "host": "b", "ts": 3.0, "data": {"count": 7, "reason": "cap"}},
    ]
    out = A.data_alerts(data_wait_pct=45.0, worst=(3, "b", 0.6), events=events, now=9.0)
    by = {a.code: a for a in out}
    assert by["data_starved"].where == "host b / rank 3" and "45%" in by["data_starved"].what
    assert by["spool_error"].where == "host a / file spool/j/rank-1.ndjson / range 12-40"
    assert "2 malformed" in by["spool_error"].what
    assert "7 records" in by["records_dropped"].what
    assert all(a.kind == "data" for a in out)
    assert A.data_alerts(data_wait_pct=5.0, worst=None, events=[], now=0.0) == []


def test_parameter_rules() -> None:
    div = Divergence(step=400, best_step=300, best_loss=0.7, evals_since_best=3, train_drop=0.3)
    out = A.parameter_alerts(nonfinite_steps=[120, 130], spike_steps=[50.0],
                             divergence=div, lr_reason="loss rose", now=1.0)
    by = {a.code: a for a in out}
    assert by["nonfinite_loss"].severity == "critical" and by["nonfinite_loss"].where == "step 120"
    assert "step 300" in by["divergence"].hint
    assert by["loss_spike"].where == "step 50"
    assert "loss rose" in by["lr_too_high"].what
    assert A.parameter_alerts(nonfinite_steps=[], spike_steps=[], divergence=None,
                              lr_reason=None, now=1.0) == []


def test_stall_alert_kind_follows_cause() -> None:
    v = StallVerdict(True, "no progress", DATA_STARVED, "no step for 5m", {"rank": 1})
    (a,) = A.stall_alerts(v, now=10.0)
    assert (a.kind, a.severity, a.code, a.where) == ("data", "critical", "stall", "rank 1")
    assert A.stall_alerts(StallVerdict(False), now=1.0) == []


def test_merge_dedupes_and_orders_worst_first() -> None:
    stored = A.stored_alerts([
        {"ts": 1.0, "host": "a", "kind": "resource", "severity": "warning",
         "code": "thermal_throttle", "where": {"gpu": 0}, "what": "old", "hint": "h"},
        {"ts": 2.0, "host": "b", "kind": "resource", "severity": "info",
         "code": "note", "where": None, "what": "x", "hint": "y"},
    ])
    fresh = A.gpu_alerts([{"host": "a", "gpu": 0, "ts": 5.0, "throttle": 0x20},
                          {"host": "a", "gpu": 3, "ts": 4.0, "ecc_vol_unc": 1}])
    merged = A.merge(stored, fresh)
    assert [a.code for a in merged] == ["ecc_uncorrected", "thermal_throttle", "note"]
    assert merged[1].ts == 5.0 and merged[2].where == "host b"


def test_an_alert_is_dated_when_its_condition_began_where_that_is_known() -> None:
    """Derived alerts are found again on every refresh; the time shown is when the
    trouble started (a link's state change, the last record, the last step, the first
    NaN), not the refresh, which is all `now` can say."""
    now = 10_000.0
    link, stale = A.host_alerts([
        {"host": "a", "state": "unreachable", "state_since": 9_000.0, "last_seen": 8_990.0},
        {"host": "b", "state": "streaming", "last_seen": 9_500.0},
    ], [], now=now)
    assert (link.code, link.ts) == ("host_unreachable", 9_000.0)
    assert (stale.code, stale.ts) == ("host_stale", 9_500.0)
    (unknown_since,) = A.host_alerts([{"host": "c", "state": "auth-failed"}], [], now=now)
    assert unknown_since.ts == now
    stalled = StallVerdict(True, "no progress", DATA_STARVED, "no step for 5m", {"rank": 1})
    assert A.stall_alerts(stalled, now=now, since=9_700.0)[0].ts == 9_700.0
    slow = StallVerdict(True, "slowdown", None, "steps 3x slower", {})
    assert A.stall_alerts(slow, now=now, since=9_999.0)[0].ts == now  # still stepping
    (nan,) = A.parameter_alerts(nonfinite_steps=[5, 6], spike_steps=[], divergence=None,
                                lr_reason=None, now=now, nonfinite_since=9_100.0)
    assert nan.ts == 9_100.0


def test_a_job_down_now_is_a_critical_alert_until_it_recovers() -> None:
    from cockpit.snapshot import Interruption

    down = Interruption("killed", 100.0, None, None, 1, "rank 1 (pid 9) killed by SIGKILL",
                        hosts=("vm",))
    (alert,) = A.interruption_alerts([Interruption("oom", 50.0, 6.0, 10, 1), down])
    assert (alert.code, alert.severity, alert.ts, alert.where) == (
        "job_interrupted", "critical", 100.0, "host vm")
    assert "killed" in alert.what and "SIGKILL" in alert.what
    recovered = Interruption("killed", 100.0, 5.0, 40, 1, hosts=("vm",))
    assert A.interruption_alerts([recovered]) == [] and A.interruption_alerts([]) == []
    # Paused by the operator while the agent waited to restart: over, not down.
    paused = Interruption("killed", 100.0, None, None, 1, hosts=("vm",), ended_by="pause")
    assert A.interruption_alerts([paused]) == []


def test_counts_read_in_the_singular_for_one() -> None:
    from cockpit.analysis.text import counted

    assert (counted(1, "alert"), counted(0, "alert"), counted(2_000, "alert")) == (
        "1 alert", "0 alerts", "2,000 alerts")
    assert counted(1, "non-finite loss", "non-finite losses") == "1 non-finite loss"
    (spike,) = A.parameter_alerts(nonfinite_steps=[], spike_steps=[794.0], divergence=None,
                                  lr_reason=None, now=1.0)
    assert spike.what == "1 loss spike (latest near step 794)"


def test_throttle_reasons_read_as_words() -> None:
    from cockpit.analysis.throttle import throttle_text

    assert throttle_text(None) == "n/a" and throttle_text(0) == "none"
    assert throttle_text(0x24) == "power cap, thermal (SW)"
    assert throttle_text(0x1) == "idle"
    assert throttle_text(0x80 | 0x8000) == "power brake, 0x8000"  # a bit newer than this table
