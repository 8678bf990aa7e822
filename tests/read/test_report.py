from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from cockpit.errors import CockpitError
from cockpit.read.report import REPORT_VERSION, render_report, sparkline
from cockpit.read.source import build_snapshot
from cockpit.sessions.replay import ReplaySource
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.harness.recording import RECORDING
from tests.read import synthetic as syn

TOP_KEYS = {"report_version", "recording", "at", "first_ts", "last_ts", "job", "jobs", "run",
            "progress", "effect", "efficiency", "health", "interruptions", "alerts",
            "checkpoint", "slurm"}


def test_json_report_has_the_documented_keys(recording: Path) -> None:
    data = json.loads(render_report(recording, fmt="json"))
    assert set(data) == TOP_KEYS and data["report_version"] == REPORT_VERSION
    assert data["job"] == "job-1" and data["run"]["world_size"] == 4
    assert data["progress"]["step"] == 599 and data["progress"]["state"] == "running"
    assert data["effect"]["nonfinite_steps"] == [syn.NAN_STEP]
    assert data["effect"]["divergence_step"] == syn.BEST_VAL_STEP + syn.EVAL_EVERY
    assert len(data["effect"]["train_loss"]["step"]) == len(data["effect"]["train_loss"]["ema"])
    assert data["efficiency"]["slowest_ranks"][0]["rank"] == syn.STRAGGLER_RANK
    ranks = data["efficiency"]["ranks"]
    assert data["efficiency"]["rank_count"] == len(ranks) == 4
    assert ranks[0]["rank"] == syn.STRAGGLER_RANK and ranks[0]["behind"] > 0
    assert set(ranks[0]) == {"rank", "host", "step_time", "wall_time", "data_share",
                             "comm_share", "behind"}
    assert {h["host"] for h in data["health"]["hosts"]} == set(syn.HOSTS)
    assert data["health"]["hosts"][0]["gpus_online"] == 2
    assert data["interruptions"][0]["steps_lost"] == 10
    assert {"kind", "severity", "code", "where", "what", "hint"} <= set(data["alerts"][0])
    ckpt = data["checkpoint"]
    assert ckpt["cost_s"] == syn.CHECKPOINT_SECONDS and ckpt["interval_s"] > 0
    assert not ckpt["mtbf_is_lower_bound"] and "Daly" in ckpt["advice"]


def test_json_report_at_a_cursor(recording: Path) -> None:
    data = json.loads(render_report(recording, fmt="json", until_ts=syn.step_ts(100) + 0.5))
    assert data["progress"]["step"] == 100 and data["interruptions"] == []
    assert data["effect"]["nonfinite_steps"] == []


def test_text_report_shows_the_four_instruments(recording: Path) -> None:
    text = render_report(recording)
    for heading in ("PROGRESS", "EFFECT", "EFFICIENCY", "HEALTH", "INTERRUPTIONS", "ALERTS",
                    "CHECKPOINTS"):
        assert f"\n{heading}\n" in text
    assert "599 / 1,000 (59.9%)" in text
    assert "(estimate;" in text
    assert "CRITICAL parameter nonfinite_loss @ step 450" in text
    assert "try: " in text and "rank 2 killed (SIGKILL)" in text
    assert max(len(line) for line in text.splitlines()) < 200


def test_markdown_report_uses_headings_and_tables(recording: Path) -> None:
    md = render_report(recording, fmt="markdown")
    assert md.startswith("# Training report: job-1")
    for heading in ("## Progress", "## Effect", "## Efficiency", "## Health", "## Alerts"):
        assert heading in md
    assert "| host | link | GPUs |" in md
    # The Efficiency pane's rank table, the straggler first.
    table = md[md.index("| rank | host | step time | own time |"):].splitlines()
    assert table[2].startswith(f"| {syn.STRAGGLER_RANK} | node-b |")
    assert len([line for line in table[2:] if line.startswith("|")]) >= 4
    assert "| critical | parameter | nonfinite_loss | step 450 |" in md


