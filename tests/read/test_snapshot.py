from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.details import EventsTimeline, HostDetail, LogTail, RunInfo
from cockpit.read.health import build_health
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot, details
from cockpit.snapshot import GpuCell, Marker, Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.read import synthetic as syn


@pytest.fixture
def final(reader: StoreReader) -> Snapshot:
    return build_snapshot(reader, until_ts=None, label="LIVE", buckets=60)


def test_progress_at_the_end(final: Snapshot) -> None:
    p = final.progress
    assert final.job == "job-1" and final.source_label == "LIVE"
    assert (p.step, p.total_steps, p.stage, p.state) == (599, 1000, "pretrain", "running")
    assert p.percent == pytest.approx(59.9)
    assert p.samples == 599 * 4 * syn.SAMPLES_PER_RANK
    assert p.tokens == p.samples * syn.TOKENS_PER_SAMPLE
    assert p.steps_per_second == pytest.approx(1.0)
    # 401 steps left at 1 s each, plus the restarts the job's one interruption predicts:
    # it cost its outage (recovery_seconds) and 10 recomputed steps, and came once in the
    # time the job has run since its start (T0 + 5).
    cost = (syn.OUTAGE_S - 5) + 10 * 1.0
    ran = final.ts - (syn.T0 + 5)
    assert p.eta_seconds == pytest.approx(401.0 + 401.0 * cost / ran)
    assert p.eta_low is not None and p.eta_high is not None
    assert p.eta_low <= p.eta_seconds <= p.eta_high
    assert not p.stalled and p.since_last_step is not None and p.since_last_step < 5


def test_effect_finds_the_planted_problems(final: Snapshot) -> None:
    e = final.effect
    assert 0 < len(e.train_loss) <= 60 and len(e.train_loss_ema) == len(e.train_loss)
    assert e.train_loss.x == tuple(sorted(e.train_loss.x))
    assert e.spike_steps == (syn.SPIKE_STEP,)
    assert e.nonfinite_steps == (syn.NAN_STEP,)
    assert e.best_val_step == syn.BEST_VAL_STEP
    assert e.divergence_step == syn.BEST_VAL_STEP + syn.EVAL_EVERY
    assert e.val_loss.x == tuple(float(s) for s in range(50, syn.STEPS, 50))
    assert e.last_loss_scale == 65536.0
    assert len(e.lr) > 0 and len(e.loss_scale) > 0


def test_efficiency_figures(final: Snapshot) -> None:
    f = final.efficiency
    assert f.samples_per_s == pytest.approx(4 * syn.SAMPLES_PER_RANK)
    assert f.tokens_per_s == pytest.approx(4 * syn.SAMPLES_PER_RANK * syn.TOKENS_PER_SAMPLE)
    assert f.data_wait_pct == pytest.approx(10.0)
    assert f.mfu == pytest.approx(syn.FLOPS_PER_STEP / (syn.PEAK_FLOPS * 4))
    assert f.gpu_busy == pytest.approx(87.0)
    assert f.slowest_ranks[0].rank == syn.STRAGGLER_RANK
    assert f.slowest_ranks[0].host == "node-b"
    # Every rank by its own time, slowest first, with how far behind the fastest it is.
    assert f.rank_count == len(f.ranks) == 4 and f.ranks[0] == f.slowest_ranks[0]
    assert [r.step_time for r in f.ranks] == sorted((r.step_time for r in f.ranks), reverse=True)
    assert f.ranks[0].behind is not None and f.ranks[0].behind > 0
    assert f.ranks[-1].behind == 0.0
    assert all(r.data_share == pytest.approx(0.1) for r in f.ranks)
    assert all(r.wall_time is not None and r.wall_time >= r.step_time for r in f.ranks)
    assert f.step_time_spread is not None and f.step_time_spread > 0
    assert len(f.throughput_history) > 0 and len(f.gpu_busy_history) > 0
    assert max(v for v in f.throughput_history.last if v is not None) == pytest.approx(128.0)


def test_health_and_interruptions(final: Snapshot) -> None:
    h = final.health
    assert [x.host for x in h.hosts] == list(syn.HOSTS) and not h.simulated
    b = h.hosts[1]
    assert b.state == "streaming" and b.gpu_state == "ok"
    assert [(g.index, g.online, g.name) for g in b.gpus] == [(0, True, "H100"), (1, True, "H100")]
    assert b.gpus[1].throttle == 0x40 and b.gpus[1].xid == 13 and b.gpus[0].xid is None
    assert h.hosts[0].disk_used == 95 << 30
    (i,) = h.interruptions
    assert i.cause == "rank 2 killed (SIGKILL)" and i.recovered_in == pytest.approx(35.0)
    assert i.steps_lost == 10



