"""Formatting and operator-input parsing: n/a for missing data, clear refusals."""

from __future__ import annotations

import dataclasses
import random

import pytest
from textual.content import Content

from cockpit.analysis.gpu_state import host_problem
from cockpit.read.details import RunInfo
from cockpit.snapshot import Effect, GpuCell, HostHealth, Interruption, Marker, Progress, Series
from cockpit.ui import format as fmt
from cockpit.ui import job_control as jc
from cockpit.ui.replay_actions import SPEEDS, next_speed
from cockpit.ui.screens.host_detail import GPU_COLUMNS, gpu_rows
from cockpit.ui.screens.run_info import shown
from cockpit.ui.widgets.detail_view import field_cell, series_scale, series_value_text
from cockpit.ui.widgets.gauge import level_style
from cockpit.ui.widgets.gpu_grid import host_line
from cockpit.ui.widgets.interruption_log import interruption_line
from cockpit.ui.widgets.loss_chart import legend, nearest_y
from cockpit.ui.widgets.progress_pane import bar_progress, eta_text
from cockpit.ui.widgets.spark_bars import DATA_RANGE, PERCENT
from cockpit.ui.widgets.sparkline_chart import range_text
from cockpit.ui.widgets.status_bar import fit_parts


def test_missing_values_render_as_na() -> None:
    assert {fmt.na(None), fmt.duration(None), fmt.si(None), fmt.size(None),
            fmt.percent(None), fmt.clock(None), fmt.loss(None)} == {"n/a"}
    assert fmt.ratio(5, 0) is None and fmt.ratio(None, 10) is None


def test_durations_and_scales() -> None:
    assert fmt.duration(3 * 86400 + 4 * 3600 + 5) == "3d 4h"
    assert fmt.duration(7260) == "2h 01m"
    assert fmt.duration(45.4) == "45s"
    assert fmt.si(1_660_000, "B") == "1.66MB"
    assert fmt.size(3 * 2**30) == "3.0GiB"
    assert fmt.loss(float("nan")) == "nan"


def test_a_paused_job_says_where_its_resume_starts() -> None:
    paused = Progress(step=1680, eta_note="paused", state="paused", resume_step=1665)
    assert eta_text(paused) == "ETA n/a: job paused; resumes from step 1,665 (15 steps redone)"
    at_checkpoint = Progress(step=1665, eta_note="paused", state="paused", resume_step=1665)
    assert eta_text(at_checkpoint) == "ETA n/a: job paused; resumes from step 1,665"


def test_eta_is_always_called_an_estimate() -> None:
    assert "estimate" in eta_text(Progress(eta_seconds=100, eta_low=80, eta_high=130,
                                           steps_per_second=2))
    assert "estimate" in eta_text(Progress())


def test_a_gauge_colours_the_level_the_snapshot_gives() -> None:
    assert level_style("good") == "$success"
    assert level_style("warn") == "$warning"
    assert level_style("bad") == "$error"
    assert level_style(None) == "$text"


def test_lr_scale_parsing() -> None:
    assert jc.parse_lr_scale(" 0.5 ") == 0.5
    assert jc.parse_lr_scale("1e-3") == 1e-3 and jc.parse_lr_scale("100") == 100
    for bad in ("abc", "0", "-1", "inf", "nan"):
        with pytest.raises(ValueError):
            jc.parse_lr_scale(bad)
    for slip in ("1e6", "0.0001", "101"):
        with pytest.raises(ValueError, match=r"outside 0\.001–100"):
            jc.parse_lr_scale(slip)


def test_the_confirmation_names_the_hosts_an_operation_cannot_reach() -> None:
    links = {"a": "streaming", "b": "unreachable", "c": "stale", "d": "auth-failed"}
    assert jc.link_warning(["a", "c"], links) == ""
    warning = jc.link_warning(["a", "b", "d", "e"], links)
    assert "Not reachable now: b (unreachable), d (auth-failed)." in warning
    assert "their part of the job is left as it was; send the operation again" in warning
    # An agent follows a pause or stop of the others through the shared run dir.
    assert "its agent ends its part the same way" in jc.link_warning(["b"], links, "pause")
    assert "ends its part" not in jc.link_warning(["b"], links, "relaunch")
    assert "their agents end their part" in jc.link_warning(["b", "d"], links, "stop")


def test_override_parsing_reads_toml_values() -> None:
    assert jc.parse_overrides("lr=0.001, name=run-b,\nwarmup = 100, amp=true") == {
        "lr": 0.001, "name": "run-b", "warmup": 100, "amp": True}
    assert jc.parse_overrides("  ") == {}
    with pytest.raises(ValueError, match="key=value"):
        jc.parse_overrides("lr")


