"""The records of a TFRecord file (a TensorBoard event file), read so that damage costs
only the damaged record.

A record is: uint64 length, uint32 masked CRC-32C of the length, the data, uint32
masked CRC-32C of the data (little-endian). TensorBoard's own reader stops at the first
bad record, taking it for a file still being written, and leaves every later record
unread and unmentioned; it also trusts the length, so a corrupt one asks for a buffer of
2**62 bytes. Here, instead:

- a record whose data fails its CRC is skipped and counted, and reading goes on after
  it (its length, checked by the header's CRC, still says where the next one starts);
- a record longer than `MAX_RECORD` (no scalar event is within a factor of a thousand
  of it) is skipped without being read, and counted;
- a header whose CRC fails (garbage bytes, a torn write) or whose length runs past the
  end of the file gives no next record: the bytes after it are searched for the next
  valid header (the first place whose 8-byte length, at most `MAX_RECORD` and not 0,
  checks against the CRC after it), and the bytes passed over are counted;
- what cannot be read to the end (a last record cut short, garbage with no valid record
  after it) is one of `ImportCounts.problems`, naming the file, the offset and the
  bytes left unread.

Each count's sample names the file and the record's byte offset. Nothing is held in
memory but the record at hand (a search reads a window of `WINDOW` bytes at a time, and
runs at the speed of `bytes.find`); a file that shrinks while it is read reads as one
cut short.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from cockpit.importers.records import ImportCounts

MAX_RECORD = 64 << 20  # below 2**32, which `_candidate` relies on
HEADER = 12  # length and its CRC
FOOTER = 4  # the data's CRC
WINDOW = 1 << 20  # bytes searched at a time for the next record
_LENGTH = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_ZEROS = b"\0\0\0\0"
_NONZERO = re.compile(rb"[^\x00]")

Crc = Callable[[bytes], int]


def _masked_crc32c() -> Crc:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    return masked_crc32c


def read_records(path: Path, counts: ImportCounts) -> Iterator[tuple[int, bytes]]:
    """(byte offset, data) of each record of `path` whose CRCs check, in file order."""
    crc = _masked_crc32c()
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        yield from _records(fh, size, path, counts, crc)


def _at(fh: BinaryIO, pos: int, n: int) -> bytes:
    fh.seek(pos)
    return fh.read(n)


def _records(fh: BinaryIO, size: int, path: Path, counts: ImportCounts,
             crc: Crc) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos < size:
        length = _length(fh, pos, size, crc)
        if length is None:  # not a record's header: find the next one
            cut = _cut_short(fh, pos, size, crc)
            after = _resync(fh, pos + 1, size, crc)
            if after is None:
                counts.problems.append(
                    f"{path}: {size - pos} bytes from offset {pos} unread: "
                    + ("the file ends inside a record" if cut
                       else "no valid record after a bad record header"))
                return
            counts.skip("record length past the end of the file" if cut
                        else "bad record header",
                        f"{path.name} offset {pos} ({after - pos} bytes passed over)")
            pos = after
            continue
        if length > MAX_RECORD:
            counts.skip("record too large", f"{path.name} offset {pos} ({length} bytes)")
        else:
            body = _at(fh, pos + HEADER, length + FOOTER)
            if len(body) < length + FOOTER:  # the file shrank since its size was taken
                counts.problems.append(f"{path}: {size - pos} bytes from offset {pos} "
                                       "unread: the file ends inside a record")
                return
            data = body[:length]
            if crc(data) == _CRC.unpack_from(body, length)[0]:
                yield pos, data
            else:
                counts.skip("record failed its CRC check", f"{path.name} offset {pos}")
        pos += HEADER + length + FOOTER


def _length(fh: BinaryIO, pos: int, size: int, crc: Crc) -> int | None:
    """The length of the record at `pos`, or None when its header is not valid: too
    short, failing its CRC, or running past the end of the file."""
    head = _at(fh, pos, HEADER)
    if len(head) < HEADER:
        return None
    length, want = _LENGTH.unpack(head)
    if crc(head[:8]) != want or pos + HEADER + length + FOOTER > size:
        return None
    return int(length)


def _cut_short(fh: BinaryIO, pos: int, size: int, crc: Crc) -> bool:
    """Whether the bytes from `pos` are the start of a record the file ends inside of
    (a writer stopped mid-record), not garbage."""
    head = _at(fh, pos, HEADER)
    if len(head) < HEADER:
        return True  # too short to tell: a header being written
    length, want = _LENGTH.unpack(head)
    return bool(crc(head[:8]) == want and pos + HEADER + length + FOOTER > size)


def _resync(fh: BinaryIO, start: int, size: int, crc: Crc) -> int | None:
    """The offset of the first valid record header at or after `start`, if any: the
    bytes are searched a window at a time, each window read with the 11 bytes after it
    (a header that begins in it may end past it)."""
    base = start
    while base + HEADER <= size:
        found = _candidate(_at(fh, base, WINDOW + HEADER - 1), base, size, crc)
        if found is not None:
            return found
        base += WINDOW
    return None


def _candidate(buf: bytes, base: int, size: int, crc: Crc) -> int | None:
    """The first valid header beginning in the window's first WINDOW bytes of `buf` (the
    file's bytes from `base`), as a file offset.

    A length of at most MAX_RECORD has its high four bytes zero: candidates are found
    with `find`, and only they are checked against their CRC. In a run of zeros (a file
    preallocated and never written) every place is such a candidate, but none with a
    length above 0: the search jumps to the run's end."""
    i = 4  # where a candidate's high four length bytes begin
    while True:
        i = buf.find(_ZEROS, i)
        at = i - 4
        if i < 0 or i + 8 > len(buf) or at >= WINDOW:
            return None
        low = buf[at:i]
        if low == _ZEROS:
            nonzero = _NONZERO.search(buf, i)
            if nonzero is None:
                return None
            i = nonzero.start() + 1
            continue
        length = int.from_bytes(low, "little")
        if (length <= MAX_RECORD and base + at + HEADER + length + FOOTER <= size
                and crc(buf[at:at + 8]) == _CRC.unpack_from(buf, i + 4)[0]):
            return base + at
        i += 1