def test_gpu_cells_are_whole_gpu_cells(final: Snapshot) -> None:
    """`build_health` makes its cells from their values in field order, without GpuCell's
    keyword constructor: each is a whole GpuCell, with values of its fields' types, equal
    to (and hashing as) the one the constructor makes of the same fields by name (the
    order itself: `test_each_gpu_figure_lands_in_its_own_field`)."""
    cells = [g for h in final.health.hosts for g in h.gpus]
    assert cells
    for cell in cells:
        assert type(cell) is GpuCell and len(cell) == len(GpuCell._fields)
        made = GpuCell(**cell._asdict())
        assert cell == made and hash(cell) == hash(made)
        assert isinstance(cell.index, int) and isinstance(cell.online, bool)
        assert isinstance(cell.simulated, bool) and isinstance(cell.xid_count, int)
        assert isinstance(cell.xid_codes, tuple) and isinstance(cell.name, str)
        assert isinstance(cell.util, float) and isinstance(cell.mem_total, int)
        with pytest.raises(AttributeError):
            cell.util = 0.0  # type: ignore[misc]  # immutable: the test is that it refuses


def test_each_gpu_figure_lands_in_its_own_field() -> None:
    """Every value `build_health` puts into a cell by position, each one different, is
    found under its own name: a value put in a neighbour's place (two floats swapped)
    makes another cell than GpuCell's constructor makes by name."""
    host = {"host": "h", "gpu_source": "nvml", "gpu_state": "ok", "state": "streaming",
            "gpus": [{"index": 3, "name": "H100", "mem_total": 80 << 30, "simulated": False,
                      "xid_events": True}]}
    sample = {"host": "h", "gpu": 3, "ts": 10.0, "seq": 1, "sim": False, "util": 11.0,
              "temp": 22.0, "power": 33.0, "power_limit": 44.0, "mem_used": 55,
              "mem_total": 66, "ecc_vol_unc": 77, "throttle": 88, "ecc_agg_unc": 99,
              "remap_pending": False}
    history = {"host": "h", "gpu": 3, "count": 5, "earlier": 2, "newest": 79,
               "codes": [48, 79], "earlier_last_ts": 4.5}
    health = build_health([host], [sample], [], [], [], {"h": "streaming"}, 11.0,
                          replaying=False, xid_history=[history])
    (cell,) = health.hosts[0].gpus
    assert cell == GpuCell(
        index=3, online=True, simulated=False, util=11.0, temp=22.0, power=33.0,
        power_limit=44.0, mem_used=55, mem_total=66, ecc_unc=77, xid=79, throttle=88,
        name="H100", xid_count=5, xid_earlier=2, xid_codes=(48, 79), xid_earlier_last=4.5,
        ecc_lifetime=99, xid_watched=True)


def test_whether_a_gpus_xids_are_watched_is_the_hellos_word_or_unknown() -> None:
    said = [True, False, "yes", None]
    host = {"host": "h", "gpu_source": "nvml", "gpu_state": "ok", "state": "streaming",
            "gpus": [{"index": i, "xid_events": w} for i, w in enumerate(said)]
            + [{"index": 4}]}
    health = build_health([host], [], [], [], [], {"h": "streaming"}, 11.0, replaying=False)
    assert [c.xid_watched for c in health.hosts[0].gpus] == [True, False, None, None, None]


def test_alerts_each_kind_with_where_and_hint(final: Snapshot) -> None:
    by = {a.code: a for a in final.alerts}
    assert by["thermal_throttle"].where == "host node-b / gpu 1"
    assert by["gpu_xid"].where == "host node-b / gpu 1"
    assert by["disk_nearly_full"].where == "host node-a"
    assert by["spool_error"].kind == "data"
    assert "range 17-17" in by["spool_error"].where
    assert by["nonfinite_loss"].where == f"step {syn.NAN_STEP}"
    assert by["loss_spike"].kind == "parameter" and by["divergence"].kind == "parameter"
    assert all(a.hint for a in final.alerts)
    assert final.alerts[0].severity == "critical"
    assert sum(1 for a in final.alerts if a.code == "thermal_throttle") == 1


def test_a_cursor_hides_the_future(reader: StoreReader) -> None:
    cursor = syn.step_ts(200) + 0.5
    snap = build_snapshot(reader, until_ts=cursor, label="REPLAY 10x")
    assert snap.ts == cursor and snap.progress.step == 200
    assert max(snap.effect.train_loss.x) <= 200
    assert max(snap.effect.val_loss.x) <= 200
    assert snap.effect.spike_steps == () and snap.effect.nonfinite_steps == ()
    assert snap.effect.divergence_step is None
    assert snap.health.interruptions == ()
    assert all(e.ts <= cursor for e in snap.events)
    assert all(a.ts <= cursor for a in snap.alerts)
    codes = {a.code for a in snap.alerts}
    assert "thermal_throttle" not in codes and "gpu_xid" not in codes
    assert all(g.throttle == 0 for h in snap.health.hosts for g in h.gpus)


def test_during_an_outage_the_job_is_recovering(reader: StoreReader) -> None:
    snap = build_snapshot(reader, until_ts=syn.step_ts(syn.INTERRUPT_AFTER_STEP) + 20,
                          label="REPLAY")
    assert snap.progress.state == "recovering" and not snap.progress.stalled
    assert snap.health.interruptions[0].recovered_in is None


