"""Crash-safe checkpoints: a checkpoint either exists completely or is not used.

A kill can land at any instant, so a checkpoint is written to a temporary file, fsynced
and renamed into place; only then is a completion marker (`NAME.done`, JSON with the
step, size and sha256) written the same way. Resuming takes the newest checkpoint whose
marker exists and whose file still has that size and checksum; anything else (torn,
truncated, bit-rotted, marker missing) is skipped with a log line saying why. Loading
always uses `torch.load(..., weights_only=True)`: a checkpoint is data, never code.

For a resume that continues bit for bit, a checkpoint also holds every random
generator's state of every rank (`capture_rng` / `restore_rng`): Python's `random`,
NumPy's global generator when NumPy is loaded, torch's CPU generator and the CUDA
generator of the rank's device. They are stored as tensors and plain numbers, which
`weights_only` loading allows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for resuming; the message names it and why."""


@dataclass(frozen=True)
class Saved:
    path: Path
    step: int
    bytes: int
    sha256: str
    seconds: float


class _HashingFile:
    """A write-only file wrapper that hashes what goes through it (no second read pass)."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, writer: Callable[[Any], None]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:08d}.pt"


def save(directory: Path, step: int, state: dict[str, Any], keep: int) -> Saved:
    """Write `state` as the checkpoint of `step`, then prune to the newest `keep`."""
    if keep < 1:
        raise CheckpointError(f"checkpoint.keep must be at least 1, got {keep}")
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / checkpoint_name(step)
    digest: dict[str, Any] = {}

    def write_state(f: Any) -> None:
        hashing = _HashingFile(f)
        torch.save(state, hashing)
        digest["sha256"] = hashing.sha.hexdigest()
        digest["bytes"] = hashing.size

    _write_atomic(path, write_state)
    marker = {"step": step, "file": path.name, "bytes": digest["bytes"],
              "sha256": digest["sha256"], "saved_at": time.time()}  # fmt: skip
    _write_atomic(_marker(path), lambda f: f.write(json.dumps(marker).encode()))
    _prune(directory, keep)
    return Saved(path, step, digest["bytes"], digest["sha256"], time.perf_counter() - started)


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".done")


def _candidates(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found, reverse=True)


def _prune(directory: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints; drop older ones and old debris.

    Debris: checkpoints older than a complete one that can never be resumed (torn by a
    crash before their marker, or cut short after it) and temporary files left by a
    killed process. A torn checkpoint does not count toward `keep`: otherwise it would
    push out an intact one and leave fewer than `keep` to resume from. Only the marker
    and the size are checked here (hashing every kept file at every save would cost a
    full read of each); a same-size corruption is found, and skipped, at resume.
    """
    candidates = _candidates(directory)
    complete = [(s, p) for s, p in candidates if problem(p, checksum=False) is None]
    kept = {path for _step, path in complete[:keep]}
    if complete:
        newest = complete[0][0]
        for step, path in candidates:
            if step < newest and path not in kept:
                _marker(path).unlink(missing_ok=True)
                path.unlink(missing_ok=True)
    own = f".{os.getpid()}.tmp"
    for entry in directory.glob(".ckpt-*.tmp"):
        if not entry.name.endswith(own):
            entry.unlink(missing_ok=True)


def problem(path: Path, checksum: bool = True) -> str | None:
    """Why `path` is not a usable checkpoint, or None when it is complete and intact.

    `checksum=False` checks the marker and the size only, without reading the file.
    """
    marker_path = _marker(path)
    if not path.exists():
        return "file missing"
    if not marker_path.exists():
        return "no completion marker (the save did not finish)"
    try:
        marker = json.loads(marker_path.read_text())
        expected_size, expected_sha = int(marker["bytes"]), str(marker["sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable completion marker {marker_path.name}: {exc}"
    size = path.stat().st_size
    if size != expected_size:
        return f"truncated or extended: {size} bytes on disk, {expected_size} recorded"
    if not checksum:
        return None
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    if sha.hexdigest() != expected_sha:
        return "checksum mismatch (sha256 differs from the completion marker)"
    return None


def _load(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the state, None), or (None, why `path` cannot be resumed from)."""
    why = problem(path)
    if why is not None:
        return None, why
    try:
        return torch.load(path, map_location="cpu", weights_only=True), None
    except Exception as exc:
        # A marker vouches for the bytes, not for what they are: a file saved by another
        # program, or damaged before its checksum was taken, fails in torch.load's
        # unpickler with whatever error it meets first.
        first = (str(exc).strip().splitlines() or [""])[0]
        return None, f"cannot be loaded ({type(exc).__name__}: {first})"


def load_latest(directory: Path, log: Callable[[str], None]
                ) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in `directory` that is intact and loads, with its state;
    each skipped one is logged with why."""
    for _step, path in _candidates(directory):
        state, why = _load(path)
        if why is None:
            return path, state  # type: ignore[return-value]
        log(f"skipping checkpoint {path}: {why}")
    return None


def latest_valid(directory: Path, log: Callable[[str], None]) -> Path | None:
    """The newest intact, loadable checkpoint in `directory`; skipped ones are logged."""
    found = load_latest(directory, log)
    return None if found is None else found[0]


def capture_rng(device: torch.device) -> dict[str, Any]:
    """This process's random generator states, as data `weights_only` loading accepts.

    Python's `random` state is a tuple of ints; NumPy's (only when something imported
    NumPy: a trainer that never did has no state to keep) becomes a tensor plus numbers.
    """
    version, words, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, torch.tensor(words, dtype=torch.int64), gauss],
        "torch_cpu": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["torch_cuda"] = torch.cuda.get_rng_state(device)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = [name, torch.from_numpy(keys.astype("int64")), int(pos),
                          int(has_gauss), float(cached)]  # fmt: skip
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Set the generators `capture_rng` saved; raises CheckpointError when one does not fit.

    A checkpoint vouched for by its marker can still come from another program, so each
    part is checked for its type and size, and an error names the part.
    """
    try:
        version, words, gauss = state["python"]
        python = (int(version), tuple(int(w) for w in words.tolist()),
                  None if gauss is None else float(gauss))  # fmt: skip
        cpu = state["torch_cpu"]
        if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8 or (
                cpu.shape != torch.get_rng_state().shape):
            raise TypeError("torch_cpu is not a torch CPU generator state")
        cuda = state.get("torch_cuda") if device.type == "cuda" else None
        numpy = sys.modules.get("numpy")
        random.setstate(python)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
        if numpy is not None and "numpy" in state:
            name, keys, pos, has_gauss, cached = state["numpy"]
            numpy.random.set_state((str(name), keys.numpy().astype(numpy.uint32), int(pos),
                                    int(has_gauss), float(cached)))  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise CheckpointError(f"random generator state does not fit: {exc}") from None


def load(path: Path) -> dict[str, Any]:
    """Load a verified checkpoint as plain data (tensors, numbers, strings, containers)."""
    state, why = _load(path)
    if why is not None:
        raise CheckpointError(f"checkpoint {path} is not usable: {why}")
    return state  # type: ignore[return-value]
