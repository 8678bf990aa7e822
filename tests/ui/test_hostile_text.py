"""Text from the wire on every screen: shown as sent, never interpreted.

A trainer's exception, a log line, an alert's `what`, a GPU state string or a host name
may hold escape sequences (a window title, the clipboard through OSC 52, colours),
Textual markup (`[@click=app.quit]`, `[link=…]`) or brackets that merely look like it
(`tensor([[0.1, 0.2`, `driver [/b] mismatch`). Each screen that shows such text is
opened on it here, through Pilot, and what it rendered is read back: the text is there
literally (its controls in their visible form, `printable`'s), no control character and
no clickable or linked region came from it, and the app did not exit.

The sanitizer itself (`printable`) and the UI's one way of putting wire text into
content (`fmt.markup` / `fmt.text`) are property-tested with hypothesis.
"""

from __future__ import annotations

import dataclasses
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.segment import Segment
from textual.content import Content
from textual.widgets._toast import Toast

from cockpit.analysis.text import printable
from cockpit.read.details import LogLine, LogTail, RunInfo
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import (
    Alert,
    EventRow,
    GpuCell,
    Health,
    HostHealth,
    Interruption,
    Progress,
    RankTime,
    Series,
)
from cockpit.ui import format as fmt
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import T0, demo_snapshot
from cockpit.ui.screens.alerts import alert_content
from cockpit.ui.widgets.efficiency_pane import rank_times_text, stragglers_line
from cockpit.ui.widgets.gpu_grid import host_line
from cockpit.ui.widgets.interruption_log import interruption_line
from cockpit.ui.widgets.progress_pane import stall_text
from tests.ui.helpers import settle, wait_until

# Each is what an attacker, or an ordinary bad day, puts into a field.
OSC_TITLE = "\x1b]0;PWNED-TITLE\x07"
OSC_52 = "\x1b]52;c;cHduZWQ=\x07"  # "pwned" onto the clipboard
ANSI = "\x1b[31mred\x1b[0m"
CLICK = "[@click=app.quit]quit[/]"
CLICK_SPACED = "[ @click=app.quit]stop[/]"
LINK = "[link='https://evil.example']here[/link]"
TENSOR = "tensor([[0.1, 0.2"
SHAPE = "shape [3, 4"
CLOSE = "driver [/b] mismatch"
C1_CSI = "\x9b2J"
BIDI = "ab\u202ecd"
VARIABLE = "$cost ${what}"  # a template variable's syntax must stay text too

HOSTILE = (OSC_TITLE, OSC_52, ANSI, CLICK, CLICK_SPACED, LINK, TENSOR, SHAPE, CLOSE,
           C1_CSI, BIDI, VARIABLE)
HOST = "gpu-[b]x[/b]"  # a host name defaulted from an address is not checked
OTHER_HOST = "node\x1b]0;T\x07"


def hostile(*parts: str) -> str:
    return " ".join(parts)


def hostile_snapshot():
    base = demo_snapshot()
    cells = (GpuCell(index=0, online=True, simulated=True, util=50.0, name=hostile(CLICK, ANSI)),)
    hosts = (HostHealth(host=HOST, state="streaming", gpu_state=hostile(CLOSE, OSC_TITLE),
                        gpus=cells),
             HostHealth(host=OTHER_HOST, state="streaming", gpu_state=hostile(SHAPE, LINK),
                        gpus=cells))
    health = Health(hosts=hosts, simulated=True, checkpoint_advice=hostile(CLICK_SPACED, BIDI),
                    interruptions=(Interruption(cause=hostile(TENSOR, OSC_52),
                                                detected_at=T0 - 50, recovered_in=None,
                                                steps_lost=None, hosts=(HOST, OTHER_HOST),
                                                failed_restarts=(CLOSE, C1_CSI)),))
    progress = dataclasses.replace(base.progress, stage=hostile(SHAPE, CLICK), stalled=True,
                                   stall_cause=hostile(TENSOR, LINK),
                                   stall_detail=hostile(ANSI, VARIABLE))
    efficiency = dataclasses.replace(base.efficiency, note=hostile(CLOSE, OSC_52),
                                     slowest_ranks=(RankTime(3, OTHER_HOST, 1.5),
                                                    RankTime(4, HOST, 1.2)))
    alerts = (Alert(T0 - 10, hostile(CLICK, "resource"), "critical", hostile(CLOSE),
                    hostile("host", HOST), hostile(TENSOR, CLICK_SPACED, OSC_TITLE),
                    hostile(SHAPE, LINK, OSC_52)),
              Alert(T0 - 20, "data", hostile("warning", ANSI), hostile(C1_CSI, BIDI),
                    "job", hostile(VARIABLE, CLICK), hostile(CLOSE)))
    events = (EventRow(T0 - 5, OTHER_HOST, hostile("kind", CLICK), hostile(TENSOR, OSC_TITLE)),
              EventRow(T0 - 6, HOST, "log", hostile(ANSI, LINK, CLOSE), step=7))
    return dataclasses.replace(base, job="demo-7b", progress=progress, health=health,
                               efficiency=efficiency, alerts=alerts, events=events)