def test_host_parsing_refuses_unknown_hosts() -> None:
    assert jc.parse_hosts("a, b", ["a", "b", "c"]) == ("a", "b")
    with pytest.raises(ValueError, match=r"unknown host.*zz"):
        jc.parse_hosts("a zz", ["a"])


def test_speed_ladder_clamps() -> None:
    assert next_speed(10, 1) == 20 and next_speed(10, -1) == 5
    assert next_speed(SPEEDS[-1], 1) == SPEEDS[-1] and next_speed(SPEEDS[0], -1) == SPEEDS[0]
    assert next_speed(3, 1) == 5  # off-ladder speeds snap to the next rung


def test_markers_sit_on_the_bucket_nearest_their_step() -> None:
    rnd = random.Random(3)
    for _ in range(2000):
        xs = [float(x) for x in sorted(rnd.sample(range(200), rnd.randint(0, 12)))]
        ys = [rnd.random() for _ in xs]
        step = rnd.choice([rnd.uniform(-10, 210), float(rnd.randint(-5, 205))])
        # Brute force: the closest x, the earlier of two as close.
        want = ys[min(range(len(xs)), key=lambda i: abs(xs[i] - step))] if xs else None
        assert nearest_y(xs, ys, step) == want, (xs, step)
    assert nearest_y([10.0, 20.0], [1.0, 2.0], 15.0) == 1.0


def test_the_progress_bar_never_shows_more_than_is_done() -> None:
    assert bar_progress(None) == 0.0
    assert bar_progress(95.0) == 95.0  # a whole percentage stays whole
    assert bar_progress(94.999) == 94.95
    assert bar_progress(33.33333) == 33.3
    assert all(bar_progress(p / 997) <= p / 997 < bar_progress(p / 997) + 0.05
               for p in range(0, 99_701, 37))


def test_detail_cells_read_in_their_units() -> None:
    assert field_cell("mem_used", 66034926139) == "61.5GiB"
    assert field_cell("gpus.0.mem_total", 85899345920) == "80.0GiB"
    assert field_cell("net_rx", 2048) == "2.0KiB/s"
    assert field_cell("pcie_tx", 1536.0) == "1.5MiB/s"  # NVML reports KB/s
    assert field_cell("rss", None) == fmt.NA_TEXT
    assert field_cell("mem_used", float("nan")) == "nan"
    assert field_cell("pid", 7524) == "7524"
    assert field_cell("util", 90.63) == "90.63"


def test_drill_down_sparklines_print_their_scale_in_units() -> None:
    history = Series(x=(1.0, 2.0, 3.0), last=(40.0, None, 77.4), lo=(38.0, None, 70.0),
                     hi=(45.0, None, 79.0))
    assert range_text(history, series_value_text("gpu_temp")) == "now 77°C · 38°C–79°C"
    assert range_text(history, series_value_text("util_per_gpu")) == "now 77% · 38%–79%"
    used = Series(x=(1.0,), last=(2 * 1024**3,), lo=(), hi=())
    assert range_text(used, series_value_text("gpu_mem_used")) == "now 2.0GiB · 2.0GiB–2.0GiB"
    assert range_text(Series(), series_value_text("cpu")) == "no data"
    assert range_text(history, series_value_text("grad_norm")) == "now 77.4 · 38–79"


def test_drill_down_percentages_are_drawn_on_their_0_to_100_scale() -> None:
    """A host's CPU steady at 40 % is drawn at 40 %, not as the lowest bar; a
    temperature or a memory size keeps the bars' own range, printed beside them."""
    assert series_scale("util_per_gpu") == PERCENT and series_scale("cpu") == PERCENT
    assert series_scale("gpu_util") == PERCENT
    for name in ("gpu_temp", "gpu_mem_used", "gpu_power", "grad_norm"):
        assert series_scale(name) == DATA_RANGE, name


def test_a_seek_press_scales_with_speed_but_never_crosses_a_short_recording() -> None:
    from cockpit.ui.replay_actions import SEEK_SECONDS, seek_seconds

    day = 86_400.0
    assert seek_seconds(1.0, day) == SEEK_SECONDS
    assert seek_seconds(0.25, day) == SEEK_SECONDS
    assert seek_seconds(100.0, day) == 100 * SEEK_SECONDS  # a long run: bigger steps
    assert seek_seconds(20.0, 300.0) == SEEK_SECONDS  # 5 minutes at 20x: not 20 minutes
    assert seek_seconds(20.0, 3_600.0) == 360.0  # a tenth of an hour


