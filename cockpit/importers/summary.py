"""What `cockpit import` says of each input: what it read, what the recording stored of
it, and what was skipped and where, in lines of plain text (the command shows them
through `cockpit.printable`: a tag or a path is the file's text, not the terminal's).

Every figure comes from the counts the import kept: records are those the store says it
stored, not those handed to it; a line it refused or already held is said so.
"""

from __future__ import annotations

from cockpit.importers.records import ImportCounts
from cockpit.importers.sources import Imported

KEPT = "kept in the recording's wire errors"


def summary_lines(item: Imported) -> list[str]:
    """The input's line, then one per reason something was skipped, with where the
    first few were (`ImportCounts.samples`)."""
    c = item.counts
    if item.kind == "wire":
        head = (f"{item.source}: wire, host {item.host}: {c.points} read: {c.records} "
                f"stored, {c.malformed} malformed ({KEPT}), {c.duplicates} duplicates")
    elif c.sent == 0:
        read = f" ({c.points} points read)" if c.points else ""
        head = f"{item.source}: {item.kind}: no metrics found{read}, nothing written"
    else:
        head = (f"{item.source}: {item.kind}, job {item.job or '-'} on host {item.host}: "
                f"{c.points} points -> {c.records} records")
        if c.malformed:
            head += f", {c.malformed} malformed ({KEPT})"
        if c.duplicates:
            head += f", {c.duplicates} duplicates"
    return [head, *_skipped(c)]


def _skipped(c: ImportCounts) -> list[str]:
    out = []
    for why, n in sorted(c.skipped.items()):
        where = c.samples.get(why, [])
        line = f"  skipped {n}: {why}"
        if where:
            line += ": " + ", ".join(where) + (", …" if n > len(where) else "")
        out.append(line)
    return out