def test_a_silent_job_is_stalled_and_hosts_go_stale(reader: StoreReader) -> None:
    later = syn.step_ts(syn.STEPS - 1) + 900
    snap = build_snapshot(reader, until_ts=None, label="LIVE", now=later)
    assert snap.progress.stalled and snap.progress.state == "stalled"
    assert "no step for 15m" in (snap.progress.stall_detail or "")
    assert (snap.progress.eta_seconds, snap.progress.eta_note) == (None, "stalled")
    assert {h.state for h in snap.health.hosts} == {"stale"}
    assert {"stall", "host_stale"} <= {a.code for a in snap.alerts}


def test_live_host_states_win(reader: StoreReader) -> None:
    snap = build_snapshot(reader, until_ts=None, label="LIVE",
                          host_states={"node-a": "unreachable"}, controllable=True)
    assert snap.controllable
    assert [h.state for h in snap.health.hosts] == ["unreachable", "streaming"]
    assert any(a.code == "host_unreachable" and a.where == "host node-a" for a in snap.alerts)


def test_an_empty_recording_gives_an_empty_snapshot(tmp_path: Path) -> None:
    with Store(tmp_path / "empty.duckdb") as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="LIVE")
    assert snap.job is None and snap.progress.state == "unknown" and snap.alerts == ()


def test_before_any_record_the_links_and_their_faults_are_shown(tmp_path: Path) -> None:
    """A refused host key (or a wrong port, a missing agent) keeps every record away:
    the hosts and why they do not stream are then the whole screen."""
    refused = ("presented an unknown ssh-ed25519 host key SHA256:xJg5abc; refused. "
               "trust it with `ssh-keyscan -p 2222 127.0.0.2 >> ~/.ssh/known_hosts`")
    with Store(tmp_path / "new.duckdb") as store:
        store.set_host_state("gpu1", "hostkey-unknown", refused, address="127.0.0.2")
        store.set_host_state("gpu2", "connecting", "", address="127.0.0.3")
        snap = build_snapshot(StoreReader(store), until_ts=None, label="LIVE", now=1e9,
                              host_states={"gpu1": "hostkey-unknown", "gpu2": "unreachable"})
    assert snap.job is None and snap.ts == 1e9
    assert [(h.host, h.state) for h in snap.health.hosts] == [
        ("gpu1", "hostkey-unknown"), ("gpu2", "unreachable")]
    by_code = {a.code: a for a in snap.alerts}
    assert set(by_code) == {"host_hostkey_unknown", "host_unreachable"}
    assert "SHA256:xJg5abc" in by_code["host_hostkey_unknown"].what
    assert by_code["host_hostkey_unknown"].severity == "critical"


def test_details_host(reader: StoreReader) -> None:
    d = details(reader, "host", host="node-b", buckets=30)
    assert isinstance(d, HostDetail) and d.hostname == "node-b" and d.cpu_count == 16
    assert [g.gpu for g in d.gpus] == [0, 1] and d.gpus[1].xid == 13
    assert [(p.rank, p.gpu) for p in d.processes] == [(2, 0), (3, 1)]
    assert 0 < len(d.gpu_temp) <= 30 and max(v for v in d.gpu_temp.hi if v) == 91.0
    assert set(d.util_per_gpu) == {"gpu 0", "gpu 1"} and len(d.cpu) > 0
    with pytest.raises(ValueError, match="no host named 'nope'"):
        details(reader, "host", host="nope")


def test_a_lost_hosts_gpus_are_not_online_in_its_detail(tmp_path: Path) -> None:
    """The host screen's GPUs say what the map says: a GPU whose host is unreachable
    is not online, though its newest sample is still the one held."""
    path = syn.write_recording(tmp_path / "run.duckdb")
    with Store(path) as store:
        reader = StoreReader(store)
        assert all(g.online for g in details(reader, "host", host="node-b").gpus)
        store.set_host_state("node-b", "unreachable", "connection lost")
        lost = details(reader, "host", host="node-b")
        assert lost.state == "unreachable" and [g.gpu for g in lost.gpus] == [0, 1]
        assert not any(g.online for g in lost.gpus)
        assert lost.gpus[0].util is not None  # the last figures are still shown


def test_details_events_run_log(reader: StoreReader) -> None:
    ev = details(reader, "events", kinds=["checkpoint_saved"])
    assert isinstance(ev, EventsTimeline) and [e.step for e in ev.events] == [200, 400]
    run = details(reader, "run")
    assert isinstance(run, RunInfo) and run.job == "job-1" and run.tags == ("synthetic",)
    assert run.env["node-a"]["cuda"] == "12.4" and run.jobs == ("job-1",)
    log = details(reader, "log", n=2, text="loss")
    assert isinstance(log, LogTail) and len(log.lines) == 2
    assert log.lines[-1].line.startswith("step 550") and log.lines[-1].rank == 0
    early = details(reader, "log", until_ts=syn.T0 + 100)
    assert all(line.ts <= syn.T0 + 100 for line in early.lines)
    with pytest.raises(ValueError, match="unknown details kind 'gpu'"):
        details(reader, "gpu")


