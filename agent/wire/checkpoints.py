"""Which checkpoint a restart may use: the newest one that is provably complete.

A job killed mid-save leaves a torn checkpoint behind, and resuming from it either crashes
the restart or, worse, silently loads garbage. The contract the agent relies on is a
completion marker `NAME.done` beside the checkpoint, written only once the checkpoint
itself is complete on disk. A checkpoint is whatever shape its framework saves:

- a file (`examples/charlm`, Lightning's `*.ckpt`): the marker holds its `step`, `bytes`
  and optionally `sha256`; it counts when its size (and checksum, when recorded) match;
- a directory (Hugging Face `checkpoint-N/`, FSDP sharded state, any folder of shards):
  the marker holds its `step` and `files`, each file's size; it counts when every listed
  file is there with its size. Sizes, not checksums: hashing gigabytes of shards at every
  save would stall training for seconds, and a torn or half-deleted folder shows in them;
- a `torch.distributed.checkpoint` directory without a marker: its `.metadata` file is
  that library's own commit record (written by the coordinator once every rank's shards
  are), so its presence is the completion marker, and the step comes from the name.

Anything else is skipped for the previous one, and every skip is reported with its reason
so an operator can see why a restart went further back than expected.

The trainer side writes markers with `mark_complete` (the framework adapters call it after
the framework's save returned). Hashing a multi-gigabyte file costs seconds, so verified
results are remembered by (path, size, mtime): a restart loop does not re-hash the same
checkpoint each time.

`RESUME_ENV` and `CHECKPOINT_DIR_ENV` name the environment through which the agent tells
a job where its checkpoints live and which one to resume from (set in `agent.job.launch`,
read by `agent.hook`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from agent.wire import atomic

MARKER_SUFFIX = ".done"
DCP_COMMIT = ".metadata"  # torch.distributed.checkpoint's commit file
RESUME_ENV = "COCKPIT_RESUME_FROM"  # the checkpoint a (re)started job resumes from
CHECKPOINT_DIR_ENV = "COCKPIT_CHECKPOINT_DIR"  # where the agent looks for checkpoints
MAX_MANIFEST_FILES = 1_000_000  # a directory marker listing more is not believed
_STEP_IN_NAME = re.compile(r"(\d+)")

FILE, DIRECTORY, DCP = "file", "dir", "dcp"


class Checkpoint:
    """A verified checkpoint: the file or folder, its step and what vouches for it."""

    def __init__(self, path: Path, step: int, size: Optional[int], sha256: Optional[str],
                 kind: str = FILE) -> None:
        self.path = path
        self.step = step
        self.bytes = size
        self.sha256 = sha256
        self.kind = kind

    @property
    def marker(self) -> Path:
        return marker_path(self.path)

    def as_dict(self) -> dict:
        return {"path": str(self.path), "step": self.step, "bytes": self.bytes,
                "sha256": self.sha256, "kind": self.kind}

    def __repr__(self) -> str:
        return "Checkpoint(%s, step=%d, %s)" % (self.path, self.step, self.kind)


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def _step_of(path: Path, marker: dict) -> Optional[int]:
    step = marker.get("step")
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    return _step_in_name(path)


def _step_in_name(path: Path) -> Optional[int]:
    numbers = _STEP_IN_NAME.findall(path.name)
    return int(numbers[-1]) if numbers else None


# Digests of checkpoint files already read, by (path, size, mtime): a checkpoint is read
# once however often it is inspected. Bounded: an agent up for months inspects one more
# file per restart, pause and fork, and a trainer one more per save; the newest few are
# the ones inspected again.
_verified: "OrderedDict[Tuple[str, int, int], str]" = OrderedDict()
_VERIFIED_KEPT = 256
_verified_lock = threading.Lock()


def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    key = (str(path), size, mtime_ns)
    with _verified_lock:
        known = _verified.get(key)
        if known is not None:
            _verified.move_to_end(key)
    if known is not None:
        return known
    sha = hashlib.sha256()
    with open(str(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    digest = sha.hexdigest()
    with _verified_lock:
        _verified[key] = digest
        while len(_verified) > _VERIFIED_KEPT:
            _verified.popitem(last=False)
    return digest


def inspect(path: Path) -> Tuple[Optional[Checkpoint], Optional[str]]:
    """(the checkpoint, None) when `path` is complete and intact, else (None, why not).

    Any OSError (a link loop, EIO, ESTALE on NFS, EACCES) makes this one checkpoint
    unusable, not the search: the caller goes on to the previous checkpoint.
    """
    try:
        return _inspect(path)
    except OSError as exc:
        return None, "unreadable: %s" % (exc.strerror or exc)


_NO_MARKER = ("no completion marker %s: its save did not finish, or what saved it writes "
              "none (the cockpit's Hugging Face and Lightning callbacks and examples/charlm "
              "do; see docs/hooks.md)")


def _inspect(path: Path) -> Tuple[Optional[Checkpoint], Optional[str]]:
    marker_file = marker_path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, "missing"
    is_dir = stat.S_ISDIR(st.st_mode)
    if not is_dir and not stat.S_ISREG(st.st_mode):
        return None, "neither a file nor a directory"
    try:
        marker = json.loads(marker_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if is_dir and (path / DCP_COMMIT).is_file():
            return _dcp(path)
        return None, _NO_MARKER % marker_file.name
    except (OSError, ValueError) as exc:
        return None, "unreadable completion marker %s: %s" % (marker_file.name, exc)
    if not isinstance(marker, dict):
        return None, "completion marker %s is not a JSON object" % marker_file.name
    step = _step_of(path, marker)
    if step is None:
        return None, "no step in the completion marker or the name"
    if is_dir:
        return _inspect_dir(path, marker, marker_file.name, step)
    size, sha = marker.get("bytes"), marker.get("sha256")
    if isinstance(size, bool) or not isinstance(size, int):
        return None, "completion marker %s lacks 'bytes' (the file's size)" % marker_file.name
    if sha is not None and not isinstance(sha, str):
        return None, "completion marker %s has a 'sha256' that is not text" % marker_file.name
    if st.st_size != size:
        return None, "truncated or extended: %d bytes on disk, %d recorded" % (st.st_size, size)
    if sha is not None and _sha256(path, st.st_size, st.st_mtime_ns) != sha:
        return None, "checksum mismatch (sha256 differs from the completion marker)"
    return Checkpoint(path, step, size, sha, FILE), None


def _inspect_dir(path: Path, marker: dict, marker_name: str, step: int
                 ) -> Tuple[Optional[Checkpoint], Optional[str]]:
    files = marker.get("files")
    if not isinstance(files, dict) or not files or len(files) > MAX_MANIFEST_FILES:
        return None, ("completion marker %s lacks 'files' (the directory's files and sizes); "
                      "a marker for a single file cannot vouch for a directory" % marker_name)
    total = 0
    for rel, size in files.items():
        parts = Path(rel).parts if isinstance(rel, str) else ()
        if not parts or Path(rel).is_absolute() or ".." in parts or "\0" in rel:
            return None, "completion marker %s lists %r, not a path inside the directory" % (
                marker_name, rel)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None, "completion marker %s gives %r a size of %r" % (marker_name, rel, size)
        try:
            st = (path / rel).stat()
        except FileNotFoundError:
            return None, "incomplete: %s is missing (listed in %s)" % (rel, marker_name)
        if st.st_size != size:
            return None, "incomplete: %s has %d bytes on disk, %d recorded" % (
                rel, st.st_size, size)
        total += size
    return Checkpoint(path, step, total, None, DIRECTORY), None


def _dcp(path: Path) -> Tuple[Optional[Checkpoint], Optional[str]]:
    step = _step_in_name(path)
    if step is None:
        return None, ("a torch.distributed.checkpoint directory (%s present) with no step "
                      "in its name and no completion marker" % DCP_COMMIT)
    return Checkpoint(path, step, _tree_bytes(path), None, DCP), None


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(str(path)):
        for name in names:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def mark_complete(path: "str | os.PathLike[str]", step: int, *, checksum: bool = False
                  ) -> Path:
    """Write the completion marker of the checkpoint `path` (a file or a directory) saved
    at `step`; returns the marker's path. Call it once the save has finished, on every
    rank whose files are part of it (a barrier first, then one rank marks).

    A file's marker records its size (and its sha256 with `checksum`, which reads the
    whole file: seconds per gigabyte in the training loop); a directory's records every
    file in it with its size. Written to a temporary name, fsynced, then renamed, so a
    reader never sees half a marker. Markers in the same folder whose checkpoint is gone
    (a framework deleting its older checkpoints) are removed, so they do not pile up.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("a checkpoint's step must be a whole number >= 0, got %r" % (step,))
    path = Path(path)
    st = path.stat()
    marker: Dict[str, object] = {"step": step, "file": path.name}
    if stat.S_ISDIR(st.st_mode):
        files: Dict[str, int] = {}
        for dirpath, _dirs, names in os.walk(str(path)):
            for name in names:
                full = os.path.join(dirpath, name)
                files[os.path.relpath(full, str(path))] = os.stat(full).st_size
        if not files:
            raise ValueError("checkpoint directory %s is empty: nothing to mark complete" % path)
        marker.update(kind=DIRECTORY, bytes=sum(files.values()), files=files)
    elif stat.S_ISREG(st.st_mode):
        marker.update(kind=FILE, bytes=st.st_size)
        if checksum:
            marker["sha256"] = _sha256(path, st.st_size, st.st_mtime_ns)
    else:
        raise ValueError("%s is neither a file nor a directory" % path)
    target = marker_path(path)
    atomic.write_text(target, json.dumps(marker, separators=(",", ":")))
    _prune_orphan_markers(path.parent)
    return target


