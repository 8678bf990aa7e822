"""Where each key of a TOML file was written: tomllib forgets positions, and an error
about a config file must name the line to fix.

`TomlLines(text).line("alerts", "disk_warn")` is the line of `disk_warn` in the
`[alerts]` table (or of `alerts.disk_warn = …` at the top), never the line of a key of
that name in another table; a key not written on a line of its own (one inside an inline
table) gets the line of the nearest table or key around it that was, and a key not found
at all gets None, so that a message names no line rather than a wrong one.

The job spec (cockpit.control), the alert thresholds (cockpit.analysis), the keymap and
the themes (cockpit.ui) all find their lines here, so it imports nothing of the cockpit:
it belongs to the lowest layer, beside `cockpit.printable`.

The scan reads the file line by line, as TOML does (a line ends at a newline, never at
U+2028 or a form feed inside a comment or a string). It does not follow multi-line strings
and arrays: a line inside one that reads like a key or a header may be taken for one.
"""

from __future__ import annotations

import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

_PART = r"(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|[A-Za-z0-9_\-]+)"
_DOTTED = rf"{_PART}(?:[ \t]*\.[ \t]*{_PART})*"
# `[table]` or `[[array of tables]]`, with an optional comment after it.
_HEADER = re.compile(rf"^[ \t]*(\[\[?)[ \t]*({_DOTTED})[ \t]*\]\]?[ \t]*(?:#.*)?\r?$")
_KEY = re.compile(rf"^[ \t]*({_DOTTED})[ \t]*=")
_SPLIT = re.compile(rf"[ \t]*({_PART})[ \t]*(?:\.|$)")


def key_parts(dotted: str) -> tuple[str, ...]:
    """The names of a dotted key as written (`a."b.c"` is ("a", "b.c")), its quoted parts
    read as TOML reads them (escapes decoded)."""
    parts = []
    for part in _SPLIT.findall(dotted):
        if part.startswith("'"):
            parts.append(part[1:-1])
        elif part.startswith('"'):
            try:
                parts.append(next(iter(tomllib.loads(f"{part} = 0"))))
            except (tomllib.TOMLDecodeError, StopIteration):
                parts.append(part[1:-1])
        else:
            parts.append(part)
    return tuple(parts)


class TomlLines:
    """The first line each key, table and array of tables was written on, by its path."""

    def __init__(self, text: str) -> None:
        self.keys: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        for number, line in enumerate(text.split("\n"), start=1):
            header = _HEADER.match(line)
            if header:
                table = key_parts(header.group(2))
                self.keys.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                parts = key_parts(key.group(1))
                # `a.b.c = 1` defines the tables a and a.b as well, on that line.
                for end in range(1, len(parts) + 1):
                    self.keys.setdefault(table + parts[:end], number)

    def line(self, *path: str) -> int | None:
        """The line of the key at `path` (a table's names, then the key's), or of the
        nearest table or key around it that was written; None where none was."""
        while path:
            if path in self.keys:
                return self.keys[path]
            path = path[:-1]
        return None

    def dotted(self, name: str) -> int | None:
        """`line` of a dotted name whose parts hold no dot (`recovery.per_cause.oom`)."""
        return self.line(*name.split("."))