def test_bad_format_and_missing_file_are_clear_errors(recording: Path, tmp_path: Path) -> None:
    with pytest.raises(CockpitError, match="unknown report format 'html'"):
        render_report(recording, fmt="html")
    with pytest.raises(CockpitError, match="does not exist"):
        render_report(tmp_path / "missing.duckdb")


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_a_truncated_recording_is_named_damaged_not_a_traceback(
        recording: Path, tmp_path: Path, keep: float) -> None:
    """A recording cut short (copied while written, a full disk) fails on opening or on
    the first query that needs a missing page: either way the user reads what happened."""
    data = recording.read_bytes()
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CockpitError, match="is damaged or truncated: DuckDB cannot read it"):
        render_report(cut)
    try:  # a replay opens what it can; its reads then fail with the same words
        ReplaySource(cut).stop()
    except CockpitError as exc:
        assert "damaged or truncated" in str(exc) or "cannot open the recording" in str(exc)


@pytest.mark.slow
def test_a_recording_overwritten_in_the_middle_is_named_damaged_not_a_traceback(
        recording: Path, tmp_path: Path) -> None:
    """Overwritten pages fail their checksum when a query reaches them, which DuckDB
    raises as a plain error rather than an I/O one. Each block in turn: the report
    either does not need it or says the file is damaged."""
    data = recording.read_bytes()
    block, header = 256 * 1024, 12 * 1024
    bad = tmp_path / "bad.duckdb"
    said = []
    for start in range(header + 1000, len(data), block):
        bad.write_bytes(data[:start] + b"\xa5" * 4096 + data[start + 4096:])
        try:
            render_report(bad)
        except CockpitError as exc:
            said.append(str(exc))
    assert said and all("is damaged or truncated: DuckDB cannot read it" in s for s in said)


def test_an_empty_file_is_named_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.duckdb"
    empty.write_bytes(b"")
    with pytest.raises(CockpitError, match=r"empty\.duckdb is an empty file \(0 bytes\)"):
        render_report(empty)


def test_the_report_finds_what_the_screen_finds(recording: Path) -> None:
    """Spikes and divergence are read from the downsampled loss: the report asks for the
    screen's resolution, so one recording gets one verdict."""
    data = json.loads(render_report(recording, fmt="json"))
    with Store(recording, read_only=True) as store:
        screen = build_snapshot(StoreReader(store), until_ts=None, label="LIVE").effect
    assert data["effect"]["divergence_step"] == screen.divergence_step is not None
    assert data["effect"]["spike_steps"] == list(screen.spike_steps)
    assert len(data["effect"]["train_loss"]["step"]) == len(screen.train_loss.x)
    assert all(isinstance(s, int) for s in data["effect"]["train_loss"]["step"])
    assert len(sparkline([float(i) for i in range(500)])) <= 60


def test_sparkline_scales_to_the_range() -> None:
    assert sparkline([1.0, None, 2.0, 3.0]) == "▁▅█"
    assert sparkline([2.0, 2.0]) == "▁▁"
    assert sparkline([]) == ""


@pytest.mark.slow
def test_the_report_lists_what_was_done_to_the_run(tmp_path: Path) -> None:
    path = syn.write_recording(tmp_path / "r.duckdb")
    with Store(path) as store:
        store.ingest("node-a", b"".join(syn.intervention_lines()))
    text = render_report(path)
    assert (f"changes        restart at step {syn.RESUME_STEP}; lr_scale=0.5 at step "
            f"{syn.ADJUST_STEP}") in text
    data = json.loads(render_report(path, fmt="json"))
    assert [m["kind"] for m in data["effect"]["markers"]] == ["restart", "adjust"]


