"""The Effect pane shows the learning rate: its course, its value now and the operator's
change of it, from a real store's snapshot (the screen's one render path)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cockpit.read.source import build_snapshot
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import LrChange
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.ui.app_factory import make_app
from cockpit.ui.widgets.spark_bars import SparkBars
from cockpit.ui.widgets.sparkline_chart import SparklineChart
from tests.read.test_records_of_several_steps import write
from tests.ui.helpers import settle, text


async def test_the_effect_pane_shows_the_lr_and_the_operators_change(tmp_path: Path) -> None:
    with Store(tmp_path / "hf.duckdb") as store:
        write(store, 200)
        snapshot = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    app = make_app(StaticSource(snapshot))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert text(app, "#effect-lr").strip() == \
            "▼ lr_scale=0.1 at step 100: 0.0009 → 8.95e-05"
        chart = app.screen.query_one("#spark-lr", SparklineChart)
        assert chart.series == snapshot.effect.lr
        assert len(chart.query_one(SparkBars).data) == len(snapshot.effect.lr.x) > 1
        assert "now 8e-05 · 8e-05–0.000995" in text(app, "#spark-lr .spark-range")
        assert "▼ adjusted" in text(app, "#loss-legend")  # the change's mark on the chart


async def test_an_lr_the_operator_never_changed_says_so() -> None:
    from cockpit.ui.demo_static import demo_snapshot

    snap = demo_snapshot()
    plain = replace(snap, effect=replace(snap.effect, lr_changes=(), lr_scale=None))
    app = make_app(StaticSource(plain))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert text(app, "#effect-lr").strip() == "LR not changed by the operator"
        assert text(app, "#spark-lr .spark-range").startswith("now 0.00013 · ")


async def test_a_knob_value_from_the_trainer_is_shown_as_text(tmp_path: Path) -> None:
    """An acknowledged value is the trainer's text: markup in it is shown, not obeyed."""
    with Store(tmp_path / "hf.duckdb") as store:
        write(store, 200)
        snapshot = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    hostile = replace(snapshot, effect=replace(
        snapshot.effect, lr_changes=(LrChange(100, "lr_scale=[red]0.1", 1e-3, 1e-4),)))
    app = make_app(StaticSource(hostile))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "▼ lr_scale=[red]0.1 at step 100" in text(app, "#effect-lr")


async def test_run_info_shows_the_lr_now_and_the_scale_in_force(tmp_path: Path) -> None:
    from textual.widgets import DataTable

    from cockpit.read.source import details

    with Store(tmp_path / "hf.duckdb") as store:
        write(store, 200)
        reader = StoreReader(store)
        snapshot = build_snapshot(reader, until_ts=None, label="REPLAY")
        info = details(reader, "run")
    app = make_app(StaticSource(snapshot, {"run": info}))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        rows = {str(t.get_row_at(r)[0]): str(t.get_row_at(r)[1])
                for t in app.screen.query(DataTable) for r in range(t.row_count)
                if len(t.get_row_at(r)) == 2}
        assert rows["lr"] == "8e-05" and rows["lr scale"] == "0.1"
