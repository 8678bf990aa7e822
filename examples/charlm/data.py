"""Training text every machine already has: the Python standard library's own source.

Prepared once into a sharded random-access format: `SPLIT-NNNNN.bin` files of uint8
character codes plus `index.json` (shard list, sizes, checksums, split rule and a
`data_version` hash). Nothing is downloaded and no third-party text ships with the
project.

- The validation split is fixed before training, per document: a file goes to
  validation when sha256(relative path) falls below `val_per_mille` / 1000, so the split
  does not depend on file order, rank count or seed.
- Shuffling happens at read time: each rank draws random windows from the memory-mapped
  shards with a generator seeded by (seed, rank, epoch); the batch of a step is a pure
  function of (seed, rank, step), so a resumed run reads exactly what it would have.
"""

from __future__ import annotations

import bisect
import fcntl
import hashlib
import json
import mmap
import os
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

FORMAT = "charlm-shards/1"
VOCAB_SIZE = 128  # ASCII; other bytes become '?'
DOC_SEPARATOR = b"\x00"
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}
_ASCII = bytes(b if b < VOCAB_SIZE else ord("?") for b in range(256))


class DataError(ValueError):
    """The corpus or its prepared shards cannot be used; the message says what to do."""


@dataclass(frozen=True)
class DataConfig:
    dir: Path
    source: str  # "stdlib" or a directory of *.py files
    max_bytes: int
    shard_bytes: int
    val_per_mille: int


def source_root(source: str) -> Path:
    return Path(sysconfig.get_paths()["stdlib"]) if source == "stdlib" else Path(source)


def _documents(root: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath) / name
                yield path.relative_to(root).as_posix(), path


def is_validation(relpath: str, val_per_mille: int) -> bool:
    bucket = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") % 1000
    return bucket < val_per_mille


def _params(cfg: DataConfig) -> dict:
    return {"format": FORMAT, "source": str(source_root(cfg.source)),
            "python": sys.version.split()[0], "max_bytes": cfg.max_bytes,
            "shard_bytes": cfg.shard_bytes, "val_per_mille": cfg.val_per_mille}  # fmt: skip


def prepare(cfg: DataConfig, log=print) -> dict:
    """Build the shards unless an index with the same parameters exists; returns the index.

    Several ranks (and several jobs) may call this at once on one host: a file lock lets
    one build while the others wait and then read its index.
    """
    if not 0 < cfg.val_per_mille < 1000:
        raise DataError(f"data.val_per_mille must be in 1..999, got {cfg.val_per_mille}")
    if cfg.shard_bytes < 4096:
        raise DataError(f"data.shard_bytes must be at least 4096, got {cfg.shard_bytes}")
    root = source_root(cfg.source)
    if not root.is_dir():
        raise DataError(f"data.source {cfg.source!r}: {root} is not a directory")
    cfg.dir.mkdir(parents=True, exist_ok=True)
    index_path = cfg.dir / "index.json"
    with open(cfg.dir / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if index_path.exists():
            index = json.loads(index_path.read_text())
            if index.get("params") == _params(cfg):
                return index
        index = _build(cfg, root)
        tmp = index_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(index, indent=1))
        os.replace(tmp, index_path)
    log(
        f"prepared {index['documents']} files from {root}: "
        f"{index['tokens']['train']} train / {index['tokens']['val']} val characters "
        f"in {len(index['shards'])} shards (data_version {index['data_version'][:12]})"
    )
    return index


