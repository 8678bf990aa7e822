"""Data flow, panes and drill-down screens, driven through the keyboard with Pilot.

Normal behaviour is tested on the replay of a recorded real run (`recorded_replay`,
expected values from `tests.ui.recorded`): two ranks train, the operator halves the LR,
one rank is SIGKILLed and the agent recovers the job from a checkpoint, the job ends.
`StaticSource` serves only the edge cases such a run never shows: missing fields, a
stall, alerts with hints, and sources that fail.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Log, ProgressBar, Tab

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Marker, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import T0, demo_details, demo_snapshot
from cockpit.ui.messages import DataArrived, DetailsReady, SnapshotReady
from cockpit.ui.refresh_gate import RefreshGate
from cockpit.ui.screens.alerts import AlertsScreen
from cockpit.ui.screens.host_detail import HostDetailScreen
from cockpit.ui.screens.log_tail import LogTailScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.run_info import RunInfoScreen
from cockpit.ui.widgets.detail_view import DetailView
from cockpit.ui.widgets.loss_chart import LossChart
from tests.ui.conftest import ManualClock, OpenReplay
from tests.ui.helpers import notifications, settle, text, wait_until
from tests.ui.recorded import recording_facts

FACTS = recording_facts()


def step_line(step: int | None) -> str:
    return f"step {fmt.na(step, '{:,}')} / {FACTS.total_steps:,}"


async def test_recorded_run_reaches_every_pane_and_the_header(
        recorded_replay: OpenReplay) -> None:
    source = recorded_replay(at=1.0)
    messages: list = []
    app = make_app(source)
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await settle(pilot)
        ready = [m.snapshot for m in messages if isinstance(m, SnapshotReady)]
        assert ready and any(isinstance(m, DataArrived) for m in messages)
        assert step_line(FACTS.last_step) in text(app, "#progress-position")
        # The run trained to its end and exited cleanly: finished, in the state as in
        # the reason there is no ETA.
        assert FACTS.last_step == FACTS.total_steps and FACTS.exit_code == 0
        assert text(app, "#progress-eta") == "ETA n/a: job finished"
        assert "state finished" in text(app, "#progress-last")
        assert not app.screen.query_one("#stall-banner").display
        effect = text(app, "#effect-line")
        last_val = FACTS.eval_points[-1][1]
        best_step, best_loss = FACTS.best_eval
        assert any(f"loss {fmt.loss(loss)} ·" in effect for loss in FACTS.final_losses)
        assert f"val {fmt.loss(last_val)}" in effect
        assert f"best val {fmt.loss(best_loss)} @ {best_step:,}" in effect
        assert "no divergence, spikes or NaN/Inf" in text(app, "#effect-warnings")
        assert app.screen.query_one(LossChart).effect == ready[-1].effect
        assert "n/a" not in text(app, "#throughput")
        assert text(app, "#throughput").endswith("(before it finished)")  # not training now
        # The recorded ranks are even (1 % apart): none is named as the slowest.
        assert text(app, "#stragglers") == "step time 0.061s median · spread 1%"
        grid = text(app, "#gpu-map")
        assert f"{FACTS.host} streaming  {FACTS.gpu_count}/{FACTS.gpu_count}" in grid
        # The run's rank 1 was SIGKILLed; the agent recovered it from a checkpoint.
        cut = FACTS.interruption
        assert cut is not None and FACTS.resumed_step is not None
        shown = text(app, "#interruptions")
        assert "interruptions: 1" in shown
        assert f"killed on {FACTS.host} · recovered, down " in shown
        assert f"· {cut['step'] - FACTS.resumed_step} steps lost · restart #1" in shown
        header = text(app, "#status-bar")
        assert "REPLAY 10x PAUSED" in header  # the end of a recording pauses it
        assert FACTS.job in header and "0 alerts" in header and "read-only" in header
        assert app.screen.query_one("#sim-badge").display == FACTS.simulated


async def test_replay_shows_only_what_the_clock_has_reached(
        recorded_replay: OpenReplay, replay_clock: ManualClock) -> None:
    source = recorded_replay(at=None)  # the very start, playing
    messages: list = []
    app = make_app(source)
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await settle(pilot)
        assert "step n/a / n/a" in text(app, "#progress-position")  # nothing trained yet
        assert FACTS.host in text(app, "#gpu-map")  # the agent's hello came first
        middle = (FACTS.first_ts + FACTS.last_ts) / 2
        replay_clock.advance((middle - FACTS.first_ts) / source.speed)
        expected = step_line(FACTS.step_at(middle))
        await wait_until(pilot, lambda: expected in text(app, "#progress-position"),
                         f"the screen at the middle of the recording to show {expected!r}")
        assert "REPLAY 10x" in text(app, "#status-bar")
        assert "PAUSED" not in text(app, "#status-bar")
        replay_clock.advance(FACTS.last_ts - FACTS.first_ts)  # far past the end
        await wait_until(pilot, lambda: step_line(FACTS.last_step)
                         in text(app, "#progress-position"), "the last step")
        await wait_until(pilot, lambda: "PAUSED" in text(app, "#status-bar"),
                         "the replay to pause at the end")
        steps = [m.snapshot.progress.step for m in messages if isinstance(m, SnapshotReady)]
        assert steps == sorted(steps, key=lambda s: -1 if s is None else s)  # never back


async def test_a_replays_header_shows_the_recordings_time_not_todays_clock(
        recorded_replay: OpenReplay) -> None:
    """The wall clock beside a recording's time read as a live session's."""
    source = recorded_replay(at=FACTS.mid_run)
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        header = text(app, "#status-bar")
        assert f"recorded {fmt.timestamp(source.position)}" in header  # with its date
        assert "now " not in header and fmt.clock(T0 + 7) not in header  # the frozen clock
        source.seek_to(1.0)
        expected = f"recorded {fmt.timestamp(FACTS.last_ts)}"
        await wait_until(pilot, lambda: expected in text(app, "#status-bar"),
                         f"the header at the end of the recording to read {expected!r}")
    live = make_app(StaticSource(demo_snapshot(), demo_details(), label="LIVE"))
    async with live.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert f"now {fmt.clock(T0 + 7)}" in text(live, "#status-bar")  # live: the clock


async def test_missing_fields_show_na_and_no_sim_badge() -> None:
    # Edge case no real run produces: a snapshot with every field unknown.
    source = StaticSource(Snapshot(ts=T0, source_label="LIVE", job=None))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "step n/a / n/a" in text(app, "#progress-position")
        assert "samples n/a · tokens n/a" in text(app, "#progress-counts")
        assert "ETA n/a" in text(app, "#progress-eta")
        assert "n/a" in text(app, "#gauge-mfu")
        assert "n/a samples/s" in text(app, "#throughput")
        assert "no hosts reported yet" in text(app, "#gpu-map")
        assert "job n/a" in text(app, "#status-bar")
        assert not app.screen.query_one("#sim-badge").display
        assert not app.screen.query_one("#stall-banner").display


async def test_stall_banner_names_the_likely_cause() -> None:
    # Edge case: the recorded run never stalled.
    app = make_app(StaticSource(demo_snapshot(stalled=True)))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        banner = app.screen.query_one("#stall-banner")
        assert banner.display
        assert "STALLED: likely data starved" in text(app, "#stall-banner")


async def test_data_floods_are_merged_and_rate_limited(recorded_replay: OpenReplay) -> None:
    messages: list = []
    app = make_app(recorded_replay(at=1.0))
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        before = sum(isinstance(m, SnapshotReady) for m in messages)
        started = time.monotonic()
        flood = threading.Thread(target=lambda: [app._on_data() for _ in range(200)])
        flood.start()
        flood.join()
        spent = time.monotonic() - started
        await pilot.pause(RefreshGate.min_interval * 2)
        await settle(pilot)
        builds = sum(isinstance(m, SnapshotReady) for m in messages) - before
        delivered = sum(isinstance(m, DataArrived) for m in messages)
        assert 1 <= builds <= 2 + spent / RefreshGate.min_interval
        assert delivered < 200  # queued notices replaced each other


async def test_seeking_replaces_the_shown_snapshot(recorded_replay: OpenReplay) -> None:
    source = recorded_replay(at=FACTS.mid_run)
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        middle = step_line(FACTS.step_at(source.position))
        assert middle in text(app, "#progress-position")
        assert "estimate, at" in text(app, "#progress-eta")  # mid-run: a time left
        assert text(app, "#throughput").endswith("tokens/s")  # and training now
        source.seek_to(1.0)
        await wait_until(pilot, lambda: step_line(FACTS.last_step)
                         in text(app, "#progress-position"), "the snapshot at the end")
        assert text(app, "#progress-eta") == "ETA n/a: job finished"


async def test_failing_snapshot_becomes_a_notification_not_a_crash() -> None:
    # Edge case: a source that fails on every snapshot.
    class Broken(StaticSource):
        def snapshot(self, buckets: int = 120) -> Snapshot:
            raise RuntimeError("recording is locked by another process")

    app = make_app(Broken(demo_snapshot()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "RuntimeError: recording is locked by another process" in notifications(app)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("1")  # still responsive
        assert app.screen.focused.id == "progress"


async def test_a_snapshot_finished_while_the_app_closes_is_dropped() -> None:
    """The refresh worker may finish after the app began to close: by then the panes'
    children are gone, and showing the snapshot raised out of the app's shutdown."""
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        shown = app.snapshot
    late = dataclasses.replace(demo_snapshot(), ts=T0 + 999)
    app.on_snapshot_ready(SnapshotReady(late))
    app.on_details_ready(DetailsReady("run", {}, demo_details()))
    assert app.snapshot is shown