GAVE_UP = {"cause": "user_code", "decision": {"retry": False, "reason": "twice"}}


@pytest.mark.parametrize(("kind", "data", "state", "note"), [
    ("pause", {}, "paused", "paused"),
    ("job_exited", {}, "exited", "exited before its end"),
    # The agent stopped retrying: which host, after what, and why, where the ETA goes.
    ("interruption", GAVE_UP, "failed", "failed (node-a gave up after user_code: twice)"),
    ("interruption", {"decision": {"retry": True}}, "recovering", None),
    ("interruption", {**GAVE_UP, "exclusion": {"host": "node-a"}}, "recovering", None),
    # No step since: the figures are the old ones, but the job is restarting, so its ETA
    # band stays shown (analysis.eta.restart_aware; tests/read/test_eta_during_restart.py).
    ("resume", {}, "starting", None),
    ("job_started", {}, "starting", None),
])
def test_a_job_that_is_not_running_has_no_eta_but_a_reason(
        tmp_path: Path, kind: str, data: dict, state: str, note: str | None) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    # A pause ends every host's part (node-b's agent follows node-a's): each says so.
    hosts = syn.HOSTS if kind == "pause" else ("node-a",)
    with Store(path) as store:
        for i, host in enumerate(hosts):
            store.ingest(host, encode("event", 10**6 + i, {
                "kind": kind, "job": "job-1", "rank": None, "step": syn.STEPS - 1,
                "msg": kind, "data": data}, ts=last + 1 + i))
    with Store(path, read_only=True) as store:
        p = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY").progress
    assert p.state == state
    if note is None:
        assert p.eta_note is None
        return
    assert (p.eta_seconds, p.eta_low, p.eta_high, p.eta_note) == (None, None, None, note)
    assert p.steps_per_second == pytest.approx(1.0)  # the speed it last had stays shown


@pytest.mark.parametrize(("returncode", "state", "note"), [
    (0, "finished", "finished"),
    (1, "exited", "exited with code 1"),
    (-9, "exited", "killed by signal 9"),
])
def test_a_job_that_ran_to_its_end_reads_finished_unless_it_exited_with_an_error(
        tmp_path: Path, returncode: int, state: str, note: str) -> None:
    """State and ETA note say one thing: never "exited" beside "done"."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        # The run declared a total it has now reached, and its processes exited.
        store.ingest("node-a", encode("run", 10**6, {
            "job": "job-1", "rank": 0, "total_steps": syn.STEPS - 1}, ts=last + 0.5)
            + encode("event", 10**6 + 1, {
                "kind": "job_exited", "job": "job-1", "rank": None, "step": None,
                "msg": "job job-1 exited", "data": {"returncode": returncode}}, ts=last + 1))
    with Store(path, read_only=True) as store:
        p = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY").progress
    assert (p.percent, p.state, p.eta_note) == (100.0, state, note)
    report = render_report(path)
    assert f"state         {state}\n" in report and f"n/a (job {note})" in report
    assert "(job done)" not in report


def _gave_up(ts: float) -> bytes:
    """node-a's agent's interruption of job-1 after which it stopped retrying."""
    return encode("event", 10**6, {
        "kind": "interruption", "job": "job-1", "rank": None, "step": syn.STEPS - 1,
        "msg": "user_code", "data": {**GAVE_UP, "cause": "user_code"}}, ts=ts)


def test_a_job_the_agent_gave_up_on_is_not_promised_a_restart(tmp_path: Path) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", _gave_up(last + 1))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    assert snap.progress.state == "failed"
    alert = next(a for a in snap.alerts if a.code == "job_interrupted")
    assert "the agent stopped retrying: it stays down" in alert.what
    assert "restarts it" not in alert.hint
    assert "not recovered: the agent stopped retrying" in render_report(path)


def _started(seq: int, reason: str, ts: float) -> bytes:
    """An agent's `job_started` of job-1, for a `reason` (recovery, relaunch …)."""
    return encode("event", seq, {"kind": "job_started", "job": "job-1", "rank": None,
                                 "step": None, "msg": "started",
                                 "data": {"reason": reason, "attempt": 2}}, ts=ts)


def test_a_job_one_host_gave_up_on_is_failed_while_its_peer_restarts(tmp_path: Path) -> None:
    """node-a's agent stopped retrying; node-b's keeps restarting its part into a
    rendezvous node-a will never join. The newest event is node-b's start, but the job
    is failed, not "starting", until the operator starts it again everywhere."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)

    with Store(path) as store:
        store.ingest("node-a", _gave_up(last + 1))
        store.ingest("node-b", _started(10**6, "recovery", last + 2))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    assert snap.progress.state == "failed"
    with Store(path) as store:
        store.ingest("node-a", _started(10**6 + 1, "relaunch", last + 3))
        store.ingest("node-b", _started(10**6 + 1, "relaunch", last + 3))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    assert snap.progress.state == "starting"


def test_a_job_whose_peer_stopped_its_part_after_a_give_up_reads_failed(tmp_path: Path) -> None:
    """node-a's agent gave up; node-b's agent stopped its part on hearing of it
    (`peer_gave_up`, then its torchrun's `job_exited`). The newest lifecycle event is
    that exit, but the job failed: it did not merely exit."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", _gave_up(last + 1))
        store.ingest("node-b", encode("event", 10**6, {
            "kind": "job_exited", "job": "job-1", "rank": None, "step": None,
            "msg": "job job-1 exited with code -15 (ended by the agent as another host of "
                   "the job gave up)", "data": {"returncode": -15, "ended_for": "peer"}},
            ts=last + 6))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    assert snap.progress.state == "failed"


