"""The compare screen: a fork and its parent overlaid, from `cockpit compare A B` and
from inside the cockpit (key `C`, the command palette), on a recording written through
the real ingest (tests/harness/fork_runs.py). What the screen must show is derived from
the functions that wrote the recording, not typed in."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
from pytest_textual_snapshot import SVGImageExtension
from syrupy.assertion import SnapshotAssertion
from textual.widgets import DataTable

from cockpit.app.compare_cli import compare_app
from cockpit.read.compare import load_comparison
from cockpit.sessions.replay import ReplaySource
from cockpit.ui.app_factory import make_app
from cockpit.ui.screens.compare import CompareScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.widgets.compare_chart import CompareChart
from tests.harness import fork_runs
from tests.ui.conftest import ManualClock
from tests.ui.helpers import notifications, settle, text, wait_until

PARENT_STEPS = fork_runs.LAST_STEP  # steps 1..LAST_STEP, one point each (under the buckets)
FORK_STEPS = fork_runs.LAST_STEP - fork_runs.FORK_STEP
PARENT_EVALS = fork_runs.LAST_STEP // 20
FORK_EVALS = PARENT_EVALS - fork_runs.FORK_STEP // 20


@pytest.fixture(scope="module")
def fork_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fork_runs.write_fork_and_parent(tmp_path_factory.mktemp("compare") / "runs.duckdb")


def _app(rec: Path, theme: str = "dark"):
    comparison = load_comparison([(rec, "parent", rec.name), (rec, "fork", rec.name)])
    return compare_app(comparison, Namespace(theme=theme, keymap=None))


def _cells(app, table_id: str) -> list[list[str]]:
    table = app.screen.query_one(f"#{table_id}", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_compare_of_a_fork_and_its_parent_shows_both_curves(
        fork_recording: Path, snapshot: SnapshotAssertion) -> None:
    app = _app(fork_recording)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        chart = app.screen.query_one(CompareChart)
        assert chart.view is not None and chart.view.axis == "step"
        assert [c.label for c in chart.view.curves] == ["parent", "fork"]
        # Every step and evaluation of each job is drawn, each job in its own colour.
        assert chart.drawn == (("parent", PARENT_STEPS, PARENT_EVALS),
                               ("fork", FORK_STEPS, FORK_EVALS))
        fork_curve = chart.view.curves[1].train
        assert fork_curve.x[0] == fork_runs.FORK_STEP + 1
        assert fork_curve.last[-1] == pytest.approx(fork_runs.fork_loss(fork_runs.LAST_STEP))
        legend = text(app, "#compare-legend")
        assert "parent" in legend and "fork" in legend and "validation loss" in legend
        assert "parent vs fork" in text(app, "#screen-title")
        metrics = {row[0]: row[1:] for row in _cells(app, "compare-metrics")}
        assert metrics["final loss"] == [
            f"{fork_runs.parent_loss(fork_runs.LAST_STEP):.4g} @ step {fork_runs.LAST_STEP}",
            f"{fork_runs.fork_loss(fork_runs.LAST_STEP):.4g} @ step {fork_runs.LAST_STEP}"]
        assert metrics["steps/s"] == [f"{1 / fork_runs.STEP_S:.3g}"] * 2
        # The fork's one override, side by side.
        assert _cells(app, "compare-provenance") == [
            ["config", "optim.lr", str(fork_runs.PARENT_LR), str(fork_runs.FORK_LR)]]
        assert "is a fork of parent at step 40" in text(app, "#compare-relation")
        assert app.export_screenshot() == snapshot.use_extension(SVGImageExtension)(
            name="fork-and-parent")
        # `x`: the time since each job's first step; both curves start at 0 s.
        await pilot.press("x")
        await settle(pilot)
        assert chart.view.axis == "time"
        assert [c.train.x[0] for c in chart.view.curves] == [0.0, 0.0]
        assert chart.drawn == (("parent", PARENT_STEPS, PARENT_EVALS),
                               ("fork", FORK_STEPS, FORK_EVALS))
        assert "x axis: time" in text(app, "#screen-title")
        await pilot.press("escape")  # the only screen: Esc quits
        await settle(pilot)
    assert app.return_code == 0


async def test_the_cockpit_compares_the_fork_on_screen_with_its_parent(
        fork_recording: Path) -> None:
    source = ReplaySource(fork_recording, clock=ManualClock())
    source.seek_to(1.0)
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("C")
        assert isinstance(app.screen, CompareScreen)
        chart = app.screen.query_one(CompareChart)
        await wait_until(pilot, lambda: chart.view is not None, "the comparison")
        await settle(pilot)
        # The job on screen is the fork (started last): beside its parent, parent first.
        assert chart.view is not None
        assert [c.label for c in chart.view.curves] == ["parent", "fork"]
        assert [d[0] for d in chart.drawn] == ["parent", "fork"]
        assert all(points > 0 for _label, points, _val in chart.drawn)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        # From the command palette: "Compare jobs" opens it; the axis key only there.
        await app.run_keyed_action("compare_axis")
        await settle(pilot)
        assert "Step/time axis: only on the compare screen" in notifications(app)[-1]
        await app.run_keyed_action("compare")
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        await wait_until(pilot, lambda: app.screen.query_one(CompareChart).view is not None,
                         "the comparison from the palette")
        await app.run_keyed_action("compare_axis")
        await settle(pilot)
        view = app.screen.query_one(CompareChart).view
        assert view is not None and view.axis == "time"


async def test_job_names_are_shown_as_text_never_as_markup(tmp_path: Path) -> None:
    """Job names come from the hosts: markup or an action in one is shown as typed."""
    parent, fork = "[b]base[/b]", "lr[@click=app.quit]x"
    rec = fork_runs.write_fork_and_parent(tmp_path / "hostile.duckdb", parent=parent,
                                          fork=fork)
    comparison = load_comparison([(rec, parent, rec.name), (rec, fork, rec.name)])
    app = compare_app(comparison, Namespace(theme="dark", keymap=None))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert f"{parent} vs {fork}" in text(app, "#screen-title")
        legend = text(app, "#compare-legend")
        assert parent in legend and fork in legend
        assert _cells(app, "compare-metrics")[0][0] == "last step"
        header = [str(c.label) for c in app.screen.query_one(
            "#compare-metrics", DataTable).columns.values()]
        assert header == ["metric", parent, fork]
        await pilot.click("#compare-legend")
        await settle(pilot)
        assert app.is_running  # the name's [@click=app.quit] did nothing


async def test_a_screenshot_goes_next_to_the_recordings_and_says_where(
        fork_recording: Path, tmp_path: Path) -> None:
    comparison = load_comparison([(fork_recording, "parent", fork_recording.name),
                                  (fork_recording, "fork", fork_recording.name)])
    app = compare_app(comparison, Namespace(theme="dark", keymap=None), screenshots=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        saved = app.deliver_screenshot()
        await settle(pilot)
        assert saved is not None and Path(saved).parent == tmp_path
        assert Path(saved).read_text().startswith("<svg")
        assert notifications(app)[-1] == f"screenshot saved: {saved}"
