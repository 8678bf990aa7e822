"""Split a chunk of wire lines by record type without parsing the JSON.

The agent writes every record with `t` first and `seq` second (docs/protocol.md), so a
line starting `{"t":"gpu","seq":123,` can be routed and deduplicated from its prefix
alone; only lines that do not follow that layout are parsed with orjson. Parsing the rest
of each line is left to DuckDB's bulk JSON reader, which is many times faster than any
per-line Python work.

Deduplication here relies on the stream delivering each host's seqs in increasing order
(the agent's `stream --from SEQ` guarantees it): a line whose seq is not above the highest
seq seen so far is a duplicate. That makes a resent range, and a chunk that straddles the
committed high-water mark, cost one integer comparison per line.

Everything here is untrusted (`cockpit.ingest.bounds`): a seq beyond `SEQ_MAX` makes its
line malformed, and the fast paths, which read only a chunk's first and last seq to
decide what is new, first check that every seq lies between those two, once, rising
within each type (a chunk of seqs 30, 30, 25, 31 would otherwise store four rows); a
chunk that does not takes the line-by-line route, where the late and repeated seqs are
dropped and counted as duplicates.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import orjson

from agent.wire.protocol import STREAM_HEADER
from cockpit.ingest.bounds import SEQ_DIGITS, SEQ_MAX, seq_ok

_PREFIX = b'{"t":"'
_SEQ_KEY = b'","seq":'
_TYPE_NAMES: dict[bytes, str] = {}  # decoded type names seen, to decode each only once


@dataclass
class Malformed:
    """A line that cannot be stored, with the reason a user will read."""

    error: str
    line: bytes


@dataclass
class Segment:
    """Lines that follow one stream header (or the start of the chunk).

    `groups` maps a wire type to its lines (each without the newline, each starting with
    `{`); `seqs` holds the seq of each line in the same order, as the agent numbered it;
    `joined` may hold a type's lines already joined by newlines.
    """

    header: dict[str, object] | None = None
    groups: dict[str, list[bytes]] = field(default_factory=dict)
    seqs: dict[str, Sequence[int]] = field(default_factory=dict)
    joined: dict[str, bytes] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)
    duplicates: int = 0
    start_mark: int = 0  # the mark after the header (the journal's seq space)
    end_mark: int | None = None  # the seq of the last accepted line, if any


def _slow_route(line: bytes) -> tuple[str, int] | Malformed:
    """Type and seq of a line that does not have the canonical prefix."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        # Python's reader takes what orjson refuses of otherwise sound records (an
        # integer past 64 bits, Infinity): such a line goes on to the store, which keeps
        # it without those values (`cockpit.store.repair`).
        try:
            record = json.loads(line)
        except ValueError:
            return Malformed(f"not JSON: {exc}", line)
        except RecursionError:  # orjson's own limit passed, and Python's then too
            return Malformed("not JSON: nested too deeply", line)
    if not isinstance(record, dict):
        return Malformed(f"not a JSON object but {type(record).__name__}", line)
    t = record.get("t")
    if not isinstance(t, str) or not t:
        return Malformed("no record type: field `t` missing or not a string", line)
    if len(t) > 64:
        return Malformed(f"record type {_short(t)} is longer than 64 characters", line)
    seq = record.get("seq")
    if not seq_ok(seq):
        # (orjson reads an integer past 64 bits as a float)
        return Malformed(f"record of type {_short(t)} has no integer `seq` in "
                         f"0..{SEQ_MAX} (got {_short(seq)})", line)
    assert isinstance(seq, int)
    return t, seq