def hostile_details() -> dict[str, object]:
    series = Series(x=(1.0, 2.0), last=(1.0, 2.0), lo=(1.0, 2.0), hi=(1.0, 2.0))

    def host(host: str = HOST) -> dict[str, object]:
        return {"host": host, "driver": hostile(CLOSE, OSC_TITLE),
                hostile("key", CLICK): hostile(TENSOR),
                "gpu_temp": series, hostile("series", LINK): series,
                "env": {hostile("pkg", SHAPE): hostile(OSC_52, ANSI)},
                "processes": [{"pid": 1, "cmd": hostile(CLICK_SPACED, C1_CSI),
                               hostile("col", CLOSE): hostile(BIDI)}],
                hostile("list", CLICK): [hostile(TENSOR), hostile(ANSI, VARIABLE)]}

    lines = tuple(LogLine(ts=T0 - k, host=HOST if k % 2 else OTHER_HOST, rank=k, stream="stderr",
                          line=part) for k, part in enumerate(HOSTILE))
    run = RunInfo(job="demo-7b", declared=True, data_version=hostile(CLOSE, OSC_TITLE),
                  git_commit=hostile(CLICK), tags=(hostile(SHAPE), hostile(ANSI)),
                  config={hostile("opt", CLICK_SPACED): hostile(TENSOR, OSC_52),
                          "model": {hostile("layer", LINK): hostile(C1_CSI, BIDI)}},
                  changes=({"field": hostile("git", CLICK), "old": hostile(TENSOR),
                            "new": hostile(OSC_TITLE), "ts": T0, "host": HOST},),
                  forked_from={"job": hostile(CLOSE), "step": 3})
    return {"host": host, "log": LogTail(lines=lines), "run": run, "events": None}


# --- what a screen rendered --------------------------------------------------------------

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")


