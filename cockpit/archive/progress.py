"""A byte-count progress bar on stderr for uploads and downloads.

Drawn in place on a terminal; on a pipe or a CI log it prints only the final line, so
logs hold one line per file rather than thousands of redraws.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from cockpit.analysis.text import printable

WIDTH = 30
REDRAW_S = 0.1


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


class ByteProgress:
    """Called with each chunk's byte count; `done()` prints the final line."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = printable(label)
        self.total = max(0, total)
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._drawn = 0.0

    def __call__(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if self._tty and now - self._drawn >= REDRAW_S:
            self._drawn = now
            self._stream.write("\r" + self._line())
            self._stream.flush()

    def _line(self) -> str:
        share = self.count / self.total if self.total else 1.0
        filled = int(WIDTH * min(1.0, share))
        return (f"{self.label} [{'#' * filled}{' ' * (WIDTH - filled)}] {share:4.0%} "
                f"{_mib(self.count)}/{_mib(self.total)} MiB")

    def done(self, note: str = "") -> None:
        seconds = time.monotonic() - self._started
        end = f" in {seconds:.1f} s" + (f" ({note})" if note else "")
        self._stream.write(("\r" if self._tty else "") + self._line() + end + "\n")
        self._stream.flush()
