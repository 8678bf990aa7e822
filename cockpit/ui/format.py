"""Text formatting shared by the panes.

Every formatter takes `None` and answers "n/a": a source that cannot give a field says
so on screen instead of showing a misleading zero.

Text from hosts, trainers and recordings reaches the screen only through `text` and
`markup`, as `Content` text: never parsed as markup (where `[@click=app.quit]` is an
action, `[link=…]` a hyperlink and `tensor([[0.1` a MarkupError) and with every control
character shown visibly (`printable`). `textual.markup.escape` is not enough: it leaves
`[ @click=app.quit]` live.
"""

from __future__ import annotations

import time
from functools import lru_cache

from textual.content import Content

from cockpit.analysis.text import duration as duration  # one owner, re-exported for panes
from cockpit.analysis.text import printable
from cockpit.analysis.text import size as size

NA_TEXT = "n/a"


def text(value: object, *, multiline: bool = False) -> Content:
    """Untrusted text as screen content: exactly what was sent, with no style."""
    return Content(printable(value, multiline=multiline))


def markup(template: str, **values: object) -> Content:
    """The cockpit's own markup `template` (styles, bold) with untrusted `values` put in
    at `$name` / `${name}` as text: nothing in a value is parsed, whatever it holds.
    The template itself must hold no untrusted text (no f-string of a wire field)."""
    return _parsed(template, tuple((k, printable(v)) for k, v in values.items()))


def own_markup(template: str) -> Content:
    """The cockpit's own markup (its words, figures and styles: no text from a host,
    trainer or recording, which goes in through `markup`'s values or `text`)."""
    return _parsed(template, ())


@lru_cache(maxsize=4096)
def _parsed(template: str, values: tuple[tuple[str, str], ...]) -> Content:
    """Parsed once per distinct line: a refresh redraws dozens of lines, most of which
    read as they did (a Content is never changed once made, so one serves them all)."""
    return Content.from_markup(template, **dict(values))


def na(value: object, fmt: str = "{}") -> str:
    """Format `value` with `fmt`, or "n/a" when the source did not provide it."""
    if value is None:
        return NA_TEXT
    return fmt.format(value)


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str = "") -> str:
    """Scale large counts (tokens, samples, rates) so they fit a gauge label."""
    if value is None:
        return NA_TEXT
    for factor, prefix in _SI:
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    if float(value).is_integer():
        return f"{int(value)}{unit}"
    return f"{value:.3g}{unit}"


def percent(value: float | None, digits: int = 0) -> str:
    if value is None:
        return NA_TEXT
    return f"{value:.{digits}f}%"


def ratio(used: float | None, total: float | None) -> float | None:
    """Share of `total` in percent, or None when either side is unknown or empty."""
    if used is None or not total:
        return None
    return 100.0 * used / total


def clock(ts: float | None) -> str:
    """Wall-clock time of a timestamp in the operator's local zone."""
    if ts is None:
        return NA_TEXT
    return time.strftime("%H:%M:%S", time.localtime(ts))


def timestamp(ts: float | None) -> str:
    """Date and time of a timestamp in the operator's local zone, for run-level times
    (a run started yesterday must not read as a time of today)."""
    if ts is None:
        return NA_TEXT
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def loss(value: float | None) -> str:
    if value is None:
        return NA_TEXT
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:#.4g}"  # 1.470 beside 1.496, not 1.47: four figures, always