def unsafe_chars(text: str) -> list[str]:
    """Characters a terminal could act on, or that reorder what is shown."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cs") or c in BIDI_CONTROLS]


def rendered(app) -> tuple[str, list[Segment]]:
    """The whole screen as its compositor draws it for the terminal: its text (one line
    per row) and every segment."""
    strips = app.screen._compositor.render_strips()
    segments = [segment for strip in strips for segment in strip]
    return "\n".join(strip.text.rstrip() for strip in strips), segments


def assert_nothing_interpreted(app, expected: list[str]) -> str:
    screen, segments = rendered(app)
    assert app.is_running, "the app exited"
    assert unsafe_chars(screen.replace("\n", "")) == [], screen
    for segment in segments:
        style = segment.style
        if style is None:
            continue
        assert not style.link, f"a link from wire text: {segment!r}"
        meta = style.meta or {}
        assert "@click" not in meta, f"a clickable region from wire text: {segment!r}"
    flat = " ".join(screen.split())
    for text in expected:
        shown = " ".join(printable(text).split())
        assert shown in flat, f"{shown!r} is not on the screen:\n{screen}"
    return screen


SIZE = (260, 80)


async def test_the_main_screen_shows_hostile_text_as_text() -> None:
    app = make_app(StaticSource(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.screen.query_one("#health").focus()
        await settle(pilot)
        assert_nothing_interpreted(app, [
            hostile(SHAPE, CLICK),  # the stage
            hostile(TENSOR, LINK),  # the stall cause
            hostile(CLOSE, OSC_TITLE), hostile(SHAPE, LINK),  # GPU states
            HOST, OTHER_HOST, hostile(TENSOR, OSC_52),  # an interruption
            hostile(CLICK_SPACED, BIDI),  # the checkpoint advice
            hostile(CLOSE, OSC_52),  # the efficiency note
            f"r3@{OTHER_HOST}"])


async def test_the_alerts_screen_shows_hostile_text_as_text() -> None:
    """It exited the app with a MarkupError on `tensor([[0.1, 0.2`, and an alert's
    `[ @click=app.quit]` became a region that quit the cockpit when clicked."""
    app = make_app(StaticSource(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_open_alerts()
        await settle(pilot)
        screen = assert_nothing_interpreted(app, [
            hostile(TENSOR, CLICK_SPACED, OSC_TITLE), hostile(SHAPE, LINK, OSC_52),
            hostile(CLICK, "resource"), hostile("warning", ANSI).upper(),
            hostile(VARIABLE, CLICK), hostile(TENSOR, OSC_TITLE), hostile(ANSI, LINK, CLOSE),
            hostile("kind", CLICK)])
        # Click where the alert's bracketed text is: nothing there is an action.
        lines = screen.splitlines()
        row = next(y for y, line in enumerate(lines) if "[ @click=app.quit]stop" in line)
        column = lines[row].index("[ @click=app.quit]stop") + 20
        await pilot.click(offset=(column, row))
        await settle(pilot)
        assert app.is_running and app.return_code is None


async def test_host_detail_shows_hostile_text_as_text() -> None:
    """It crashed on a `gpu_state` of `driver [/b] mismatch`."""
    app = make_app(StaticSource(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_open_host_detail()
        await settle(pilot)
        assert_nothing_interpreted(app, [
            f"Host detail: {HOST}", hostile(CLOSE, OSC_TITLE), hostile(CLICK, ANSI),
            hostile("key", CLICK), hostile(TENSOR), hostile("series", LINK),
            hostile("pkg", SHAPE), hostile(OSC_52, ANSI), hostile(CLICK_SPACED, C1_CSI),
            hostile("col", CLOSE), hostile(BIDI), hostile("list", CLICK),
            hostile(ANSI, VARIABLE), OTHER_HOST])
        await pilot.press("right_square_bracket")  # the other host's tab, by its name
        await settle(pilot)
        assert_nothing_interpreted(app, [f"Host detail: {OTHER_HOST}", hostile(SHAPE, LINK)])


async def test_the_log_shows_hostile_lines_as_text() -> None:
    """Colour codes in a log line reached the terminal as `�[31m`, or as colour."""
    app = make_app(StaticSource(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_open_log()
        await settle(pilot)
        assert_nothing_interpreted(app, list(HOSTILE))


async def test_run_info_shows_hostile_text_as_text() -> None:
    app = make_app(StaticSource(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_open_run_info()
        await settle(pilot)
        assert_nothing_interpreted(app, [
            hostile(CLOSE, OSC_TITLE), hostile(CLICK), hostile(SHAPE), hostile(ANSI),
            hostile("opt", CLICK_SPACED), hostile(TENSOR, OSC_52),
            f"model.{hostile('layer', LINK)}", hostile(C1_CSI, BIDI),
            hostile(TENSOR) + " → " + hostile(OSC_TITLE), hostile(CLOSE) + " at step 3"])


class FailingDetails(StaticSource):
    """Its events drill-down fails with the text of a hostile exception."""

    def details(self, what: str, **kw: object) -> object:
        if what == "events":
            raise RuntimeError(hostile(CLICK_SPACED, OSC_TITLE, TENSOR))
        return super().details(what, **kw)


async def test_a_failures_toast_shows_hostile_text_as_text() -> None:
    """A toast is markup unless told otherwise: every `notify` of the app is text."""
    app = make_app(FailingDetails(hostile_snapshot(), hostile_details()))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.action_open_alerts()
        await wait_until(pilot, lambda: bool(app.screen.query(Toast)), "the failure's toast")
        await settle(pilot)
        assert_nothing_interpreted(app, [])
        said = "RuntimeError: " + hostile(CLICK_SPACED, OSC_TITLE, TENSOR)
        toast = app.screen.query_one(Toast).render()
        assert isinstance(toast, Content) and printable(said) in toast.plain
        assert all("@click" not in str(span.style) for span in toast.spans)


# --- properties ----------------------------------------------------------------------------

# Any text, with the characters that matter drawn often: controls, brackets, markup.
wire_text = st.lists(st.one_of(
    st.characters(),
    st.sampled_from(["\x1b", "\x07", "\x9b", "\x7f", "\t", "\n", "\r", "\r\n", "[", "]",
                     "/", "@", "=", "$", "\\", "\u202e", "\ud800", "[@click=app.quit]",
                     "[link=x]", "[/]", "[b]", "[ @click=app.bell]", "$value", "${other}"])),
    max_size=30).map("".join)


@given(wire_text)
def test_printable_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    shown = printable(text)
    assert unsafe_chars(shown) == []
    assert "\n" not in shown and "\t" not in shown
    shown.encode("utf-8")  # a lone surrogate cannot be written; its escape can
    assert printable(shown) == shown  # once is enough: shown text is shown as is
    many = printable(text, multiline=True)
    assert unsafe_chars(many.replace("\n", "")) == []
    assert many.split("\n") == [printable(line) for line in
                                text.replace("\r\n", "\n").split("\n")]


@given(st.text(alphabet=st.characters(categories=["L", "N", "P", "S", "Zs"],
                                      exclude_characters="\u2028\u2029"), max_size=40))
def test_printable_keeps_ordinary_text_as_it_is(text: str) -> None:
    assert printable(text) == text == printable(text, multiline=True)


def test_each_control_is_shown_visibly_not_dropped() -> None:
    assert printable(OSC_TITLE) == "␛]0;PWNED-TITLE␇"
    assert printable("a\x00b\x7fc\x9bd") == "a␀b␡c\\x9bd"
    assert printable("x\u202ey\ud800") == "x\\u202ey\\ud800"
    assert printable("line 1\r\nline 2") == "line 1␍␊line 2"
    assert printable("line 1\r\nline 2", multiline=True) == "line 1\nline 2"
    assert printable("\tx") == "    x"
    assert printable(42) == "42"


@given(wire_text, wire_text)
def test_wire_values_in_markup_are_text(value: str, other: str) -> None:
    """`fmt.markup` is how the UI puts wire text into its own markup: whatever the value
    holds, the result reads the value literally, styled only by the template."""
    content = fmt.markup("[b]$value[/b] · [$error]${other}[/]", value=value, other=other)
    assert content.plain == f"{printable(value)} · {printable(other)}"
    assert {str(span.style) for span in content.spans} <= {"b", "$error"}
    assert fmt.text(value).plain == printable(value) and not fmt.text(value).spans


@given(wire_text)
def test_lines_built_from_wire_fields_carry_no_action_or_link(text: str) -> None:
    alert = Alert(T0, text, text, text, text, text, text)
    host = HostHealth(host=text, state="streaming", gpu_state=text,
                      gpus=(GpuCell(index=0, online=True, simulated=False),))
    cut = Interruption(cause=text, detected_at=T0, recovered_in=None, steps_lost=None,
                       hosts=(text,), failed_restarts=(text,))
    stalled = Progress(stalled=True, stall_cause=text, stall_detail=text)
    eff = dataclasses.replace(demo_snapshot().efficiency, note=text,
                              slowest_ranks=(RankTime(0, text, 1.0),),
                              ranks=(RankTime(0, text, 1.0),), rank_count=1)
    whole = (alert_content(alert), host_line(host, 8), interruption_line(cut),
             stall_text(stalled), stragglers_line(eff))
    cut_to_column = (rank_times_text(eff, 5),)  # the host column: its first 16 characters
    for content in (*whole, *cut_to_column):
        assert isinstance(content, Content)
        assert printable(text) in content.plain or (
            content in cut_to_column and printable(text)[:16] in content.plain)
        assert unsafe_chars(content.plain.replace("\n", "")) == []
        for span in content.spans:
            assert "@click" not in str(span.style) and "link" not in str(span.style)


@pytest.mark.parametrize("text", HOSTILE)
def test_the_old_failures_are_gone(text: str) -> None:
    """Each string crashed or went live through `textual.markup.escape`."""
    content = fmt.markup("what: $what", what=text)
    assert content.plain == f"what: {printable(text)}" and not content.spans
