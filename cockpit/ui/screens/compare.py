"""Jobs side by side: their losses overlaid on one chart (by step, or by time since each
started: `x` flips), then their final and best metrics, speed, provenance differences
and KPIs as tables.

In the cockpit (key `C`, or "Compare jobs" in the command palette) the job on screen is
compared with its parent or earlier run, re-read as the recording grows or the replay
moves (`Source.details("compare")`, recomputed when the recording has moved 30 s on);
`cockpit compare A B` opens this screen on a comparison it read once (`comparison=`).
The rows are `cockpit.read.compare`'s, the same the headless `cockpit compare --format`
prints.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, Static

from cockpit.read.compare import (
    AXES,
    STEP_AXIS,
    Comparison,
    kpi_table,
    metric_rows,
    provenance_table,
    relation_rows,
    short_labels,
)
from cockpit.read.report_format import Table
from cockpit.snapshot import Snapshot
from cockpit.ui import format as fmt
from cockpit.ui import keymap
from cockpit.ui.screens.drill_down import DrillDownScreen
from cockpit.ui.widgets.compare_chart import (
    CompareChart,
    CompareCurve,
    CompareView,
    compare_legend,
)
from cockpit.ui.widgets.detail_view import table_cell

TABLES = (("compare-metrics", "Metrics"), ("compare-provenance", "Provenance differences"),
          ("compare-kpis", "KPIs"))


def compare_view(comparison: Comparison, axis: str) -> CompareView:
    """The chart's curves: each side's train and validation losses on `axis`."""
    labels = short_labels(comparison)
    return CompareView(axis, tuple(
        CompareCurve(label, side.curve.train(axis), side.curve.val(axis))
        for label, side in zip(labels, comparison.sides, strict=True)))


class CompareScreen(DrillDownScreen):
    WHAT = "compare"
    BINDINGS = [*DrillDownScreen.BINDINGS, *keymap.bindings("compare")]

    axis: reactive[str] = reactive(STEP_AXIS)

    def __init__(self, snapshot: Snapshot | None = None,
                 comparison: Comparison | None = None) -> None:
        super().__init__(snapshot)
        self._fixed = comparison is not None
        if comparison is not None:
            self.set_reactive(DrillDownScreen.details, comparison)

    def details_params(self) -> dict[str, object]:
        return self.job_params()

    def request_details(self) -> None:
        """A comparison given once (`cockpit compare A B`) is not re-read."""
        if not self._fixed:
            super().request_details()

    def compose(self) -> ComposeResult:
        yield Static("[b]Compare[/b]", id="screen-title")
        yield Static(id="compare-legend")
        yield CompareChart(id="compare-chart")
        with VerticalScroll(id="compare-tables"):
            yield Static(id="compare-relation")
            for table_id, title in TABLES:
                yield Static(f"[b]{title}[/b]", classes="detail-heading")
                yield DataTable(id=table_id, cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self._show()

    def watch_details(self, _details: object) -> None:
        if self._ready:
            self._show()

    def watch_axis(self, _axis: str) -> None:
        if self._ready:
            self._show()

    def action_toggle_axis(self) -> None:
        self.axis = AXES[(AXES.index(self.axis) + 1) % len(AXES)]

    def _show(self) -> None:
        comparison = self.details
        title = self.query_one("#screen-title", Static)
        chart = self.query_one(CompareChart)
        if not isinstance(comparison, Comparison) or not comparison.sides:
            note = comparison.note if isinstance(comparison, Comparison) else None
            title.update(fmt.markup("[b]Compare[/b]  $note",
                                    note=note or "reading the jobs to compare…"))
            chart.view = None
            return
        names = " vs ".join(short_labels(comparison))
        key = keymap.key_label(getattr(self.app, "keymap", None), "compare_axis")
        title.update(fmt.markup(f"[b]Compare[/b]  $names  ·  x axis: {self.axis} "
                                "([b]$key[/b]: step/time)", names=names, key=key))
        view = compare_view(comparison, self.axis)
        chart.view = view
        self.query_one("#compare-legend", Static).update(compare_legend(view))
        relation = relation_rows(comparison)
        lines = [f"{k}: {v}" if k else f"  {v}" for k, v in relation]
        if comparison.note:
            lines.append(comparison.note)
        self.query_one("#compare-relation", Static).update(
            fmt.text("\n".join(lines), multiline=True))
        for (table_id, _title), table in zip(
                TABLES, (metric_rows(comparison), provenance_table(comparison),
                         kpi_table(comparison)), strict=True):
            _fill(self.query_one(f"#{table_id}", DataTable), table)


def _fill(widget: DataTable, table: Table) -> None:
    """A table's header and rows, every cell as text (job names and config values come
    from the hosts: never parsed as markup)."""
    header, rows = table
    widget.clear(columns=True)
    widget.add_columns(*(table_cell(str(h)) for h in header))
    for row in rows:
        widget.add_row(*(table_cell(str(c)) for c in row))