def test_operations_that_cannot_act_on_the_jobs_state_are_refused_at_once() -> None:
    assert jc.refusal("pause", "j", "running", None) is None
    assert jc.refusal("checkpoint", "j", "recovering", None) is None
    assert jc.refusal("pause", "j", "finished", "finished") == (
        "job j is finished: no process to pause")
    assert jc.refusal("pause", "j", "exited", "exited with code 1") == (
        "job j is exited with code 1: no process to pause")
    assert jc.refusal("pause", "j", "failed", "failed (a gave up after oom: twice)") == (
        "job j is failed (a gave up after oom: twice): no process to pause")
    assert jc.refusal("pause", "j", "exited", "killed by signal 9") == (
        "job j is exited (killed by signal 9): no process to pause")
    assert jc.refusal("checkpoint", "j", "paused", "paused") == (
        "job j is paused: no process to checkpoint; resume it first (r)")
    assert "resuming it would exit at once" in (
        jc.refusal("resume", "j", "finished", "finished") or "")
    assert jc.refusal("resume", "j", "exited", "exited before its end") is None
    assert jc.refusal("resume", "j", "paused", "paused") is None
    assert jc.refusal("resume", "j", "exited", "exited with code 1") is None
    assert jc.refusal("fork", "j", "finished", "finished") is None
    assert jc.refusal("adjust", "j", "paused", "paused") is None  # applies on resume
    assert jc.refusal("resume", "j", "stalled", "stalled") == (
        "job j is stalled: there is nothing to resume")


def test_a_relaunch_cannot_exclude_every_host() -> None:
    assert jc.parse_exclusions("b", ["a", "b"], ["a", "b"]) == ("b",)
    with pytest.raises(ValueError, match="leaves the job no host"):
        jc.parse_exclusions("a b", ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError, match="unknown host"):
        jc.parse_exclusions("zz9", ["a", "b"], ["a", "b"])


def test_the_step_axis_reads_whole_round_steps_in_one_unit() -> None:
    from cockpit.ui.widgets.loss_chart import step_labels, step_ticks

    assert step_ticks(0, 398) == [0, 100, 200, 300]  # not 0.0 99.5 199.0 298.5
    assert step_ticks(3, 3) == [3]  # one step so far: not -1.00 … 1.00
    ticks = step_ticks(100, 12_000)
    assert ticks == [2_500, 5_000, 7_500, 10_000]
    assert step_labels(ticks) == ["2.5k", "5k", "7.5k", "10k"]
    assert step_labels(step_ticks(0, 10_000_000))[:2] == ["0", "2M"]
    assert all(isinstance(t, int) for t in step_ticks(0.4, 1_361.7))


def test_the_loss_legend_names_only_what_the_chart_draws() -> None:
    assert legend(None, False) == ""
    plain = Effect(train_loss=Series((1.0, 2.0), (3.0, 2.5)),
                   train_loss_ema=Series((1.0, 2.0), (3.0, 2.8)))
    assert legend(plain, False) == "[$foreground-muted]•[/] train  [$primary]⠉⠒[/] EMA"
    eventful = Effect(
        train_loss=Series((1.0, 2.0), (3.0, -1.0)), val_loss=Series((2.0,), (-0.5,)),
        best_val_step=2, best_val_loss=-0.5, spike_steps=(2,), nonfinite_steps=(5,),
        divergence_step=2, markers=(Marker(2, "restart", "resumed"),))
    shown = legend(eventful, False)
    for label in ("train", "val", "best val", "spike", "NaN/Inf", "diverging", "restart"):
        assert f"[/] {label}" in shown
    assert "adjusted" not in shown and "EMA" not in shown
    # On a log axis the non-positive val loss and best val are not drawn, nor named.
    assert "val" not in legend(eventful, True).replace("NaN/Inf", "")


def test_run_info_lists_what_changed_under_the_same_job() -> None:
    info = RunInfo(job="j", declared=True, git_commit="def456", changes=(
        {"field": "git_commit", "old": "abc123", "new": "def456", "ts": 0.0, "host": "a"},))
    data = shown(info)
    assert isinstance(data, dict) and "changes" not in data
    assert data["changed"] == {f"git_commit ({fmt.timestamp(0.0)})": "abc123 → def456"}
    assert "changed" not in shown(RunInfo(job="j", declared=True))


def test_run_info_of_a_fork_names_its_parent_first() -> None:
    data = shown(RunInfo(job="j-fork-1", declared=True,
                         forked_from={"job": "j", "step": 1200}))
    assert isinstance(data, dict) and next(iter(data)) == "forked from"
    assert data["forked from"] == "j at step 1,200" and "forked_from" not in data


def test_the_header_drops_the_clock_and_the_job_place_before_any_alert() -> None:
    parts = [(Content.from_markup(text), rank) for text, rank in [
        (" LIVE ", 0), ("demo", 0), (" (not training; 0 of 3 jobs training)", 4),
        ("data 03:10:35", 2), ("now 03:10:36", 5), ("[$error]⚠ 1 critical[/]", 0),
        ("2 alerts", 0), ("controllable", 3)]]
    wide = fit_parts(parts, 200).plain
    assert wide == (" LIVE  │ demo (not training; 0 of 3 jobs training) │ data 03:10:35 │ "
                    "now 03:10:36 │ ⚠ 1 critical │ 2 alerts │ controllable")
    narrow = fit_parts(parts, 80).plain
    assert narrow == " LIVE  │ demo │ data 03:10:35 │ ⚠ 1 critical │ 2 alerts │ controllable"
    tiny = fit_parts(parts, 20).plain  # what is never dropped stays, even past the edge
    assert tiny == " LIVE  │ demo │ ⚠ 1 critical │ 2 alerts"