async def test_the_header_says_the_screen_is_not_updating_until_a_snapshot_works_again(
        ) -> None:
    """The panes keep the last snapshot that could be built and the notice goes after a
    few seconds: without the header saying so, stale panes would read as current."""
    failing = [True]

    class Flaky(StaticSource):
        def snapshot(self, buckets: int = 120) -> Snapshot:
            if failing[0]:
                raise RuntimeError("the recording r.duckdb is damaged or truncated")
            return super().snapshot(buckets)

    app = make_app(Flaky(demo_snapshot()))
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        header = str(app.screen.query_one("#status-bar").render())
        assert "job n/a │ ⚠ not updating: RuntimeError: the recording r.duckdb is damaged or " \
            "truncated │" in header, header
        failing[0] = False
        app.post_message(DataArrived())
        await settle(pilot)
        await wait_until(pilot, lambda: "not updating" not in str(
            app.screen.query_one("#status-bar").render()), "the header to clear")


async def test_a_snapshot_failing_every_refresh_is_told_once_not_four_times_a_second(
        ) -> None:
    """A damaged recording fails each refresh of a playing replay the same way: one toast
    says so, instead of a new one stacking up every quarter second."""
    builds: list[int] = []

    class Damaged(StaticSource):
        def snapshot(self, buckets: int = 120) -> Snapshot:
            builds.append(1)
            raise RuntimeError("the recording r.duckdb is damaged or truncated")

    app = make_app(Damaged(demo_snapshot()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for _ in range(4):
            app.post_message(DataArrived())
            await pilot.pause(0.3)
            await settle(pilot)
        assert len(builds) >= 4
        assert notifications(app) == [
            "RuntimeError: the recording r.duckdb is damaged or truncated"]


async def test_number_keys_focus_and_m_maximises(recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for key, pane in zip("4321", ("health", "efficiency", "effect", "progress"), strict=True):
            await pilot.press(key)
            assert app.screen.focused.id == pane
        await pilot.press("2", "m")
        assert app.screen.maximized is app.screen.query_one("#effect")
        await pilot.press("m")
        assert app.screen.maximized is None


async def test_g_toggles_logarithmic_loss_axis(recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        assert chart.effect is not None and chart.effect.train_loss.x  # a real curve
        await pilot.press("g")
        assert chart.log_y and "log-y" in text(app, "#effect-line")
        await pilot.press("g")
        assert not chart.log_y and "linear-y" in text(app, "#effect-line")


async def test_the_loss_chart_marks_the_runs_adjustment_and_restart(
        recorded_replay: OpenReplay) -> None:
    assert FACTS.adjust is not None and FACTS.resumed_step is not None
    adjust_step, knob = FACTS.adjust
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        assert chart.effect is not None
        assert chart.effect.markers == (
            Marker(adjust_step, "adjust", knob),
            Marker(FACTS.resumed_step, "restart",
                   f"resumed from ckpt-{FACTS.resumed_step:08d}.pt at step {FACTS.resumed_step}"),
        )
        drawn = text(app, "LossChart")
        # Each drawn once along the bottom of the plot, and named in the legend above it.
        assert drawn.count("▼") == 1 and drawn.count("↻") == 1
        legend = text(app, "#loss-legend")
        assert "▼ adjusted" in legend and "↻ restart" in legend


async def test_host_detail_fetches_the_recorded_hosts_details(
        recorded_replay: OpenReplay) -> None:
    messages: list = []
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostDetailScreen)
        assert screen.host == FACTS.host and FACTS.host in text(app, "#screen-title")
        asked = [m.params for m in messages if isinstance(m, DetailsReady) and m.what == "host"]
        assert asked == [{"host": FACTS.host}]
        assert screen.query_one("#gpu-table", DataTable).row_count == FACTS.gpu_count
        tables = screen.query_one(DetailView).query(DataTable)
        assert any(t.row_count == FACTS.world_size for t in tables)  # one process per rank
        # Link state and last seen are the header line's, fresh with every snapshot; the
        # details table (re-fetched every few seconds) does not repeat an older time.
        keys = {str(t.get_row_at(i)[0]) for t in tables if t.columns
                for i in range(t.row_count)}  # fmt: skip
        assert "hostname" in keys and not keys & {"last seen", "last_seen", "state"}, keys
        await pilot.press("right_square_bracket")  # one host only: cycling stays on it
        await settle(pilot)
        assert screen.host == FACTS.host
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_host_detail_cycles_among_several_hosts(demo_source: StaticSource) -> None:
    # The recorded run had one host; cycling needs the demo's cluster.
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        screen = app.screen
        first = screen.host
        assert demo_source.details_calls[-1] == ("host", {"host": first})
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert screen.host != first
        assert demo_source.details_calls[-1] == ("host", {"host": screen.host})
        assert screen.host in text(app, "#screen-title")
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert screen.host == first
        screen.select("gpu-node-c")  # its GPU 5 is thermally throttled (0x20)
        await settle(pilot)
        table = screen.query_one("#gpu-table", DataTable)
        cells = [str(c) for r in range(table.row_count) for c in table.get_row_at(r)]
        assert "thermal (SW)" in cells and "0x20" not in cells  # reasons, not a bitmask


async def test_host_detail_opened_before_any_host_waits_for_them() -> None:
    """Opened while no host has reported (links still coming up), the screen asks for
    nothing and says so; the hosts get their tabs as they appear."""
    source = StaticSource(Snapshot(ts=T0, source_label="LIVE", job=None),
                          demo_details())
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert "Host detail: no hosts" in text(app, "#screen-title")
        assert source.details_calls == [] and notifications(app) == []
        source.set_snapshot(demo_snapshot())
        names = [h.host for h in demo_snapshot().health.hosts]
        await wait_until(pilot, lambda: app.screen.host == names[0], "the first host")
        await settle(pilot)
        assert source.details_calls[-1] == ("host", {"host": names[0]})
        assert len(app.screen.query(Tab)) == len(names)
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert app.screen.host == names[1] and notifications(app) == []


async def test_alerts_screen_lists_the_recorded_events_and_filters(
        recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AlertsScreen)
        # The run's one crash, recovered from, stays listed: over, with its cause.
        listed = text(app, "#alerts-list")
        assert "interrupted_killed · RESOLVED" in listed, listed
        assert "killed by SIGKILL" in listed and "try:   check the host's kernel log" in listed
        events = text(app, "#events-list")
        for step in FACTS.checkpoint_steps:
            assert f"checkpoint at step {step} saved" in events
        assert f"exited with code {FACTS.exit_code}" in events
        await pilot.press("slash", *"exited")
        await pilot.pause()
        assert text(app, "#events-list").splitlines() == [
            line for line in events.splitlines() if "exited" in line]


async def test_alerts_show_where_and_what_to_try(demo_source: StaticSource) -> None:
    # Edge case: the recorded run raised no alerts; the demo has hints to show.
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        shown = text(app, "#alerts-list")
        assert "where: host gpu-node-b / gpu 3 / rank 11" in shown
        assert "try:" in shown and "thermal" in shown.lower()
        await pilot.press("slash", *"xid")
        await pilot.pause()
        filtered = text(app, "#alerts-list")
        assert "gpu-xid" in filtered and "thermal" not in filtered.lower()
        await pilot.press("escape")  # clears the filter, stays on the screen
        await pilot.pause()
        assert isinstance(app.screen, AlertsScreen) and "thermal" in text(
            app, "#alerts-list").lower()
        await pilot.press("escape")  # an empty filter: back
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_run_info_and_log_tail_of_the_recorded_run(recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        assert isinstance(app.screen, RunInfoScreen)
        rows = {str(t.get_row_at(r)[0]): str(t.get_row_at(r)[1])
                for t in app.screen.query(DataTable) for r in range(t.row_count)
                if len(t.get_row_at(r)) == 2}
        assert rows["seed"] == str(FACTS.seed)
        assert rows["total steps"] == str(FACTS.total_steps)
        assert rows["world size"] == str(FACTS.world_size)
        # The agent recovered the job: the run on screen started then, not at the first
        # launch, which is shown beside it. Dates, not 1.8e+09.
        assert FACTS.restarted_ts is not None and FACTS.job_started_ts is not None
        assert fmt.timestamp(FACTS.restarted_ts) != fmt.timestamp(FACTS.job_started_ts)
        assert rows["started"] == fmt.timestamp(FACTS.restarted_ts)
        assert rows["first launch"] == fmt.timestamp(FACTS.job_started_ts)
        await pilot.press("L")
        await settle(pilot)
        assert isinstance(app.screen, LogTailScreen)
        log = app.screen.query_one(Log)
        assert log.line_count == len(FACTS.log_lines)
        await pilot.press("slash", *"validation")
        await pilot.pause()
        expected = [line for line in FACTS.log_lines if "validation" in line]
        assert len(log.lines) == len(expected)
        assert all(shown.endswith(line) for shown, line in zip(log.lines, expected, strict=True))


async def test_run_info_shows_the_whole_config_with_keys_as_written(
        recorded_replay: OpenReplay) -> None:
    """At 80x24 the config is longer than the screen: every key is there, spelt as an
    override is (`train.max_steps`, not "train.max steps"), and the view scrolls to it."""
    from cockpit.ui.widgets.detail_view import DetailView, cell, flatten

    app = make_app(recorded_replay())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        rows = {str(t.get_row_at(r)[0]): str(t.get_row_at(r)[1])
                for t in app.screen.query(DataTable) for r in range(t.row_count)
                if len(t.get_row_at(r)) == 2}
        config = flatten(FACTS.config)
        assert len(config) > 20
        missing = [key for key, _ in config if key not in rows]
        assert not missing and "declared" not in rows
        assert all(rows[key] == cell(value) for key, value in config)
        view = app.screen.query_one(DetailView)
        assert view.max_scroll_y > 0
        view.scroll_end(animate=False, immediate=True)
        await settle(pilot)
        last = [t for t in app.screen.query(DataTable)][-1]
        assert view.region.overlaps(last.region)  # the end of the config is on screen


async def test_log_tail_follows_new_lines_unless_scrolled_up(
    recorded_replay: OpenReplay,
) -> None:
    source = recorded_replay(at=FACTS.mid_run)
    app = make_app(source)
    async with app.run_test(size=(120, 16)) as pilot:
        await settle(pilot)
        await pilot.press("L")
        await settle(pilot)
        log = app.screen.query_one(Log)
        await wait_until(pilot, lambda: log.line_count > 0, "the first log lines")
        first = log.line_count
        assert first < len(FACTS.log_lines) and log.max_scroll_y > 0
        assert log.is_vertical_scroll_end  # opened at the newest line
        source.seek_to(1.0)
        await wait_until(pilot, lambda: log.line_count == len(FACTS.log_lines),
                         "the rest of the log")
        await settle(pilot)
        assert log.is_vertical_scroll_end and log.lines[-1].endswith(FACTS.log_lines[-1])
        # Scrolled up to read: new lines do not pull the reader down.
        source.seek_to(FACTS.mid_run)
        await wait_until(pilot, lambda: log.line_count == first, "the earlier tail")
        log.scroll_to(y=0, animate=False, immediate=True)
        source.seek_to(1.0)
        await wait_until(pilot, lambda: log.line_count == len(FACTS.log_lines),
                         "the rest of the log again")
        await settle(pilot)
        assert log.scroll_y == 0


async def test_a_seek_key_refreshes_a_drill_down_at_once(
    recorded_replay: OpenReplay, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Details are re-fetched at most every few seconds, but a seek is the operator
    asking for another moment: the log shows it without waiting for the next turn."""
    monkeypatch.setattr("cockpit.ui.screens.drill_down.DETAILS_REFRESH_S", 3600.0)
    source = recorded_replay(at=FACTS.mid_run)
    app = make_app(source)
    async with app.run_test(size=(120, 16)) as pilot:
        await settle(pilot)
        await pilot.press("L")
        log = app.screen.query_one(Log)
        await wait_until(pilot, lambda: log.line_count > 0, "the first log lines")
        first = log.line_count
        await settle(pilot)
        app.action_replay_seek(1)  # what → does, whichever widget has the focus
        await wait_until(pilot, lambda: log.line_count > first, "the log after the seek")
        assert isinstance(app.screen, LogTailScreen)


async def test_in_a_replay_the_arrows_seek_on_every_screen_but_not_in_a_filter(
        recorded_replay: OpenReplay) -> None:
    """The help promises ←/→ seek in a replay; a focused table or log would otherwise
    take them (it scrolls sideways), while text being typed keeps them."""
    source = recorded_replay(at=FACTS.mid_run)
    app = make_app(source)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        for key, arrow in (("h", "left"), ("L", "right")):
            await pilot.press(key)
            await settle(pilot)
            before = source.position
            await pilot.press(arrow)
            await settle(pilot)
            assert source.position != before, key
        await pilot.press("slash", *"loss")
        await settle(pilot)
        before = source.position
        await pilot.press("left", "left")
        await settle(pilot)
        assert source.position == before and app.screen.query_one(Input).cursor_position == 2


async def test_details_failure_is_reported_on_the_screen_that_asked() -> None:
    # Edge case: a source whose drill-down queries fail.
    class NoDetails(StaticSource):
        def details(self, what: str, **kw: object) -> object:
            raise ValueError(f"no host named {kw.get('host')!r} in this recording")

    app = make_app(NoDetails(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert isinstance(app.screen, HostDetailScreen)
        assert any("no host named" in n for n in notifications(app))


async def test_j_switches_between_jobs_training_side_by_side(tmp_path: Path) -> None:
    # Edge case the recorded run never shows: a fork training beside its parent.
    from cockpit.sessions.replay import ReplaySource
    from cockpit.store import Store
    from tests.read.test_train_tail import write_fork_beside_parent

    with Store(tmp_path / "fork.duckdb") as store:
        write_fork_beside_parent(store)
    source = ReplaySource(tmp_path / "fork.duckdb", clock=ManualClock())
    source.seek_to(1.0)
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "fork (2 of 2 training)" in text(app, "#status-bar")
        await pilot.press("j")
        await wait_until(pilot, lambda: "parent (1 of 2 training)" in text(app, "#status-bar"),
                         "the parent job")
        assert "step 100 / n/a" in text(app, "#progress-position")
        await pilot.press("j")
        await wait_until(pilot, lambda: "fork (2 of 2 training)" in text(app, "#status-bar"),
                         "the fork again")
        assert "showing job fork (2 of 2 training)" in notifications(app)[-1]  # as the header


async def test_j_reaches_a_job_that_stopped_and_the_pick_stays(tmp_path: Path) -> None:
    """A fork paused a while ago no longer trains: `j` still shows it (to resume it,
    say), the header says it is not training, and the pick stays while the parent
    trains on."""
    from cockpit.sessions.replay import ReplaySource
    from cockpit.store import Store
    from tests.read.test_train_tail import steps, write_fork_beside_parent

    with Store(tmp_path / "fork.duckdb") as store:
        seq = write_fork_beside_parent(store)
        store.ingest("h1", steps(101, 300, seq0=seq, job="parent"))
    source = ReplaySource(tmp_path / "fork.duckdb", clock=ManualClock())
    source.seek_to(1.0)
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "parent" in text(app, "#status-bar") and "training)" not in text(
            app, "#status-bar")
        await pilot.press("j")
        await wait_until(pilot, lambda: "fork (not training; 1 of 2 jobs training)" in text(
            app, "#status-bar"), "the stopped fork")
        assert "step 80 / n/a" in text(app, "#progress-position")
        assert "showing job fork (not training; 1 of 2 jobs training)" in notifications(app)[-1]
        end = app.snapshot.ts
        source.seek_to(0.95)  # the parent trains on; the pick stays
        await wait_until(pilot, lambda: app.snapshot.ts < end, "the seek")
        assert "fork (not training" in text(app, "#status-bar")
        await pilot.press("j")
        await wait_until(pilot, lambda: text(app, "#status-bar").count("parent") == 1,
                         "the parent again")


async def test_j_with_one_job_says_there_is_no_other(recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("j")
        assert f"one job to show ({FACTS.job})" in notifications(app)[-1]


async def test_a_replay_footer_lists_the_replay_keys_before_job_control(
        recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        shown = [b.binding.key for b in app.screen.active_bindings.values()
                 if b.binding.show and b.enabled]
        assert shown.index("space") < shown.index("p")  # at 160 columns the tail is cut


async def test_an_expired_toast_over_a_maximised_pane_is_painted_over(
        demo_source: StaticSource, monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual removes the toast without repainting what it covered over a maximised
    pane: with nothing else redrawing (a paused replay) it stayed up. The app asks for a
    full repaint once the toast is gone."""
    app = make_app(demo_source)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("2", "m")
        await settle(pilot)
        screen = app.screen
        layouts: list[bool] = []
        real = screen.refresh

        def spy(*args: object, layout: bool = False, **kwargs: object) -> object:
            layouts.append(layout and not app._notifications)
            return real(*args, layout=layout, **kwargs)

        monkeypatch.setattr(screen, "refresh", spy)
        app.notify("sent", timeout=0.2)
        await wait_until(pilot, lambda: any(layouts), "a repaint after the toast expired")
        assert screen.maximized is screen.query_one("#effect")


async def test_a_toast_repaint_due_after_the_app_closed_does_nothing(
        demo_source: StaticSource) -> None:
    """The repaint's timer can fire while the app shuts down (a toast shown just before
    quitting), when the app has no screen left: it must not fail the shutdown."""
    app = make_app(demo_source)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.notify("sent", timeout=0.2)
    assert not app.screen_stack
    app.repaint_after_toast()


@pytest.mark.parametrize(("state", "moving"), [("running", True), ("failed", False),
                                              ("paused", False), ("exited", False),
                                              ("finished", False)])
async def test_the_progress_bar_moves_only_while_the_job_works(state: str, moving: bool) -> None:
    """With no known total the bar animates, which reads as "working": a failed or paused
    job's bar stands still."""
    snap = demo_snapshot()
    progress = dataclasses.replace(snap.progress, percent=None, state=state)
    app = make_app(StaticSource(dataclasses.replace(snap, progress=progress), demo_details()))
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        bar = app.screen.query_one("#progress-bar", ProgressBar)
        assert (bar.total is None) == moving


async def test_the_help_reads_to_its_last_key_at_80x24(recorded_replay: OpenReplay) -> None:
    """The key table scrolls inside its dialog (it was cut off by it), and in a replay the
    arrows move through it rather than seeking the replay behind."""
    source = recorded_replay(at=0.5)
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        at = source.position
        await pilot.press("question_mark")
        await settle(pilot)
        table = app.screen.query_one("#help-table", DataTable)
        assert table.max_scroll_y > 0 and table.region.bottom <= app.screen.region.bottom
        await pilot.press(*["down"] * table.row_count, "right")
        await settle(pilot)
        assert table.scroll_y == table.max_scroll_y and source.position == at


async def test_host_detail_scrolls_by_keyboard_and_stays_put_on_new_data(
        recorded_replay: OpenReplay) -> None:
    """At 80x24 the processes and histories are below the first screen: End reaches
    them, and new details (every few seconds, live) neither blank the view nor move it."""
    app = make_app(recorded_replay())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        view = app.screen.query_one(DetailView)
        assert app.screen.focused is view and view.max_scroll_y > 0
        await pilot.press("end")
        await settle(pilot)
        bottom = view.scroll_y
        assert bottom == view.max_scroll_y > 0
        details = view.data
        view.data = dataclasses.replace(details, last_seen=(details.last_seen or 0) + 1)
        await wait_until(pilot, lambda: view.max_scroll_y == bottom, "the details' height")
        assert view.scroll_y == bottom