def _prune_orphan_markers(directory: Path) -> None:
    try:
        names = set(os.listdir(str(directory)))
    except OSError:
        return
    for name in names:
        if name.endswith(MARKER_SUFFIX) and not name.startswith(".") and (
                name[: -len(MARKER_SUFFIX)] not in names):
            try:
                os.unlink(os.path.join(str(directory), name))
            except OSError:
                pass  # another process pruned it first


def candidates(directory: Path) -> List[Tuple[int, Path]]:
    """Checkpoints (files and folders) in `directory`, newest step first, marker-less
    ones included.

    The step is read from the marker when there is one, else from the last number in the
    name, so a torn newest checkpoint is seen (and reported) rather than overlooked.
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
            step = _step_in_name(path)
            if step is None:
                continue
        found.append((step, path))
    found.sort(key=lambda item: (item[0], item[1].name), reverse=True)
    return found


def newest_valid(directory: Path) -> Tuple[Optional[Checkpoint], List[Tuple[str, str]]]:
    """The newest intact checkpoint of `directory` and the (path, why) of each one skipped."""
    skipped: List[Tuple[str, str]] = []
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
    """Copy a verified checkpoint (file or folder) and its marker into `directory` (the
    marker last, so a copy interrupted half-way is never taken for a complete one)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / checkpoint.path.name
    tmp = directory / (".%s.%d.tmp" % (target.name, os.getpid()))
    if checkpoint.path.is_dir():
        shutil.rmtree(str(tmp), ignore_errors=True)
        shutil.copytree(str(checkpoint.path), str(tmp))
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(str(target))
    else:
        shutil.copyfile(str(checkpoint.path), str(tmp))
    os.replace(str(tmp), str(target))
    if checkpoint.marker.exists():  # a DCP folder's commit file came with it
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
