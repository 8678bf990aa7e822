"""Archiving a recording to object storage, and reading an archived one back.

`archive()` uploads the recording (and, when asked, its job's final checkpoint and a
Parquet export of every table) under a prefix, then a manifest naming each object with
its size and SHA-256: the manifest is written last, so its presence says the archive is
complete. `fetch()` gives `cockpit replay` and `cockpit report` a local copy of an
archived recording: downloaded once into the user's cache dir, checked against its
SHA-256, and used again while the object's ETag is unchanged.

A recording is archived only when no cockpit is writing it: a DuckDB file copied while
it is written is not a recording anyone can open.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from cockpit import __version__
from cockpit.archive import s3
from cockpit.archive.s3 import ArchiveError, S3Location, S3Options, Uploaded
from cockpit.store.database import Store, StoreError
from cockpit.store.export import export_tables

APP = "training-cockpit"
MANIFEST_SUFFIX = ".manifest.json"
MAX_CHECKPOINT_FILES = 100_000

ProgressFactory = Callable[[str, int], Callable[[int], None]]


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def _no_progress(_label: str, _total: int) -> Callable[[int], None]:
    return lambda _n: None


@dataclass(frozen=True)
class ArchiveResult:
    manifest: str
    objects: tuple[Uploaded, ...]

    @property
    def sent_bytes(self) -> int:
        return sum(o.sent_bytes for o in self.objects)

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)


def _check_recording(path: Path) -> None:
    if not path.is_file():
        raise ArchiveError(f"{path}: no such recording (expected a DuckDB file)")
    try:
        Store(path, read_only=True).close()
    except StoreError as exc:
        raise ArchiveError(f"{path}: cannot be archived now: {exc}") from None


def _recording_key(path: Path, loc: S3Location) -> S3Location:
    """`s3://b/prefix/` (or `s3://b`) -> prefix/NAME; `s3://b/dir/x.duckdb` -> itself."""
    if loc.key == "" or loc.key.endswith("/"):
        return loc.child(path.name)
    return loc


def _checkpoint_files(path: Path) -> list[tuple[Path, str]]:
    if path.is_file():
        return [(path, path.name)]
    if not path.is_dir():
        raise ArchiveError(f"{path}: no such checkpoint file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    if len(files) > MAX_CHECKPOINT_FILES:
        raise ArchiveError(f"{path}: more than {MAX_CHECKPOINT_FILES} files")
    return [(p, f"{path.name}/{p.relative_to(path).as_posix()}") for p in files]


def archive(recording: Path, url: str, options: S3Options, *, checkpoint: Path | None = None,
            parquet: bool = False, progress: ProgressFactory = _no_progress,
            state_dir: Path | None = None, client: object | None = None) -> ArchiveResult:
    _check_recording(recording)
    rec_loc = _recording_key(recording, s3.parse_url(url))
    cli = client if client is not None else s3.client(options)
    state = state_dir if state_dir is not None else cache_dir() / "uploads"
    uploads: list[tuple[Path, S3Location]] = [(recording, rec_loc)]
    if checkpoint is not None:
        base = S3Location(rec_loc.bucket, rec_loc.key + ".checkpoint/")
        uploads += [(p, base.child(rel)) for p, rel in _checkpoint_files(checkpoint)]
    done: list[tuple[S3Location, Uploaded]] = []
    with tempfile.TemporaryDirectory(prefix="cockpit-archive-") as tmp:
        if parquet:
            base = S3Location(rec_loc.bucket, rec_loc.key + ".parquet/")
            uploads += [(p, base.child(p.name))
                        for p in export_tables(recording, Path(tmp), "parquet")]
        for path, loc in uploads:
            size = path.stat().st_size
            bar = progress(loc.key.rsplit("/", 1)[-1], size)
            uploaded = s3.upload(cli, path, loc, state, bar)
            done.append((loc, uploaded))
            finish = getattr(bar, "done", None)
            if finish is not None:
                finish("already archived" if uploaded.sent_bytes == 0 and size else "")
    manifest = S3Location(rec_loc.bucket, rec_loc.key + MANIFEST_SUFFIX)
    body = json.dumps({
        "recording": rec_loc.key, "created": time.time(), "cockpit_version": __version__,
        "objects": [{"key": loc.key, "size": o.size, "sha256": o.sha256, "etag": o.etag}
                    for loc, o in done],
    }, indent=1).encode()
    s3.put_bytes(cli, manifest, body, "application/json")
    return ArchiveResult(manifest.url, tuple(o for _loc, o in done))


def fetch(url: str, options: S3Options, *, progress: ProgressFactory = _no_progress,
          cache: Path | None = None, client: object | None = None) -> Path:
    """A local, verified copy of the archived recording at `url` (cached by ETag)."""
    loc = s3.parse_url(url)
    if loc.key == "" or loc.key.endswith("/"):
        raise ArchiveError(f"{url}: name the recording itself (…/NAME.duckdb), not a prefix")
    cli = client if client is not None else s3.client(options)
    info = s3.head(cli, loc)
    if info is None:
        raise ArchiveError(f"{url}: no such archived recording")
    etag = str(info.get("ETag", "")).strip('"')
    root = (cache if cache is not None else cache_dir()) / "recordings"
    dest = root / loc.bucket / loc.key
    tag = dest.with_name(dest.name + ".etag")
    if dest.is_file() and tag.is_file() and tag.read_text() == etag:
        return dest
    bar = progress(dest.name, int(info.get("ContentLength") or 0))
    s3.download(cli, loc, dest, bar)
    finish = getattr(bar, "done", None)
    if finish is not None:
        finish(f"cached at {dest}")
    tag.write_text(etag)
    return dest
