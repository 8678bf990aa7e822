"""Reading what the trainer wrote with bounded memory.

The job's stderr log (`RUN_DIR/logs/JOB.err`) and torchrun's error file are written by
the trainer's processes: a rank that writes tens of GB and then hangs, or an error file
the size of a disk, must not be loaded whole by the daemon. Every read here takes at
most a given number of bytes; what lies beyond is skipped, never buffered.

Nothing is opened that could block the daemon: a FIFO put in a file's place is refused
(opened non-blocking, then checked to be a regular file), as `agent.journal.spool` does
for spool files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

from agent.wire.atomic import open_regular
from agent.wire.protocol import MAX_LOG_LINE

# What a failure's diagnosis reads of the log: the supervisor keeps the last 400 lines
# (`agent.job.output.TAIL_LINES`), each cut to MAX_LOG_LINE, for `recovery.classify`; the
# same span of the log file is all a reader of its new lines (torchrun's "failed
# (exitcode" lines, the ranks' tracebacks) needs: 400 × 4 KiB = 1.6 MiB. (A leaf module:
# `agent.job.recovery` imports it, and output's import of the journal is not wanted there.)
LOG_TAIL_BYTES = 400 * MAX_LOG_LINE


class TooLarge(OSError):
    """A file larger than the reader's limit: not read at all."""


def read_new(path: Path, offset: int, limit: int, keep_head: bool = False
             ) -> Tuple[bytes, int]:
    """What was written to `path` after byte `offset`, at most `limit` bytes of it, and
    the offset to read from next time: (data, next_offset).

    When more than `limit` bytes are new, the last `limit` are read (from the start of
    their first whole line, if one begins within them), or with `keep_head` the first
    `limit`; the rest is skipped and `next_offset` is past it either way. A file shorter
    than `offset` (or missing, or not a regular file) gives (b"", offset), as a plain
    seek-and-read would.
    """
    limit = max(0, int(limit))
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size <= offset:
                return b"", offset
            if size - offset <= limit:
                f.seek(offset)
                data = f.read(size - offset)
                return data, offset + len(data)
            if keep_head:
                f.seek(offset)
                return f.read(limit), size
            # One byte more, before the cut: whether the cut falls at a line's start.
            start = size - limit - 1
            f.seek(start)
            data = f.read(limit + 1)
    except OSError:
        return b"", offset
    end = start + len(data)
    newline = data.find(b"\n")
    # The first line began before the cut (unless the byte before it ends a line): it is
    # no line, it goes. A window without a line's end is one long line's last bytes.
    data = data[newline + 1:] if 0 <= newline < len(data) - 1 else data[1:]
    return data, end


def new_lines(path: Path, offset: int, limit: int = LOG_TAIL_BYTES) -> List[str]:
    """The lines written to `path` after `offset`, as text, at most the last `limit`
    bytes of them (see `read_new`)."""
    data, _end = read_new(path, offset, limit)
    return data.decode("utf-8", "replace").splitlines()


def read_capped(path: Path, limit: int) -> Tuple[bytes, os.stat_result]:
    """All of `path`, a regular file of at most `limit` bytes, and its status (when it was
    opened); `TooLarge` (an OSError) when it is larger, without reading more than
    `limit` + 1 bytes of it."""
    with open_regular(path) as f:
        status = os.fstat(f.fileno())
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge("%s is larger than %d bytes: not read" % (path, limit))
    return data, status