@pytest.mark.slow
def test_a_recording_of_a_job_and_its_fork_reports_either(tmp_path: Path) -> None:
    """By default the job the screen shows (the fork, started last); `job=` any job of
    the recording, training or not; the report names the others, and refuses a job
    the recording does not have, listing those it has."""
    from tests.read.test_train_tail import steps, write_fork_beside_parent
    from tests.store.wire import TS0

    path = tmp_path / "fork.duckdb"
    with Store(path) as store:
        seq = write_fork_beside_parent(store)
        store.ingest("h1", steps(101, 300, seq0=seq, job="parent"))  # the fork has stopped
    default = json.loads(render_report(path, fmt="json", until_ts=TS0 + 110))
    assert (default["job"], default["jobs"]) == ("fork", ["parent", "fork"])
    assert default["progress"]["step"] == 80
    parent = json.loads(render_report(path, fmt="json", until_ts=TS0 + 110, job="parent"))
    assert parent["job"] == "parent" and parent["progress"]["step"] > 80
    stopped = json.loads(render_report(path, fmt="json", job="fork"))  # not training at the end
    assert stopped["job"] == "fork" and stopped["progress"]["step"] == 80
    text = render_report(path, job="parent")
    assert text.startswith("Training report: parent")
    assert re.search(r"other jobs +fork \(report one with --job NAME\)", text)
    with pytest.raises(CockpitError, match=r"fork.duckdb has no job 'child'; its jobs: "
                                           r"parent, fork"):
        render_report(path, job="child")


def test_a_recording_without_records_reports_its_hosts_and_why(tmp_path: Path) -> None:
    """`cockpit watch --headless` against hosts that never streamed (a refused key): the
    report says so rather than printing an empty page dated 1970."""
    path = tmp_path / "refused.duckdb"
    with Store(path) as store:
        store.set_host_state("gpu1", "hostkey-unknown",
                             "presented an unknown ssh-ed25519 host key SHA256:xJg5abc")
    data = json.loads(render_report(path, fmt="json"))
    assert data["at"] is None and data["job"] is None and data["jobs"] == []
    assert [(h["host"], h["state"]) for h in data["health"]["hosts"]] == [
        ("gpu1", "hostkey-unknown")]
    assert [a["code"] for a in data["alerts"]] == ["host_hostkey_unknown"]
    text = render_report(path)
    assert re.search(r"report at +n/a", text) and "1970" not in text
    assert "SHA256:xJg5abc" in text


@pytest.mark.slow
def test_a_forks_report_names_its_parent_and_the_step_it_started_from(tmp_path: Path) -> None:
    """The agent's `fork` event says both (as a demo fork recorded it); without them the
    fork's first step reads as a restart of a job of its own."""
    from tests.read.test_train_tail import write_fork_beside_parent
    from tests.store.wire import TS0, encode

    path = tmp_path / "fork.duckdb"
    with Store(path) as store:
        seq = write_fork_beside_parent(store)
        store.ingest("h2", encode("event", seq, {
            "kind": "fork", "job": "fork", "rank": None, "step": 50,
            "msg": "job fork forked from parent at step 50",
            "data": {"ok": True, "parent": "parent", "parent_step": 50,
                     "checkpoint": "/runs/fork/checkpoints/ckpt-00000050.pt"}}, ts=TS0 + 49))
    fork = json.loads(render_report(path, fmt="json", job="fork"))
    assert fork["run"]["forked_from"] == {"job": "parent", "step": 50}
    assert json.loads(render_report(path, fmt="json", job="parent"))["run"]["forked_from"] is None
    assert re.search(r"forked from +parent at step 50\n", render_report(path, job="fork"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "data", "why"), [
    ("resume", {"checkpoint": "ckpt.pt", "step": syn.RESUME_STEP}, "resume after a pause"),
    ("recovery", {"cause": "killed", "checkpoint_step": syn.RESUME_STEP, "steps_lost": 5},
     "recovery from killed"),
])
def test_the_report_says_why_the_run_restarted(tmp_path: Path, kind: str,
                                               data: dict[str, object], why: str) -> None:
    """An operator's resume and a crash's recovery mark the chart alike; the agent's
    event before the restart tells them apart."""
    from tests.store.wire import encode

    path = syn.write_recording(tmp_path / "r.duckdb")
    last = syn.step_ts(syn.STEPS - 1)
    with Store(path) as store:
        store.ingest("node-a", encode("event", 10**6 - 1, {
            "kind": kind, "job": "job-1", "rank": None, "step": syn.RESUME_STEP,
            "msg": kind, "data": data}, ts=last + 1) + b"".join(syn.intervention_lines()))
    assert f"restart at step {syn.RESUME_STEP} ({why})" in render_report(path)
    markers = json.loads(render_report(path, fmt="json"))["effect"]["markers"]
    assert [m["why"] for m in markers] == [why, None]