def _short(value: object) -> str:
    """A value for a message, cut short (a hostile record may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fast_route(line: bytes) -> tuple[str, int] | None:
    """Type and seq from the canonical prefix, or None when the line has another layout."""
    if not line.startswith(_PREFIX):
        return None
    end = line.find(b'"', 6)
    if end < 0 or line[end : end + 8] != _SEQ_KEY:
        return None
    start = end + 8
    stop = line.find(b",", start)
    if stop < 0:
        stop = line.find(b"}", start)
    digits = line[start:stop]
    if stop < 0 or not digits.isdigit() or len(digits) > SEQ_DIGITS:
        return None
    t = _TYPE_NAMES.get(line[6:end])
    if t is None:
        try:
            t = line[6:end].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if "\\" in t:
            return None
        if len(_TYPE_NAMES) < 256:
            _TYPE_NAMES[line[6:end]] = t
    return t, int(digits)


def route_chunk(
    chunk: bytes, high_water: int, on_header: Callable[[dict[str, object], int], int]
) -> list[Segment]:
    """Group a chunk's lines by type, dropping seqs at or below the running mark.

    The mark starts at `high_water` and rises with every accepted line. A stream header
    starts a new segment (its journal may differ from the previous one's) and
    `on_header(header, mark)` returns the mark to continue with: the same journal keeps
    the mark, a new journal starts again from the header's `from`.
    """
    segments = [Segment()]
    current = segments[0]
    running = high_water
    groups = current.groups
    seqs = current.seqs
    for line in chunk.split(b"\n"):
        if not line or line.isspace():
            continue
        routed = _fast_route(line)
        if routed is None:
            slow = _slow_route(line)
            if isinstance(slow, Malformed):
                current.malformed.append(slow)
                continue
            routed = slow
            line = line.strip()  # valid JSON: what strip() removes is JSON whitespace
        t, seq = routed
        if t == STREAM_HEADER:
            try:
                header = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                current.malformed.append(Malformed(f"stream header is not JSON: {exc}", line))
                continue
            current = Segment(header=header)
            segments.append(current)
            groups = current.groups
            seqs = current.seqs
            running = on_header(header, running)
            current.start_mark = running
            continue
        if seq <= running:
            current.duplicates += 1
            continue
        running = seq
        group = groups.get(t)
        if group is None:
            groups[t] = group = []
            seqs[t] = []
        group.append(line)
        cast(list[int], seqs[t]).append(seq)  # this route builds each as a list
        current.end_mark = running
    return [s for s in segments if s.header is not None or s.groups or s.malformed
            or s.duplicates]


def _lines_of(chunk: bytes) -> list[bytes]:
    lines = chunk.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def _canonical_groups(lines: list[bytes]) -> Segment | None:
    """The lines grouped by type when every line is canonical, none is a stream header,
    and every seq is in range, once, within those of the first and last line; None
    otherwise.

    Lines are grouped by the three bytes after `{"t":"` (distinct for every protocol
    type), and each group is then checked in C, by counting its full
    `{"t":"TYPE","seq":` prefixes in the joined group. The result has no `end_mark`:
    whether its lines are new depends on the mark the caller holds, which the fast
    paths compare with the first line's seq only: hence the seq check (`_group_seqs`).
    """
    if not lines:
        return None
    head, tail = _fast_route(lines[0]), _fast_route(lines[-1])
    if head is None or tail is None or tail[1] < head[1]:
        return None
    groups: defaultdict[bytes, list[bytes]] = defaultdict(list)
    for line in lines:
        groups[line[6:9]].append(line)
    segment = Segment()
    seen = 0
    every: set[int] = set()
    for group in groups.values():
        routed = _fast_route(group[0])
        if routed is None or routed[0] == STREAM_HEADER:
            return None
        name = routed[0]
        prefix = _PREFIX + group[0][6 : 6 + len(name.encode())] + _SEQ_KEY
        joined = b"\n".join(group)
        if joined.count(b"\n" + prefix) != len(group) - 1:
            return None
        seqs = _group_seqs(group, len(prefix), head[1], tail[1])
        if seqs is None:
            return None
        seen += len(seqs)
        every.update(seqs)
        segment.groups[name] = group
        segment.seqs[name] = seqs
        segment.joined[name] = joined
    if len(every) != seen:  # a seq twice, in two types
        return None
    return segment


def _group_seqs(group: list[bytes], start: int, head: int, tail: int) -> list[int] | None:
    """The seqs of one type's canonical lines (each starting at `start`, after the
    group's common prefix), when they strictly increase within head..tail; else None.

    The one per-line step of the fast paths (a slice and an int per line, ~1.5 times
    what grouping the line costs): without it, a chunk of seqs 30, 30, 25, 31 stored
    four rows. A line whose slice is not a number sends the chunk the careful way.
    """
    try:
        seqs = [int(line[start : line.find(b",", start)]) for line in group]
    except ValueError:
        return None
    if seqs[0] < head or seqs[-1] > tail or not all(map(operator.lt, seqs, seqs[1:])):
        return None
    return seqs


def _fast_lines(lines: list[bytes], high_water: int) -> Segment | None:
    """The chunk's lines grouped by type reading only each line's type, or None when the
    chunk needs more than that.

    The common chunk (canonical lines, no stream header, wholly above the mark) needs no
    per-line seq parsing: seqs arrive in order, so the first and last lines decide
    whether anything is a duplicate. Lines whose prefix looks canonical but whose JSON is
    broken are left for the strict bulk reader, whose failure sends the chunk through
    `route_chunk` and the careful load path.
    """
    if not lines:
        return None
    head = _fast_route(lines[0])
    if head is None or head[1] <= high_water:
        return None
    segment = _canonical_groups(lines)
    if segment is not None:
        segment.end_mark = _seq_of(lines[-1])
    return segment


@dataclass
class Grouped:
    """A chunk's lines grouped by type ahead of the flush (`pregroup`), with the seqs of
    its first and last line: what the writer needs to store it without touching its
    lines again, once it knows the host's mark."""

    segment: Segment
    head: int
    tail: int


def pregroup(chunk: bytes) -> Grouped | None:
    """`_canonical_groups` of a plain chunk (canonical lines, no stream header), on the
    thread that received it: that work needs no mark, so it is done while the writer
    is busy with the previous flush. None when the chunk needs the full routing."""
    if chunk.startswith(_PREFIX + STREAM_HEADER.encode() + b'"'):
        return None
    lines = _lines_of(chunk)
    segment = _canonical_groups(lines)
    if segment is None:
        return None
    return Grouped(segment, _seq_of(lines[0]), _seq_of(lines[-1]))


def merge_grouped(parts: Sequence[Grouped]) -> Grouped | None:
    """One host's pre-grouped chunks of a flush as one, or None when their seqs do not
    follow each other (a resend, a reconnect): such chunks take the full routing."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if any(b.head <= a.tail for a, b in itertools.pairwise(parts)):
        return None
    merged = Segment()
    for part in parts:
        for name, lines in part.segment.groups.items():
            group = merged.groups.get(name)
            if group is None:
                merged.groups[name] = group = []
            group.extend(lines)
    for name in merged.groups:
        merged.seqs[name] = [seq for part in parts
                             for seq in part.segment.seqs.get(name, ())]
        merged.joined[name] = b"\n".join(
            part.segment.joined[name] for part in parts if name in part.segment.joined)
    return Grouped(merged, parts[0].head, parts[-1].tail)


def _seq_of(line: bytes) -> int:
    routed = _fast_route(line)
    assert routed is not None, "checked canonical"
    return routed[1]


def split_chunk(
    chunk: bytes, high_water: int, on_header: Callable[[dict[str, object], int], int]
) -> list[Segment]:
    """`route_chunk`'s segments, taking the fast path for the chunks that allow it.

    Besides the plain chunk of `_fast_lines`, that is the first chunk of every connection:
    a stream header followed by canonical lines (after a reconnect, the whole backlog).
    The header goes through `route_chunk` (it may reset the journal or report lost
    records); the lines after it are grouped by type without per-line work when they all
    lie above the mark the header leaves, and routed line by line otherwise.
    """
    lines = _lines_of(chunk)  # split once, for both fast paths
    fast = _fast_lines(lines, high_water)
    if fast is not None:
        return [fast]
    if not chunk.startswith(_PREFIX + STREAM_HEADER.encode() + b'"'):
        return route_chunk(chunk, high_water, on_header)
    body = _canonical_groups(lines[1:])
    if body is None:
        return route_chunk(chunk, high_water, on_header)
    cut = len(lines[0]) + 1
    lines = lines[1:]
    segments = route_chunk(chunk[:cut], high_water, on_header)
    target = segments[-1] if segments else Segment()
    mark = target.start_mark if target.header is not None else high_water
    if _seq_of(lines[0]) > mark:
        target.groups, target.seqs, target.joined = body.groups, body.seqs, body.joined
        target.end_mark = _seq_of(lines[-1])
    else:
        # A resend straddling the mark: no header follows, so at most one segment.
        for rest in route_chunk(chunk[cut:], mark, on_header):
            target.groups, target.seqs = rest.groups, rest.seqs
            target.duplicates += rest.duplicates
            target.malformed += rest.malformed
            target.end_mark = rest.end_mark
    keep = target.header is not None or target.groups or target.malformed or target.duplicates
    return [target] if keep else []