def _agent_alert(code: str, kind: str, rank: int | None, what: str, ts: float) -> bytes:
    """A critical alert of job-1 as an agent raises it."""
    return encode("alert", 10**6, {"job": "job-1", "rank": rank, "kind": kind,
                                   "severity": "critical", "code": code,
                                   "where": {} if rank is None else {"rank": rank},
                                   "what": what, "hint": "fix it"}, ts=ts)


def _alert_codes(path: Path, until_ts: float | None = None) -> set[str]:
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=until_ts, label="REPLAY")
    return {a.code for a in snap.alerts}


def _alert_across_starts(tmp_path: Path, alerting: str,
                         alert: tuple[str, str, int | None, str],
                         other_start: tuple[str, str, float], restarted: str
                         ) -> tuple[Path, float]:
    """An agent's alert (code, kind, rank, what; 1 s past the last step) on host
    `alerting`, then another host's start (host, reason, seconds past the last step): the
    alert stands; then `restarted`'s relaunch 3 s past the last step: it is over. Returns
    the recording and the last step's time, for what a test checks beyond that."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    code = alert[0]
    with Store(path) as store:
        store.ingest(alerting, _agent_alert(*alert, last + 1))
        host, reason, after = other_start
        store.ingest(host, _started(10**6, reason, last + after))
    assert code in _alert_codes(path)
    with Store(path) as store:
        store.ingest(restarted, _started(10**6 + 1, "relaunch", last + 3))
    assert code not in _alert_codes(path)
    return path, last


@pytest.mark.slow
def test_a_recovery_stopped_alert_ends_when_the_operator_starts_the_job_again(
        tmp_path: Path) -> None:
    """The agent gave up and said so (critical); the operator fixed the job and
    relaunched it: it trains again, so the alert is over. A peer host's own recovery
    restart after the alert does not end it."""
    path, last = _alert_across_starts(
        tmp_path, "node-a",
        ("recovery_stopped", "parameter", 0, "job job-1 stopped after user_code"),
        ("node-b", "recovery", 2.0), "node-a")
    assert "recovery_stopped" in _alert_codes(path, until_ts=last + 2.5)


@pytest.mark.slow
def test_a_launch_failed_alert_ends_when_that_hosts_part_starts_again(
        tmp_path: Path) -> None:
    """node-b's launch failed (its run dir was broken) while node-a's part of the same
    relaunch started, after it: the job failed, and the alert stays. Once the operator
    fixed node-b and relaunched, node-b's part starts and the alert is over."""
    _alert_across_starts(
        tmp_path, "node-b",
        ("launch_failed", "resource", None, "job job-1: cannot prepare its run dir"),
        ("node-a", "relaunch", 1.5), "node-b")


@pytest.mark.slow
def test_ranks_whose_steps_stopped_arriving_are_named_beside_the_throughput(
        tmp_path: Path) -> None:
    """node-b's link is down: its ranks' steps arrive later, all at once. Meanwhile the
    throughput sums node-a's ranks only; the pane and the report say so, or it reads as
    the job running at half speed."""
    from cockpit.read.train_tail import MAX_RECENT_STEPS

    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-a", b"".join(
            encode("train", 10**6 + 2 * step + rank, {
                "job": "job-1", "rank": rank, "step": step, "loss": 0.6,
                "samples": syn.SAMPLES_PER_RANK, "step_time": 1.0},
                ts=syn.step_ts(step) + 0.001 * rank)
            for step in range(syn.STEPS, syn.STEPS + 2 * MAX_RECENT_STEPS) for rank in (0, 1)))
    with Store(path, read_only=True) as store:
        efficiency = build_snapshot(StoreReader(store), until_ts=None, label="LIVE").efficiency
    assert efficiency.samples_per_s == pytest.approx(2 * syn.SAMPLES_PER_RANK)
    assert efficiency.note is not None
    assert efficiency.note.startswith("ranks 2, 3 (node-b) not in the recent steps")
    assert efficiency.note.endswith("throughput counts 2 of 4 ranks")
    assert "ranks 2, 3 (node-b) not in the recent steps" in render_report(path)


