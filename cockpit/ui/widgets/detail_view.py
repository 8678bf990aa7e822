"""Render any drill-down result (a dataclass, a mapping, rows) as tables and charts.

Drill-down data (`source.details(...)`) is plain data, so one renderer serves every
screen: scalar fields become a key/value table, nested mappings become dotted keys,
sequences of records become a table with one column per field, and `Series` become
sparklines. A new field in the data shows up on screen without UI changes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeGuard

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Static

from cockpit.analysis.text import printable
from cockpit.snapshot import Series
from cockpit.ui import format as fmt
from cockpit.ui.widgets.spark_bars import DATA_RANGE, PERCENT, Scale
from cockpit.ui.widgets.sparkline_chart import SparklineChart

SCALARS = (str, int, float, bool, type(None))
# Fields that hold epoch seconds: shown as a date and time, not as a 1.8e+09 number.
TIME_FIELDS = frozenset({"ts", "started", "last_seen", "detected_at"})
# Fields in bytes, bytes/s and KB/s (docs/protocol.md): shown as 61.5GiB, not 66034926139.
BYTE_FIELDS = frozenset({"mem_used", "mem_total", "gpu_mem", "rss", "swap_used",
                         "swap_total", "disk_used", "disk_total"})
BYTE_RATE_FIELDS = frozenset({"disk_read", "disk_write", "net_rx", "net_tx"})
KB_RATE_FIELDS = frozenset({"pcie_tx", "pcie_rx"})


def cell(value: object) -> str:
    if value is None:
        return fmt.NA_TEXT
    if isinstance(value, bool):
        return "true" if value else "false"  # as a config or `--set` writes it
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ", ".join(cell(v) for v in value)
    return str(value)


def table_cell(text: str) -> Text:
    """A DataTable cell: the table parses a `str` cell as Rich markup, where a value
    from a host (`driver [/b] mismatch`, `[@click=app.quit]`) would crash the screen or
    become an action; a `Text` is shown as it is."""
    return Text(printable(text), end="")


def field_cell(key: str, value: object) -> str:
    """`cell`, except that times, sizes and rates read in their units."""
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not math.isfinite(value)):
        return cell(value)
    name = key.rsplit(".", 1)[-1]
    if name in TIME_FIELDS:
        return fmt.timestamp(value)
    if name in BYTE_FIELDS:
        return fmt.size(value)
    if name in BYTE_RATE_FIELDS:
        return f"{fmt.size(value)}/s"
    if name in KB_RATE_FIELDS:
        return f"{fmt.size(value * 1024)}/s"
    return cell(value)


def series_scale(name: str) -> Scale:
    """What a history's bars stand for: a percentage's on 0-100, as its value prints."""
    return PERCENT if series_value_text(name) is fmt.percent else DATA_RANGE


def series_value_text(name: str) -> Callable[[float], str]:
    """How a history named `name` (`gpu_temp`, `cpu`, `gpu_mem_used`…) prints a value."""
    words = set(name.split("_"))
    if name in BYTE_FIELDS or name.endswith("mem_used"):
        return fmt.size
    if words & {"util", "cpu"}:  # gpu_util, util_per_gpu, cpu: percent
        return fmt.percent
    if "temp" in words:
        return lambda v: f"{v:.0f}°C"
    if "power" in words:
        return lambda v: f"{v:.0f} W"
    return cell


def as_mapping(value: object) -> Mapping[str, object] | None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return None


def flatten(mapping: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    """Scalar leaves of nested mappings as (dotted.key, value), for config-like data."""
    rows: list[tuple[str, object]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        nested = value if isinstance(value, Mapping) else None
        if nested:
            rows.extend(flatten(nested, f"{name}."))
        else:
            rows.append((name, value))
    return rows


def is_record_list(value: object) -> TypeGuard[Sequence[object]]:
    return (isinstance(value, Sequence) and not isinstance(value, str) and bool(value)
            and all(as_mapping(item) is not None for item in value))


def title(name: str) -> str:
    """A field name for reading; a dotted config key stays as written, so it can be
    copied into an override (`--set data.max_bytes=…`)."""
    return name if "." in name else name.replace("_", " ")


_NOTHING_SHOWN = object()


class DetailView(VerticalScroll):
    """Shows `data`; rebuilt whenever a result that differs from the shown one arrives.

    Drill-downs are re-fetched every few seconds and usually come back the same:
    rebuilding every table for them would cost a remount, a layout and a repaint.
    """

    data: reactive[object] = reactive(None, always_update=True, init=False)
    _shown: object = _NOTHING_SHOWN

    def __init__(self, *, omit: frozenset[str] = frozenset(), id: str | None = None) -> None:
        """`omit`: top-level fields the screen shows elsewhere, fresher (the host header
        line's link state and last-seen time follow every snapshot; the details are
        re-fetched every few seconds, and two different times side by side read as a
        fault)."""
        super().__init__(id=id)
        self.omit = omit

    def compose(self) -> ComposeResult:
        yield Static("[$text-muted]loading…[/]", classes="detail-empty")

    async def watch_data(self, data: object) -> None:
        if self._shown is not _NOTHING_SHOWN and data == self._shown:
            return
        self._shown = data
        # Swapped in one repaint: host details change with every sample, and the view
        # must not flash blank every few seconds.
        with self.app.batch_update():
            await self.remove_children()
            await self.mount_all(list(self.build(data)))

    def build(self, data: object) -> Iterator[Widget]:
        if data is None:
            yield Static("[$text-muted]no details available[/]", classes="detail-empty")
            return
        mapping = as_mapping(data)
        if mapping is None:
            yield from self.section("", data)
            return
        mapping = {k: v for k, v in mapping.items() if k not in self.omit}
        scalars = [(k, v) for k, v in mapping.items() if isinstance(v, SCALARS)]
        if scalars:
            yield self.key_values(scalars)
        for name, value in mapping.items():
            if not isinstance(value, SCALARS):
                yield from self.section(name, value)

    def section(self, name: str, value: object) -> Iterator[Widget]:
        if name:
            yield Static(fmt.markup("[b]$name[/b]", name=title(name)), classes="detail-heading")
        if isinstance(value, Series):
            yield SparklineChart(title(name) or "series", value,
                                 value_text=series_value_text(name), scale=series_scale(name))
            return
        mapping = as_mapping(value)
        if mapping is not None:
            series = {k: v for k, v in mapping.items() if isinstance(v, Series)}
            rest = {k: v for k, v in mapping.items() if not isinstance(v, Series)}
            for key, item in series.items():
                yield SparklineChart(title(key), item, value_text=series_value_text(name),
                                     scale=series_scale(name))
            if rest:
                yield self.key_values(flatten(rest))
            return
        if is_record_list(value):
            yield self.records(value)
            return
        if isinstance(value, Sequence) and not isinstance(value, str):
            text = "\n".join(printable(cell(item)) for item in value) or fmt.NA_TEXT
            yield Static(Content(text))
            return
        yield Static(fmt.text(cell(value)))

    @staticmethod
    def key_values(rows: Sequence[tuple[str, object]]) -> DataTable:
        table: DataTable[Text] = DataTable(show_header=False, cursor_type="row",
                                           classes="detail-kv")
        table.add_columns("field", "value")
        for key, value in rows:
            table.add_row(table_cell(title(key)), table_cell(field_cell(key, value)))
        return table

    @staticmethod
    def records(items: Sequence[object]) -> DataTable:
        rows = [as_mapping(item) or {} for item in items]
        columns: list[str] = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True,
                                           classes="detail-records")
        table.add_columns(*(table_cell(title(c)) for c in columns))
        for row in rows:
            table.add_row(*(table_cell(field_cell(c, row.get(c))) for c in columns))
        return table