class _ShardSink:
    def __init__(self, directory: Path, split: str, shard_bytes: int) -> None:
        self.directory, self.split, self.shard_bytes = directory, split, shard_bytes
        self.shards: list[dict] = []
        self.buf = bytearray()
        self.total = 0

    def add(self, text: bytes) -> None:
        self.buf += text + DOC_SEPARATOR
        while len(self.buf) >= self.shard_bytes:
            self._emit(bytes(self.buf[: self.shard_bytes]))
            del self.buf[: self.shard_bytes]

    def close(self) -> None:
        if self.buf:
            self._emit(bytes(self.buf))
            self.buf.clear()

    def _emit(self, data: bytes) -> None:
        name = f"{self.split}-{len(self.shards):05d}.bin"
        tmp = self.directory / (name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.directory / name)
        self.shards.append({"file": name, "split": self.split, "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
        self.total += len(data)


def _build(cfg: DataConfig, root: Path) -> dict:
    sinks = {s: _ShardSink(cfg.dir, s, cfg.shard_bytes) for s in ("train", "val")}
    taken = documents = 0
    for relpath, path in _documents(root):
        try:
            text = path.read_bytes().translate(_ASCII).replace(DOC_SEPARATOR, b"?")
        except OSError:
            continue  # unreadable files (permissions) are simply not part of the corpus
        if taken + len(text) > cfg.max_bytes:
            break
        if not text:
            continue
        sinks["val" if is_validation(relpath, cfg.val_per_mille) else "train"].add(text)
        taken += len(text)
        documents += 1
    for sink in sinks.values():
        sink.close()
    shards = sinks["train"].shards + sinks["val"].shards
    if not sinks["train"].shards or not sinks["val"].shards:
        raise DataError(
            f"data.source {root}: too little text for both splits "
            f"({sinks['train'].total} train, {sinks['val'].total} val characters)"
        )
    version = hashlib.sha256("".join(s["sha256"] for s in shards).encode()).hexdigest()
    return {"params": _params(cfg), "vocab_size": VOCAB_SIZE, "documents": documents,
            "split_rule": "sha256(relative path) % 1000 < val_per_mille",
            "tokens": {"train": sinks["train"].total, "val": sinks["val"].total},
            "shards": shards, "data_version": version}  # fmt: skip


class TokenShards:
    """The shards of one split, memory-mapped; windows are read by global start offset."""

    def __init__(self, directory: Path, index: dict, split: str, block_size: int) -> None:
        self.block_size = block_size
        self._maps: list[mmap.mmap] = []
        self._data: list[torch.Tensor] = []
        self._starts: list[int] = []  # cumulative count of valid window starts
        self._paths: list[Path] = []
        total = 0
        for shard in index["shards"]:
            if shard["split"] != split or shard["bytes"] <= block_size + 1:
                continue
            path = directory / shard["file"]
            if path.stat().st_size != shard["bytes"]:
                raise DataError(
                    f"shard {path} has {path.stat().st_size} bytes, index says "
                    f"{shard['bytes']}: delete {directory} to rebuild it"
                )
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            self._maps.append(mm)
            self._paths.append(path)
            self._data.append(torch.frombuffer(mm, dtype=torch.uint8))
            self._starts.append(total)
            total += shard["bytes"] - block_size - 1
        if total == 0:
            raise DataError(f"no {split} shard is longer than block_size={block_size}")
        self.num_windows = total
        self.num_tokens = total + len(self._data) * (block_size + 1)

    def batch(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-character targets for windows at the given global starts."""
        rows = []
        span = self.block_size + 1
        for start in starts.tolist():
            shard = bisect.bisect_right(self._starts, start) - 1
            offset = start - self._starts[shard]
            rows.append(self._data[shard][offset : offset + span])
        chunk = torch.stack(rows).long()
        return chunk[:, :-1], chunk[:, 1:]


    def where(self, starts: torch.Tensor) -> tuple[Path, int, int]:
        """The shard the first of these windows is read from, and the range of windows
        (offsets into that shard) the batch reads there: what a data error names."""
        first = int(starts[0])
        shard = bisect.bisect_right(self._starts, first) - 1
        offsets = [s - self._starts[shard] for s in starts.tolist()
                   if bisect.bisect_right(self._starts, s) - 1 == shard]
        return self._paths[shard], min(offsets), max(offsets)


def seed_for(*parts: int | str) -> int:
    """A 63-bit seed derived from `parts`: independent streams per (seed, rank, purpose)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


class WindowSampler:
    """Random training windows per (seed, rank, epoch); step -> batch is deterministic."""

    def __init__(
        self, shards: TokenShards, batch_size: int, seed: int, rank: int, world: int
    ) -> None:
        self.shards, self.batch_size = shards, batch_size
        self.seed, self.rank = seed, rank
        per_step = batch_size * shards.block_size * world
        self.steps_per_epoch = max(1, shards.num_tokens // per_step)
        self._epoch = -1
        self._table = torch.empty(0, dtype=torch.long)

    def starts(self, step: int) -> torch.Tensor:
        """Window starts of optimizer step `step` (1-based) on this rank."""
        epoch, i = divmod(step - 1, self.steps_per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(seed_for(self.seed, self.rank, epoch))
            self._table = torch.randint(
                self.shards.num_windows, (self.steps_per_epoch, self.batch_size), generator=g
            )
            self._epoch = epoch
        return self._table[i]

    def epoch(self, step: int) -> float:
        return (step - 1) / self.steps_per_epoch

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.shards.batch(self.starts(step))


def validation_starts(shards: TokenShards, count: int, rank: int, world: int) -> torch.Tensor:
    """A fixed, evenly spread set of validation windows, split across ranks."""
    spread = torch.linspace(0, shards.num_windows - 1, count).long()
    return spread[rank::world]