@pytest.mark.slow
def test_ranks_a_scale_down_took_away_are_neither_counted_nor_named(tmp_path: Path) -> None:
    """node-b leaves the job (a scale-down); node-a's two ranks go on from the step 400
    checkpoint as a world of two. node-b's ranks 2 and 3 keep their steps in the store,
    but they are no longer ranks of the job: the throughput sums ranks 0 and 1 alone,
    and when rank 1's records then fall behind, it alone is named."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    restart_ts = syn.step_ts(syn.STEPS - 1) + 20.0
    seq = 10**6

    def steps(first: int, last: int, ranks: tuple[int, ...]) -> bytes:
        nonlocal seq
        lines = []
        for step in range(first, last + 1):
            for rank in ranks:
                seq += 1
                lines.append(encode("train", seq, {
                    "job": "job-1", "rank": rank, "step": step, "loss": 0.6,
                    "samples": syn.SAMPLES_PER_RANK, "step_time": 1.0},
                    ts=restart_ts + (step - 400) + 0.001 * rank))
        return b"".join(lines)

    with Store(path) as store:
        seq += 1
        store.ingest("node-a", encode("run", seq, {"job": "job-1", "rank": 0,
                                                   "world_size": 2}, ts=restart_ts))
        store.ingest("node-a", steps(401, 420, (0, 1)))
    with Store(path, read_only=True) as store:
        efficiency = build_snapshot(StoreReader(store), until_ts=None, label="LIVE").efficiency
    assert efficiency.samples_per_s == pytest.approx(2 * syn.SAMPLES_PER_RANK)
    assert efficiency.note is None

    with Store(path) as store:
        store.ingest("node-a", steps(421, 700, (0, 1)))
        store.ingest("node-a", steps(701, 1000, (0,)))
    with Store(path, read_only=True) as store:
        efficiency = build_snapshot(StoreReader(store), until_ts=None, label="LIVE").efficiency
    assert efficiency.note == ("rank 1 (node-a) not in the recent steps (records late or "
                               "host unreachable): throughput counts 1 of 2 ranks")


@pytest.mark.parametrize(("data", "state"), [
    ({"mode": "checkpoint", "ok": False, "error": "no checkpoint_saved within 60 s"},
     "running"),
    ({"mode": "follow", "ok": False, "error": "still running after 60 s"}, "running"),
    ({"mode": "freeze", "ok": False, "error": "job is paused"}, "running"),
    ({"mode": "follow", "ok": True}, "paused"),
])
def test_a_pause_that_failed_leaves_the_job_running(
        tmp_path: Path, data: dict, state: str) -> None:
    """The agent says a pause failed (`data.ok: false`, "the job keeps running"): the
    job is not shown paused while it trains."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    # A pause that took effect did on both hosts (node-b's agent follows node-a's).
    hosts = syn.HOSTS if data["ok"] else ("node-a",)
    with Store(path) as store:
        for i, host in enumerate(hosts):
            store.ingest(host, encode("event", 10**6 + i, {
                "kind": "pause", "job": "job-1", "rank": None, "step": None,
                "msg": "pause", "data": data}, ts=last + 1 + i))
    with Store(path, read_only=True) as store:
        p = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY").progress
    assert p.state == state
    assert (p.eta_note is None) == (state == "running")


def test_a_pause_that_took_effect_on_rank0s_host_only_is_not_the_jobs(
        tmp_path: Path) -> None:
    """node-a (rank 0's host) paused; node-b's pause failed and its part keeps running:
    the header reads the state of the part still running, noted, never "paused"."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", encode("event", 10**6, {
            "kind": "pause", "job": "job-1", "rank": None, "step": 590,
            "msg": "job job-1 paused at step 590", "data": {
                "mode": "checkpoint", "ok": True, "checkpoint": "/ck/590.pt", "step": 590}},
            ts=last + 1))
        store.ingest("node-b", encode("event", 10**6 + 1, {
            "kind": "pause", "job": "job-1", "rank": None, "step": None,
            "msg": "job job-1: pause failed: this host's part did not end within 1 s of the "
                   "pause; it keeps running",
            "data": {"mode": "follow", "ok": False, "error": "still running after 1 s"}},
            ts=last + 2))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    p = snap.progress
    assert (p.state, p.eta_note) == ("running", "partly paused: node-b still running")
    assert type(p.state) is str and p.resume_step is None
    assert (p.eta_seconds, p.eta_low, p.eta_high) == (None, None, None)
    assert "job-1" in snap.jobs_training  # a part of it still trains


@pytest.mark.slow
def test_a_paused_job_says_which_checkpoint_a_resume_starts_from(tmp_path: Path) -> None:
    """The position shows the newest step trained; a resume starts from the pause's
    checkpoint, which is older: the steps between are trained again."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", encode("event", 10**6, {
            "kind": "pause", "job": "job-1", "rank": None, "step": 400,
            "msg": "job job-1 paused at step 400", "data": {
                "mode": "checkpoint", "ok": True, "checkpoint": "/ck/ckpt-400.pt",
                "step": 400, "steps_discarded": syn.STEPS - 1 - 400}}, ts=last + 1))
        store.ingest("node-b", encode("event", 10**6 + 1, {  # its agent follows
            "kind": "pause", "job": "job-1", "rank": None, "step": None,
            "msg": "job job-1 paused", "data": {
                "mode": "follow", "ok": True, "checkpoint": "/ck/ckpt-400.pt", "step": 400}},
            ts=last + 2))
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        p = build_snapshot(reader, until_ts=None, label="REPLAY").progress
        before = build_snapshot(reader, until_ts=last, label="REPLAY").progress
    assert (p.state, p.step, p.resume_step) == ("paused", syn.STEPS - 1, 400)
    assert (before.state, before.resume_step) == ("running", None)
    assert "a resume starts from the checkpoint of step 400" in render_report(path)