def test_progress_summary_without_steps_or_with_a_repeated_state() -> None:
    from cockpit.snapshot import Snapshot
    from cockpit.ui.widgets.progress_pane import ProgressPane

    pane = ProgressPane()
    starting = Snapshot(ts=0.0, source_label="LIVE", job="j",
                        progress=Progress(state="starting", eta_note="starting"))
    assert pane.summary(starting) == "no step yet · starting"
    paused = Snapshot(ts=0.0, source_label="LIVE", job="j", progress=Progress(
        step=1680, percent=8.4, state="paused", eta_note="paused"))
    assert pane.summary(paused) == "step 1,680 · 8.4% · paused"


def test_losses_keep_four_figures() -> None:
    assert [fmt.loss(v) for v in (1.47, 1.496, 2.0, 0.000123)] == [
        "1.470", "1.496", "2.000", "0.0001230"]


def test_an_outage_names_the_restarts_that_failed_within_it() -> None:
    item = Interruption(cause="killed", detected_at=0.0, recovered_in=42.0, steps_lost=7,
                        restart_count=2, hosts=("b", "a"), failed_restarts=("nccl",))
    line = interruption_line(item).plain
    assert "killed on b (+1 peer)" in line and "down 42s" in line
    assert line.endswith("restart #2 (1 failed: nccl)"), line


def test_an_outage_the_operator_ended_reads_as_over_not_as_unrecovered() -> None:
    item = Interruption(cause="killed", detected_at=0.0, recovered_in=None, steps_lost=None,
                        hosts=("a",), ended_by="pause")
    line = interruption_line(item).plain
    assert "ended by the operator's pause" in line and "not recovered" not in line
    down = interruption_line(Interruption(cause="killed", detected_at=0.0, recovered_in=None,
                                          steps_lost=None)).plain
    assert "not recovered" in down


def test_an_outage_being_restarted_reads_as_not_yet_recovered_on_the_screen_too() -> None:
    """The report says the same ("not recovered yet"); only the newest outage of a job
    whose agent is restarting it may still recover."""
    item = Interruption(cause="killed", detected_at=0.0, recovered_in=None, steps_lost=None)
    assert "[$warning]not recovered yet[/$warning]" in interruption_line(
        item, True, "starting").markup
    assert "[$error]not recovered[/$error]" in interruption_line(item, False, "starting").markup
    assert "not recovered: the agent stopped retrying" in interruption_line(
        item, True, "failed").plain


def test_a_hang_says_how_long_after_the_failure_it_was_seen() -> None:
    """A hang is detected once its silence outlasts the limit: the time shown is the
    detection's, minutes after the failure the down time counts from."""
    hang = Interruption(cause="hang", detected_at=0.0, recovered_in=200.0, steps_lost=3,
                        detection_latency=150.0)
    assert "hang (seen 2m 30s after it) · recovered, down 3m 20s" in interruption_line(
        hang).plain
    crash = dataclasses.replace(hang, cause="killed", detection_latency=1.2)
    assert "seen" not in interruption_line(crash).plain


def test_a_link_closed_at_the_end_of_a_recording_is_no_fault() -> None:
    """"stopped" (the cockpit closed the link) is shown muted and sorts with the healthy
    hosts; a link that cannot connect is still an error."""
    gpus = (GpuCell(index=0, online=True, simulated=False),)
    stopped = HostHealth(host="a", state="stopped", gpu_state="ok", gpus=gpus)
    assert host_problem(stopped) is None
    assert "[$text-muted]stopped" in host_line(stopped, 4).markup
    unreachable = HostHealth(host="a", state="unreachable", gpu_state="ok", gpus=gpus)
    assert host_problem(unreachable) == "error"


def test_a_gpu_without_an_xid_reads_none_only_where_one_would_have_been_seen() -> None:
    cells = (GpuCell(index=0, online=True, simulated=False, xid=79, xid_watched=True),
             GpuCell(index=1, online=True, simulated=False, xid_watched=True),
             GpuCell(index=2, online=True, simulated=False, xid_watched=False),
             GpuCell(index=3, online=True, simulated=False))
    host = HostHealth(host="a", state="streaming", gpu_state="ok", gpus=cells)
    column = GPU_COLUMNS.index("XID")
    assert [row[column].plain for row in gpu_rows(host)] == ["79", "none", "n/a", "n/a"]