def test_the_report_names_when_the_run_it_reports_started(recorded_store: Path) -> None:
    """The recorded run was recovered by its agent: the figures are of the run that
    started then, and the first launch is named beside it, as run info shows them."""
    from tests.ui.recorded import recording_facts

    facts = recording_facts()
    assert facts.restarted_ts is not None and facts.job_started_ts is not None
    run = json.loads(render_report(recorded_store, fmt="json"))["run"]
    assert run["run_started"] == pytest.approx(facts.restarted_ts)
    assert run["started"] == pytest.approx(facts.job_started_ts)
    text = render_report(recorded_store)
    assert re.search(r"run started +\d{4}-\d\d-\d\d", text), text
    assert re.search(r"first launch +\d{4}-\d\d-\d\d", text), text


def test_the_recorded_runs_time_shares_are_of_all_its_recent_steps(recorded_store: Path) -> None:
    """The example trainer times communication only on the steps that broadcast its
    controls: its share is of the recent steps' whole time, as the raw records add up."""
    from cockpit.read.train_tail import steps_per_rank
    from tests.ui.recorded import recording_facts

    facts = recording_facts()
    with gzip.open(RECORDING, "rt", encoding="utf-8") as journal:
        train = [r for r in map(json.loads, journal) if r["t"] == "train"]
    newest = {}  # (rank, step) -> its newest run's record
    for r in sorted(train, key=lambda r: r["ts"]):
        if r["step"] > facts.last_step - steps_per_rank(facts.world_size):
            newest[r["rank"], r["step"]] = r
    whole = sum(r["step_time"] for r in newest.values())
    assert any(r["comm_time"] is None for r in newest.values())
    efficiency = json.loads(render_report(recorded_store, fmt="json"))["efficiency"]
    for name, field in (("comm_pct", "comm_time"), ("data_wait_pct", "data_time")):
        part = sum(r[field] or 0.0 for r in newest.values())
        assert efficiency[name] == pytest.approx(100 * part / whole), name


def test_the_recorded_runs_checkpoint_cadence_leaves_out_its_outage(
        recorded_store: Path) -> None:
    """The recorded run checkpointed at steps 100 and 200, was killed, and after its
    recovery at step 300: the time from 200 to 300 holds the outage, so its cadence is
    the one gap between checkpoints of the same run."""
    from tests.ui.recorded import recording_facts

    facts = recording_facts()
    with gzip.open(RECORDING, "rt", encoding="utf-8") as journal:
        saved = [r["ts"] for r in map(json.loads, journal)
                 if r["t"] == "event" and r["kind"] == "checkpoint_saved"]
    assert facts.checkpoint_steps == (100, 200, 300) and facts.restarted_ts is not None
    assert saved[1] < facts.restarted_ts < saved[2]
    checkpoint = json.loads(render_report(recorded_store, fmt="json"))["checkpoint"]
    assert checkpoint["current_interval_s"] == pytest.approx(saved[1] - saved[0])


def test_an_outage_whose_restart_has_begun_is_not_yet_recovered(recorded_store: Path) -> None:
    """Between the recorded run's restart by its agent and its first step the job is
    starting again: the interruption is not recovered yet, not "no"."""
    from tests.ui.recorded import recording_facts

    facts = recording_facts()
    assert facts.restarted_ts is not None
    first_after = min(ts for ts, _ in facts.train_times if ts > facts.restarted_ts)
    at = (facts.restarted_ts + first_after) / 2
    report = json.loads(render_report(recorded_store, fmt="json", until_ts=at))
    assert report["progress"]["state"] == "starting"
    text = render_report(recorded_store, until_ts=at)
    assert re.search(r"UTC +\S+ +killed +\S+ +not recovered yet +n/a", text), text