@pytest.mark.slow
def test_a_restart_on_other_code_is_named_where_the_run_is_described(tmp_path: Path) -> None:
    """A resume after a `git pull` trains other code under the same job: the run info,
    an alert and the report say so, from when it happened."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    base = {"job": "job-1", "total_steps": syn.TOTAL_STEPS, "data_version": "v3"}
    with Store(path) as store:
        store.ingest("node-a", encode("run", 10**6, {
            **base, "rank": 0, "seed": 7, "git_commit": "def456"}, ts=last + 2))
        # Rank 1 declaring its own seed is not a change of rank 0's.
        store.ingest("node-b", encode("run", 10**6, {
            **base, "rank": 1, "seed": 8, "git_commit": "def456"}, ts=last + 2))
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        snap = build_snapshot(reader, until_ts=None, label="REPLAY")
        info = details(reader, "run")
        before = build_snapshot(reader, until_ts=last, label="REPLAY")
    assert isinstance(info, RunInfo) and info.git_commit == "def456"
    assert [(c["field"], c["old"], c["new"], c["ts"]) for c in info.changes] == [
        ("git_commit", "abc123", "def456", last + 2)]
    alert = next(a for a in snap.alerts if a.code == "run_changed")
    assert alert.ts == last + 2 and "git commit changed from abc123 to def456" in alert.what
    assert not any(a.code == "run_changed" for a in before.alerts)
    assert "git commit changed  abc123 → def456" in render_report(path)


def test_records_the_store_rejected_are_an_alert_not_a_secret(tmp_path: Path) -> None:
    """Lines the store could not type are counted and sampled per host; the screen and
    the report say so, with the newest reason."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-b", b'{"t":"train","seq":1000001,"job":"job-1",\n'
                               b'not json at all\n')
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    alert = next(a for a in snap.alerts if a.code == "records_rejected")
    assert alert.where == "host node-b" and alert.severity == "warning"
    assert alert.what.startswith("2 records from this host could not be stored; the last: ")
    assert not any(a.code == "records_rejected" and "node-a" in a.where for a in snap.alerts)
    assert "records_rejected" in render_report(path)


@pytest.mark.slow
def test_records_stored_without_some_values_are_said_too(tmp_path: Path) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-a", b'{"t":"train","seq":1000001,"ts":%f,"job":"job-1","rank":0,'
                               b'"step":600,"loss":1.5,"samples":%d}\n'
                     % (syn.step_ts(syn.STEPS - 1) + 1, 2**70))
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    alert = next(a for a in snap.alerts if a.code == "records_rejected")
    assert alert.what.startswith("1 record stored without values their columns cannot hold")
    assert "could not be stored" not in alert.what
    with Store(path) as store:  # live: a second one arrives between two refreshes
        reader = StoreReader(store)
        build_snapshot(reader, until_ts=None, label="LIVE")
        store.ingest("node-a", b'{"t":"train","seq":1000002,"ts":%f,"job":"job-1","rank":0,'
                               b'"step":601,"loss":1.4,"tokens":%d}\n'
                     % (syn.step_ts(syn.STEPS - 1) + 2, 2**71))
        again = build_snapshot(reader, until_ts=None, label="LIVE")
    alert = next(a for a in again.alerts if a.code == "records_rejected")
    assert alert.what.startswith("2 records stored without")


