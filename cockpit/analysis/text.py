"""Human wording for figures that appear inside analysis messages, and `printable`: the
one function that makes untrusted text safe to put on a terminal."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from agent.wire import states


def duration(seconds: float | None) -> str:
    """`42s`, `5m 03s`, `2h 10m`, `3d 4h`: coarse enough to read at a glance."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def size(num_bytes: float | None, sep: str = "") -> str:
    """Binary byte sizes (memory, disk) as the operator's tools show them: `1.5GiB` on a
    pane, `1.5 GiB` (`sep=" "`) in a report's table; "n/a" when unknown."""
    if num_bytes is None or not math.isfinite(num_bytes):
        return "n/a"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f}{sep}B" if unit == "B" else f"{value:.1f}{sep}{unit}"
        value /= 1024
    return f"{value:.1f}{sep}TiB"


def where_text(where: dict[str, object]) -> str:
    """`host a / gpu 3 / rank 5 / step 1200`, in that fixed order, skipping absent parts."""
    order = ("host", "gpu", "rank", "file", "range", "step")
    parts = [f"{k} {where[k]}" for k in order if where.get(k) is not None]
    parts += [f"{k} {v}" for k, v in where.items() if k not in order and v is not None]
    return " / ".join(parts) if parts else "job"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 alert", "2 alerts": operators read these counts at a glance."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


ENDED_BY = {"pause": "the operator's pause", "stop": "the operator's stop",
            "launch": "a new launch", "resume": "the operator's resume",
            "relaunch": "a relaunch", "peer": "the end of another host's part"}


def ended_text(ended_by: str) -> str:
    """"ended by the operator's pause": an outage that is over without a recovery."""
    return f"ended by {ENDED_BY.get(ended_by, ended_by)}"


# Job states in which the newest outage may still recover: its agent waits to restart it,
# or has restarted it and waits for the first step (an operator's start would have ended
# the outage instead).
RECOVERING_STATES = frozenset({states.RECOVERING, states.STARTING})


def unrecovered_text(ended_by: str | None, newest: bool, state: str) -> str:
    """Why an outage has no recovery time, said alike by the screen and the report: it
    was ended otherwise, its restart is under way, or the agent gave up on it."""
    if ended_by:
        return ended_text(ended_by)
    if newest and state in RECOVERING_STATES:
        return "not recovered yet"
    if newest and state == states.FAILED:
        return "not recovered: the agent stopped retrying"
    return "not recovered"


def failed_restarts_text(causes: Sequence[str]) -> str:
    """"1 failed: nccl": the restarts of one outage that died before their first step
    (often a peer's rendezvous failing while the group re-forms)."""
    return f"{len(causes)} failed: {', '.join(causes)}"


# --- untrusted text ------------------------------------------------------------------
#
# Text from a host, a trainer, a recording or a config file may hold anything: an
# escape sequence that sets the window title or the clipboard (OSC 0/52), colour codes
# from a trainer's logger, a C1 CSI (U+009B), a bell, a bidi override that shows the
# rest of a line reversed, or a lone surrogate (which no terminal encoding can write).
# `printable` shows each such character visibly instead, so the text reads as it was
# sent and nothing in it reaches the terminal as a control:
#   C0 controls (U+0000-U+001F) as their control pictures (ESC as "␛", BEL as "␇",
#   newline as "␊"), DEL as "␡"; C1 controls, bidi controls and lone surrogates, which
#   have no picture, as "\x9b" / "\u202e" escapes; a tab as four spaces. Each character
#   is shown alike wherever it stands, so a field reads the same alone or in a line.
# Markup is a separate matter: the UI puts this text into `Content` as text, never into
# a markup string (see cockpit/ui/format.py), and the report is plain text.

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, multiline: bool = False) -> str:
    """`text` (anything; `str()` of it) with no character a terminal would act on:
    what the operator reads is exactly what was sent, with controls shown visibly (see
    above). With `multiline`, newlines are kept as line breaks ("\\r\\n" as one)."""
    s = text if isinstance(text, str) else str(text)
    if "\t" in s:
        s = s.replace("\t", "    ")
    if UNSAFE.search(s) is None:
        return s
    if multiline:
        return "\n".join(UNSAFE.sub(_shown, line) for line in s.replace("\r\n", "\n")
                         .split("\n"))
    return UNSAFE.sub(_shown, s)


def json_printable(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) safe to print: what JSON leaves
    raw of `UNSAFE` (DEL, C1 and bidi controls, lone surrogates; it escapes C0 in strings
    itself, and its indent's newlines are no string's) as `\\u` escapes, which any JSON
    reader decodes back to the same strings."""
    return UNSAFE.sub(lambda m: m.group() if m.group() in "\n\r\t" else
                      f"\\u{ord(m.group()):04x}", text)
