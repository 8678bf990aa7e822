"""The lines of a text input (a JSONL metric log, a wire recording), plain or gzip-
compressed, read within a bound.

A line is read with `readline(limit)`, never whole: a line longer than the limit (a
log that is not line-oriented, a corrupt file, a hostile one) would otherwise be held in
memory entire before anything could refuse it. Its first bytes are dropped, the rest
skipped in bounded chunks, and it is counted with its number. A compressed input that
ends early (a copy cut short, a log still being written) or is corrupt keeps the lines
read before the damage and says where reading stopped: what was read is imported, and
the command's summary does not claim the rest.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from io import BufferedIOBase
from pathlib import Path

from cockpit.importers.records import ImportCounts

SKIP_CHUNK = 1 << 16  # bytes of an overlong line dropped per read


def is_compressed(path: Path) -> bool:
    return path.name.endswith(".gz")


def open_input(path: Path) -> BufferedIOBase:
    return gzip.GzipFile(path, "rb") if is_compressed(path) else open(path, "rb")


def read_lines(path: Path, limit: int, counts: ImportCounts) -> Iterator[tuple[int, bytes]]:
    """(number, line) of each line of `path` of at most `limit` bytes (its newline
    apart), numbered from 1. An overlong line is skipped and counted ("line too long");
    damage that ends the reading is one of `counts.problems`, naming the file and the
    number of lines read before it."""
    number = 0
    with open_input(path) as fh:
        while True:
            try:  # around the reading only: an error of the caller's is not the file's
                line = fh.readline(limit + 1)
                overlong = len(line) > limit and not (
                    len(line) == limit + 1 and line.endswith(b"\n"))
                if overlong:
                    _skip_rest(fh)
            except EOFError:
                counts.problems.append(f"{path}: compressed data cut short after {number} "
                                       "lines")
                return
            except (zlib.error, gzip.BadGzipFile):
                counts.problems.append(f"{path}: compressed data corrupt after {number} "
                                       "lines")
                return
            except OSError as exc:
                counts.problems.append(f"{path}: read failed after {number} lines: "
                                       f"{exc.strerror or exc}")
                return
            if not line:
                return
            number += 1
            if overlong:
                counts.skip("line too long", f"line {number}")
                continue
            yield number, line


def _skip_rest(fh: BufferedIOBase) -> None:
    """Drop the rest of the current line, a chunk at a time."""
    while True:
        chunk = fh.readline(SKIP_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return