def test_a_jobs_log_and_events_are_its_own(tmp_path: Path) -> None:
    """A fork training beside its parent writes to the same hosts: its lines and events
    are not the parent's; a host's own events (no job) belong to both."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", b"".join([
            encode("log", 10**6, {"job": "job-1-fork-1", "rank": 0, "stream": "stdout",
                                  "line": "fork step 5"}, ts=last + 1),
            encode("event", 10**6 + 1, {"kind": "checkpoint_saved", "job": "job-1-fork-1",
                                        "rank": 0, "step": 5, "msg": "fork checkpoint",
                                        "data": {}}, ts=last + 2),
            encode("event", 10**6 + 2, {"kind": "xid", "job": None, "rank": None,
                                        "step": None, "msg": "XID 79 on gpu 1",
                                        "data": {}}, ts=last + 3),
        ]))
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        log = details(reader, "log", job="job-1")
        fork_log = details(reader, "log", job="job-1-fork-1")
        events = details(reader, "events", job="job-1")
        fork_events = details(reader, "events", job="job-1-fork-1")
    assert isinstance(log, LogTail) and isinstance(fork_log, LogTail)
    assert "fork step 5" not in [line.line for line in log.lines]
    assert [line.line for line in fork_log.lines] == ["fork step 5"]
    assert isinstance(events, EventsTimeline) and isinstance(fork_events, EventsTimeline)
    assert "fork checkpoint" not in [e.msg for e in events.events]
    assert "XID 79 on gpu 1" in [e.msg for e in events.events]
    assert [e.msg for e in fork_events.events][-2:] == ["fork checkpoint", "XID 79 on gpu 1"]
    assert all(e.kind == "xid" for e in fork_events.events[:-2])  # the hosts' own, earlier


def test_a_paused_job_is_not_credited_with_its_hosts_gpus_serving_another(
        tmp_path: Path) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    lines = [encode("event", 10**6, {
        "kind": "pause", "job": "job-1", "rank": None, "step": 590, "msg": "paused",
        "data": {"mode": "checkpoint", "ok": True, "step": 590}}, ts=last + 1)]
    lines += [encode("train", 10**6 + i, {
        "job": "job-1-fork-1", "rank": 0, "step": i, "loss": 2.0, "samples": 8,
        "step_time": 1.0}, ts=last + 2 + i) for i in range(1, 6)]
    with Store(path) as store:
        store.ingest("node-a", b"".join(lines))
        store.ingest("node-b", encode("event", 10**6 + 10, {  # its agent follows
            "kind": "pause", "job": "job-1", "rank": None, "step": None, "msg": "paused",
            "data": {"mode": "follow", "ok": True}}, ts=last + 1.5))
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        paused = build_snapshot(reader, until_ts=None, label="REPLAY", job="job-1")
        fork = build_snapshot(reader, until_ts=None, label="REPLAY", job="job-1-fork-1")
    assert paused.progress.state == "paused" and paused.efficiency.gpu_busy is None
    assert "hosts' GPUs now serve job-1-fork-1" in (paused.efficiency.note or "")
    assert fork.efficiency.gpu_busy is not None


def test_host_detail_in_a_replay_shows_the_link_at_the_cursor(tmp_path: Path) -> None:
    """The stored link state is the one at the end of the recording ("stopped" once the
    cockpit quit); at a cursor in the middle the records say the host was streaming."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.set_host_state("node-a", "stopped", "")
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        middle = details(reader, "host", host="node-a", until_ts=syn.step_ts(300))
        end = details(reader, "host", host="node-a")
    assert isinstance(middle, HostDetail) and isinstance(end, HostDetail)
    assert (middle.state, end.state) == ("streaming", "stopped")


def test_a_loss_finding_keeps_the_time_it_was_first_found(tmp_path: Path) -> None:
    """Spikes, divergence and the LR rule have no better time than the refresh that
    found them: later live refreshes keep that first time instead of re-dating them."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:  # a live store, being written
        reader = StoreReader(store)
        end = syn.step_ts(syn.STEPS - 1)
        first = build_snapshot(reader, until_ts=None, label="LIVE", now=end + 10)
        later = build_snapshot(reader, until_ts=None, label="LIVE", now=end + 70)
    found = {a.code: a.ts for a in first.alerts}
    again = {a.code: a.ts for a in later.alerts}
    assert found["divergence"] == end + 10 and again["divergence"] == end + 10
    assert again["loss_spike"] == found["loss_spike"]


def test_adjustments_and_restarts_are_marked_and_kept_up_to_date(tmp_path: Path) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    adjusted, resumed = syn.intervention_lines()
    with Store(path) as store:
        store.ingest("node-a", adjusted)
        reader = StoreReader(store)
        first = build_snapshot(reader, until_ts=None, label="LIVE").effect.markers
        assert first == (Marker(syn.ADJUST_STEP, "adjust", "lr_scale=0.5"),)
        # Live: a restart arrives; the held markers are extended from the added rows.
        store.ingest("node-a", resumed)
        live = build_snapshot(reader, until_ts=None, label="LIVE").effect.markers
        fresh = build_snapshot(StoreReader(store), until_ts=None, label="LIVE").effect.markers
    assert live == fresh == (
        Marker(syn.RESUME_STEP, "restart", f"resumed from ckpt-{syn.RESUME_STEP:08d}.pt"),
        Marker(syn.ADJUST_STEP, "adjust", "lr_scale=0.5"))


def test_the_same_event_from_several_ranks_is_one_row() -> None:
    from cockpit.read.details import event_rows

    def ev(ts: float, msg: str, host: str = "vm", step: int | None = 0) -> dict:
        return {"ts": ts, "host": host, "kind": "stage", "msg": msg, "step": step}

    rows = event_rows([ev(1.0, "stage train started"), ev(1.2, "stage train started"),
                       ev(1.3, "stage train started", host="vm2"),
                       ev(9.0, "stage train started"), ev(9.1, "stage eval started")])
    assert [(r.host, r.msg, r.count) for r in rows] == [
        ("vm", "stage train started", 2), ("vm2", "stage train started", 1),
        ("vm", "stage train started", 1), ("vm", "stage eval started", 1)]
