"""Which checkpoint a restart may use: the newest one that is provably complete.

A job killed mid-save leaves a torn file behind, and resuming from it either crashes the
restart or, worse, silently loads garbage. The contract the agent relies on (the one
`examples/charlm/checkpoint.py` writes) is a completion marker `NAME.done` next to the
checkpoint file, written only after the file itself was fsynced and renamed into place:
JSON with `step`, `bytes` and `sha256`. A checkpoint counts only when its marker exists,
its size matches and its checksum matches; anything else is skipped for the previous one,
and every skip is reported with its reason so an operator can see why a restart went
further back than expected.

Hashing a multi-gigabyte file costs seconds, so verified results are remembered by
(path, size, mtime): a restart loop does not re-hash the same checkpoint each time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

MARKER_SUFFIX = ".done"
_STEP_IN_NAME = re.compile(r"(\d+)")


class Checkpoint:
    """A verified checkpoint: the file, its step and the marker that vouches for it."""

    def __init__(self, path: Path, step: int, size: int, sha256: str) -> None:
        self.path = path
        self.step = step
        self.bytes = size
        self.sha256 = sha256

    @property
    def marker(self) -> Path:
        return marker_path(self.path)

    def as_dict(self) -> dict:
        return {"path": str(self.path), "step": self.step, "bytes": self.bytes,
                "sha256": self.sha256}

    def __repr__(self) -> str:
        return "Checkpoint(%s, step=%d)" % (self.path, self.step)


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def _step_of(path: Path, marker: dict) -> Optional[int]:
    step = marker.get("step")
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    numbers = _STEP_IN_NAME.findall(path.name)
    return int(numbers[-1]) if numbers else None


_verified: Dict[Tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    key = (str(path), size, mtime_ns)
    with _verified_lock:
        known = _verified.get(key)
    if known is not None:
        return known
    sha = hashlib.sha256()
    with open(str(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    digest = sha.hexdigest()
    with _verified_lock:
        _verified[key] = digest
    return digest


def inspect(path: Path) -> Tuple[Optional[Checkpoint], Optional[str]]:
    """(the checkpoint, None) when `path` is complete and intact, else (None, why not).

    Any OSError (a link loop, EIO, ESTALE on NFS, EACCES) makes this one file unusable,
    not the search: the caller goes on to the previous checkpoint.
    """
    try:
        return _inspect(path)
    except OSError as exc:
        return None, "unreadable: %s" % (exc.strerror or exc)


def _inspect(path: Path) -> Tuple[Optional[Checkpoint], Optional[str]]:
    marker_file = marker_path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, "file missing"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    try:
        marker = json.loads(marker_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no completion marker (the save did not finish)"
    except (OSError, ValueError) as exc:
        return None, "unreadable completion marker %s: %s" % (marker_file.name, exc)
    if not isinstance(marker, dict):
        return None, "completion marker %s is not a JSON object" % marker_file.name
    size, sha = marker.get("bytes"), marker.get("sha256")
    if not isinstance(size, int) or not isinstance(sha, str):
        return None, "completion marker %s lacks 'bytes' and 'sha256'" % marker_file.name
    if st.st_size != size:
        return None, "truncated or extended: %d bytes on disk, %d recorded" % (st.st_size, size)
    if _sha256(path, st.st_size, st.st_mtime_ns) != sha:
        return None, "checksum mismatch (sha256 differs from the completion marker)"
    step = _step_of(path, marker)
    if step is None:
        return None, "no step in the completion marker or the file name"
    return Checkpoint(path, step, size, sha), None


def candidates(directory: Path) -> List[Tuple[int, Path]]:
    """Checkpoint files in `directory`, newest step first (marker-less ones included).

    The step is read from the marker when there is one, else from the last number in the
    file name, so a torn newest file is seen (and reported) rather than overlooked.
    """
    try:
        entries = list(os.scandir(str(directory)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = {e.name for e in entries}
    found = []
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name.endswith(MARKER_SUFFIX) or name.endswith(".tmp"):
            continue
        path = Path(entry.path)
        step = None
        if name + MARKER_SUFFIX in names:
            try:
                marker = json.loads(marker_path(path).read_text(encoding="utf-8"))
                step = _step_of(path, marker if isinstance(marker, dict) else {})
            except (OSError, ValueError):
                step = None
        if step is None:
            numbers = _STEP_IN_NAME.findall(name)
            if not numbers:
                continue
            step = int(numbers[-1])
        found.append((step, path))
    found.sort(key=lambda item: (item[0], item[1].name), reverse=True)
    return found


def newest_valid(directory: Path) -> Tuple[Optional[Checkpoint], List[Tuple[str, str]]]:
    """The newest intact checkpoint of `directory` and the (path, why) of each one skipped."""
    skipped = []
    for _step, path in candidates(directory):
        checkpoint, why = inspect(path)
        if checkpoint is not None:
            return checkpoint, skipped
        skipped.append((str(path), why or "unusable"))
    return None, skipped


def at_step(directory: Path, step: int) -> Tuple[Optional[Checkpoint], Optional[str]]:
    """The intact checkpoint of exactly `step`, or (None, why there is none)."""
    for found_step, path in candidates(directory):
        if found_step == step:
            return inspect(path)
    return None, "no checkpoint of step %d in %s" % (step, directory)


def copy_to(checkpoint: Checkpoint, directory: Path) -> Checkpoint:
    """Copy a verified checkpoint and its marker into `directory` (the marker last, so a
    copy interrupted half-way is never taken for a complete one)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / checkpoint.path.name
    tmp = directory / (".%s.%d.tmp" % (target.name, os.getpid()))
    shutil.copyfile(str(checkpoint.path), str(tmp))
    os.replace(str(tmp), str(target))
    marker_tmp = directory / (".%s%s.%d.tmp" % (target.name, MARKER_SUFFIX, os.getpid()))
    shutil.copyfile(str(checkpoint.marker), str(marker_tmp))
    os.replace(str(marker_tmp), str(marker_path(target)))
    copied, why = inspect(target)
    if copied is None:
        raise OSError("copy of %s to %s is not intact: %s" % (checkpoint.path, target, why))
    return copied


def set_aside(directory: Path) -> Tuple[Optional[Path], List[str], List[Tuple[str, str]]]:
    """Move every checkpoint of `directory` (with its marker) into a sibling folder named
    for the newest step among them; returns (that folder or None when there was nothing,
    the files moved, the (path, why) of each that could not be).

    For a fresh start in a checkpoint dir an earlier run left behind: every restart takes
    the newest valid checkpoint there, which would be the earlier run's (another step,
    perhaps another model). Moved, not deleted. Agents of several hosts sharing the dir
    may race to do it: a file another one moved first is simply gone from here."""
    found = candidates(directory)
    if not found:
        return None, [], []
    target = directory.parent / ("%s.earlier-run-to-step-%d" % (directory.name, found[0][0]))
    moved: List[str] = []
    failed: List[Tuple[str, str]] = []
    for _step, path in found:
        for item in (path, marker_path(path)):
            try:
                target.mkdir(parents=True, exist_ok=True)
                os.replace(str(item), str(target / item.name))
            except FileNotFoundError:
                continue  # no marker (a torn file), or another host's agent moved it
            except OSError as exc:
                failed.append((str(item), exc.strerror or str(exc)))
                continue
            moved.append(str(item))
    return target, moved, failed
