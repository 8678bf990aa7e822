"""A recording holding hostile text, replayed and reported: nothing in it is interpreted.

`cockpit replay` and `cockpit report` run in a real terminal (tmux, a server of the
test's own), on the recorded run with escape sequences, OSC 52, `@click`/`link` markup
and unbalanced brackets put where hosts and trainers put text
(tests/harness/hostile_recording.py). What the app wrote is read back from the
terminal: the text is on screen literally (controls in `printable`'s visible form), the
window title was not changed, no clipboard buffer was set, and the app quit cleanly.
The same terminal first shows that each check can fail: a `printf` of an OSC 2 and an
OSC 52 does change the title and does set a buffer there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from cockpit.analysis.text import UNSAFE, printable
from cockpit.read.report import render_report
from tests.harness import hostile_recording as hostile
from tests.ui.test_tmux_smoke import cockpit_command, require_tmux

WAIT_S = 60  # bounds a hang only: a loaded machine takes a while to start Textual
SGR = re.compile(r"\x1b\[[0-9;:]*m")


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile.load_hostile_recording(
        tmp_path_factory.mktemp("hostile") / "hostile-run.duckdb")


def flat(text: str) -> str:
    return " ".join(text.split())


def shown(text: str) -> str:
    return flat(printable(text))


def test_a_hostile_recordings_report_prints_its_text_as_text(hostile_store: Path) -> None:
    """`cockpit report` wrote an event's or an alert's escape sequences to the terminal."""
    for fmt in ("text", "markdown"):
        out = render_report(hostile_store, fmt=fmt)
        assert UNSAFE.findall(out.replace("\n", "")) == [], fmt
        for text in (hostile.GPU_STATE, hostile.DATA_VERSION, hostile.TAG,
                     hostile.ALERT["what"], hostile.ALERT["hint"]):
            assert shown(text) in flat(out.replace(" \\| ", " | ")), (fmt, text)
    out = render_report(hostile_store, fmt="json")
    assert UNSAFE.findall(out.replace("\n", "")) == []
    data = json.loads(out)  # escaped, not lost: JSON readers get the text as sent
    alert = next(a for a in data["alerts"] if a["code"] == "hostile_probe")
    assert (alert["what"], alert["hint"]) == (hostile.ALERT["what"], hostile.ALERT["hint"])
    assert data["run"]["data_version"] == hostile.DATA_VERSION
    assert data["health"]["hosts"][0]["gpu_state"] == hostile.GPU_STATE


class Terminal:
    """A tmux server of this test's own: its title and paste buffers are this pane's."""

    def __init__(self, cwd: Path) -> None:
        self.server = f"cockpit-hostile-{uuid.uuid4().hex[:8]}"
        # Wide enough for a host's line in the Health pane of the 2 × 2 grid.
        self.run("new-session", "-d", "-s", "t", "-x", "260", "-y", "60", "-c", str(cwd), "sh")
        self.run("set-option", "-g", "set-clipboard", "on")  # OSC 52 makes a buffer
        self.run("set-option", "-g", "history-limit", "5000")

    def run(self, *args: str) -> str:
        # Never COLUMNS or LINES: readline (loaded under pytest, and by xdist's workers)
        # can set them to 80 and 24, and the app in the pane would take them over the
        # pane's own size.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-L", self.server, *args], capture_output=True,
                              text=True, check=True, env=env).stdout

    def type(self, line: str) -> None:
        """Type a shell command line, as it is, and run it."""
        self.run("send-keys", "-t", "t", "-l", line)
        self.run("send-keys", "-t", "t", "Enter")

    def press(self, key: str) -> None:
        self.run("send-keys", "-t", "t", key)

    def screen(self, escapes: bool = False, history: bool = False) -> str:
        return self.run("capture-pane", "-p", "-t", "t", *(["-e"] if escapes else []),
                        *(["-S", "-"] if history else []))

    def title(self) -> str:
        return self.run("display", "-p", "-t", "t", "#{pane_title}").strip()

    def buffers(self) -> str:
        return self.run("list-buffers")

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}:\n{self.screen()}")
            time.sleep(0.3)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True)


def assert_on_screen(term: Terminal, texts: list[str], what: str) -> str:
    term.wait(lambda: all(shown(t) in flat(term.screen()) for t in texts), what)
    coloured = term.screen(escapes=True)
    # The grid holds text and colours only: every escape read back is an SGR.
    assert "\x1b" not in SGR.sub("", coloured), coloured
    return coloured


@pytest.mark.starts  # a real terminal (tmux) and the installed console script
def test_a_hostile_recording_replays_and_reports_in_a_real_terminal(
        hostile_store: Path, tmp_path: Path) -> None:
    require_tmux()
    term = Terminal(tmp_path)
    status = tmp_path / "exit-status"
    try:
        # The checks can fail: this terminal obeys an OSC 2 and an OSC 52.
        term.type("printf '\\033]2;CONTROL\\033\\\\\\033]52;c;cHJvYmU=\\007'")
        term.wait(lambda: term.title() == "CONTROL" and "probe" in term.buffers(),
                  "the control title and buffer")
        term.run("delete-buffer")
        term.type("printf '\\033]2;BEFORE\\033\\\\'; clear")
        term.wait(lambda: term.title() == "BEFORE", "the title to be reset")
        assert term.buffers() == ""

        cockpit = cockpit_command()
        replay = shlex.join([cockpit, "replay", str(hostile_store), "--speed", "1000"])
        report = shlex.join([cockpit, "report", str(hostile_store)])
        term.type(f"{replay}; echo replay=$? > {shlex.quote(str(status))}")
        # The recording read to its end (the header names its job and its alert).
        term.wait(lambda: "REPLAY" in term.screen() and "1 alert" in term.screen(),
                  "the replay")
        assert_on_screen(term, [hostile.GPU_STATE], "the main screen")
        term.press("a")
        assert_on_screen(term, [hostile.ALERT["what"], hostile.ALERT["hint"],
                                hostile.EVENT_MSG], "the alerts screen")
        term.press("L")
        assert_on_screen(term, list(hostile.LOG_LINES), "the log screen")
        term.press("i")
        assert_on_screen(term, [hostile.DATA_VERSION, hostile.TAG], "run info")
        term.press("h")
        assert_on_screen(term, [hostile.GPU_STATE], "host detail")
        term.press("q")
        term.wait(lambda: status.is_file(), "the replay to quit on q")
        assert status.read_text().strip() == "replay=0"

        term.type(f"clear; {report}; echo report=$?")
        # The typed line shows "report=$?" before `clear` runs: wait for the status.
        term.wait(lambda: bool(re.search(r"report=\d", term.screen(history=True))), "the report")
        printed = term.screen(history=True)
        assert "report=0" in printed and "Traceback" not in printed, printed
        for text in (hostile.GPU_STATE, hostile.DATA_VERSION, hostile.ALERT["what"],
                     hostile.ALERT["hint"]):
            assert shown(text) in flat(printed), text
        assert "\x1b" not in SGR.sub("", term.screen(escapes=True, history=True))

        assert term.title() == "BEFORE"  # no OSC 0/2 from the app or the report
        assert term.buffers() == ""  # no OSC 52: the clipboard was not set
    finally:
        term.close()
