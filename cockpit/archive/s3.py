"""S3-compatible object storage: the only module that talks to it (through boto3).

Uploads are multipart, verified and resumable:

- one pass over the file computes its SHA-256 and the MD5 of each part; the SHA-256
  travels as object metadata (`x-amz-meta-sha256`);
- the upload id and the file's identity (size, mtime, part size, SHA-256) are kept in a
  small state file under the user's cache dir while the upload runs, so an interrupted
  upload (a dropped link, ^C, a killed process) continues where it stopped: the parts the
  server already holds with the right MD5 are not sent again;
- after `CompleteMultipartUpload` the object is checked: its size, its ETag (for a
  multipart object, the MD5 of the parts' MD5s and the part count) and its SHA-256
  metadata must all match what was computed locally, or the archive fails and says so;
- an object already there with the same size and SHA-256 is not uploaded again.

Downloads hash what they receive and compare it with the object's SHA-256 before the
file is moved into place; a mismatch is an error, never a silently corrupt recording.

Credentials come from boto3's standard chain only (the `AWS_*` environment variables,
`~/.aws/credentials` and `~/.aws/config`, a named profile, an instance role): the
cockpit never asks for, stores, logs or reports them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.errors import CockpitError

PART_BYTES = 8 << 20  # S3's minimum part is 5 MiB; 8 MiB is the AWS CLI's default
MAX_PARTS = 10_000  # S3's limit: the part size grows for files over 78 GiB
SHA_META = "sha256"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")

Progress = Callable[[int], None]  # bytes done since the previous call


class ArchiveError(CockpitError):
    """An archive or fetch that could not be done; the message says why and what to do."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str  # an object key, or a prefix ending in "/" (or "")

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def child(self, name: str) -> S3Location:
        prefix = self.key if self.key == "" or self.key.endswith("/") else self.key + "/"
        return S3Location(self.bucket, prefix + name)


def parse_url(url: str) -> S3Location:
    """`s3://bucket/key-or-prefix` -> S3Location; raises ArchiveError naming the fault."""
    if not url.startswith("s3://"):
        raise ArchiveError(f"{url!r}: not an s3:// URL")
    bucket, _, key = url[len("s3://"):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ArchiveError(f"{url!r}: {bucket!r} is not a valid bucket name (3-63 characters: "
                           "lower-case letters, digits, dots and hyphens)")
    if (any(ord(c) < 0x20 or c == "\x7f" for c in key) or "//" in key or key.startswith("/")
            or any(part in (".", "..") for part in key.split("/"))):
        raise ArchiveError(f"{url!r}: the key has control characters, or empty, '.' or '..' "
                           "path parts")
    return S3Location(bucket, key)


def is_s3_url(text: object) -> bool:
    return isinstance(text, str) and text.startswith("s3://")


@dataclass(frozen=True)
class S3Options:
    """Where the storage is. Every field left None falls back to boto3's own settings
    (`AWS_ENDPOINT_URL`, `AWS_REGION`, the profile's `s3.addressing_style`)."""

    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    profile: str | None = None


def client(options: S3Options) -> Any:
    """A boto3 S3 client for `options`; raises ArchiveError when boto3 or credentials
    are missing."""
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ProfileNotFound
    except ImportError:
        raise ArchiveError("object storage needs boto3: pip install "
                           "'training-cockpit[archive]'") from None
    try:
        session = boto3.session.Session(profile_name=options.profile)
    except ProfileNotFound as exc:
        raise ArchiveError(f"AWS profile not found: {exc}") from None
    if session.get_credentials() is None:
        raise ArchiveError("no AWS credentials found: set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials "
                           "(--profile NAME)")
    config = Config(s3={"addressing_style": "path"} if options.path_style else {},
                    retries={"max_attempts": 5, "mode": "standard"})
    try:
        return session.client("s3", endpoint_url=options.endpoint_url,
                              region_name=options.region, config=config)
    except (BotoCoreError, ValueError) as exc:
        raise ArchiveError(f"cannot reach object storage: {exc}") from None


def _error(exc: Exception, what: str) -> ArchiveError:
    """A botocore failure as one line: the operation, the code and the server's words."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error", {})
        return ArchiveError(f"{what}: {err.get('Code', '?')}: {err.get('Message', '')}".rstrip())
    return ArchiveError(f"{what}: {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class FileDigest:
    size: int
    mtime_ns: int
    sha256: str
    part_bytes: int
    part_md5s: tuple[str, ...]

    @property
    def etag(self) -> str:
        """The ETag S3 gives the multipart object made of these parts."""
        joined = b"".join(bytes.fromhex(m) for m in self.part_md5s)
        return f"{hashlib.md5(joined).hexdigest()}-{len(self.part_md5s)}"


def part_size_for(size: int) -> int:
    part = PART_BYTES
    while size > part * MAX_PARTS:
        part *= 2
    return part


def digest(path: Path) -> FileDigest:
    """SHA-256 of the file and the MD5 of each part, in one pass."""
    st = path.stat()
    part = part_size_for(st.st_size)
    sha = hashlib.sha256()
    md5s: list[str] = []
    with open(path, "rb") as f:
        while True:
            block = f.read(part)
            if not block and md5s:
                break
            sha.update(block)
            md5s.append(hashlib.md5(block).hexdigest())
            if len(block) < part:
                break
    return FileDigest(st.st_size, st.st_mtime_ns, sha.hexdigest(), part, tuple(md5s))


def _head(s3: Any, loc: S3Location) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=loc.bucket, Key=loc.key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise _error(exc, f"cannot read {loc.url}") from None


def _state_path(state_dir: Path, loc: S3Location) -> Path:
    name = hashlib.sha256(loc.url.encode()).hexdigest()[:32]
    return state_dir / f"{name}.upload.json"


def _load_state(path: Path, d: FileDigest) -> str | None:
    """The upload id of an interrupted upload of this very file, if one is remembered."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = (isinstance(state, dict) and state.get("size") == d.size
            and state.get("sha256") == d.sha256 and state.get("part_bytes") == d.part_bytes)
    upload_id = state.get("upload_id") if same else None
    return upload_id if isinstance(upload_id, str) else None


def _save_state(path: Path, loc: S3Location, d: FileDigest, upload_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"url": loc.url, "upload_id": upload_id, "size": d.size,
                               "sha256": d.sha256, "part_bytes": d.part_bytes}))
    os.replace(tmp, path)


def _parts_held(s3: Any, loc: S3Location, upload_id: str) -> dict[int, str] | None:
    """Part number -> ETag of the parts the server holds; None when the upload is gone."""
    from botocore.exceptions import ClientError

    held: dict[int, str] = {}
    marker = 0
    try:
        while True:
            page = s3.list_parts(Bucket=loc.bucket, Key=loc.key, UploadId=upload_id,
                                 PartNumberMarker=marker)
            for p in page.get("Parts", []):
                held[int(p["PartNumber"])] = str(p["ETag"]).strip('"')
            if not page.get("IsTruncated"):
                return held
            marker = int(page["NextPartNumberMarker"])
    except ClientError:
        return None


@dataclass(frozen=True)
class Uploaded:
    url: str
    size: int
    sha256: str
    etag: str
    sent_bytes: int  # 0 when the object was already there; less than size when resumed


def upload(s3: Any, path: Path, loc: S3Location, state_dir: Path,
           progress: Progress | None = None, metadata: dict[str, str] | None = None,
           stop_after_parts: int | None = None) -> Uploaded:
    """Upload `path` to `loc` (see the module's docstring). `stop_after_parts` ends the
    upload early, as an interruption would (tests of resuming)."""
    d = digest(path)
    head = _head(s3, loc)
    if (head is not None and head.get("ContentLength") == d.size
            and head.get("Metadata", {}).get(SHA_META) == d.sha256):
        if progress:
            progress(d.size)
        return Uploaded(loc.url, d.size, d.sha256, str(head.get("ETag", "")).strip('"'), 0)
    state = _state_path(state_dir, loc)
    upload_id = _load_state(state, d)
    held = _parts_held(s3, loc, upload_id) if upload_id else None
    if upload_id is None or held is None:
        try:
            created = s3.create_multipart_upload(
                Bucket=loc.bucket, Key=loc.key,
                Metadata={**(metadata or {}), SHA_META: d.sha256})
        except Exception as exc:
            raise _error(exc, f"cannot start the upload to {loc.url}") from None
        upload_id, held = created["UploadId"], {}
        _save_state(state, loc, d, upload_id)
    sent = 0
    parts = []
    with open(path, "rb") as f:
        for number, md5 in enumerate(d.part_md5s, start=1):
            f.seek((number - 1) * d.part_bytes)
            if held.get(number) == md5:
                parts.append({"PartNumber": number, "ETag": f'"{md5}"'})
                if progress:
                    progress(min(d.part_bytes, d.size - (number - 1) * d.part_bytes))
                continue
            if stop_after_parts is not None and sent // d.part_bytes >= stop_after_parts:
                raise ArchiveError(f"upload to {loc.url} interrupted after "
                                   f"{stop_after_parts} part(s)")
            block = f.read(d.part_bytes)
            try:
                r = s3.upload_part(Bucket=loc.bucket, Key=loc.key, UploadId=upload_id,
                                   PartNumber=number, Body=block)
            except Exception as exc:
                raise _error(exc, f"upload of part {number} to {loc.url} failed "
                                  "(run the same command again to resume)") from None
            etag = str(r["ETag"]).strip('"')
            if etag != md5:
                raise ArchiveError(f"{loc.url}: part {number} arrived altered (MD5 {etag}, "
                                   f"sent {md5})")
            parts.append({"PartNumber": number, "ETag": r["ETag"]})
            sent += len(block)
            if progress:
                progress(len(block))
    try:
        s3.complete_multipart_upload(Bucket=loc.bucket, Key=loc.key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})
    except Exception as exc:
        raise _error(exc, f"cannot complete the upload to {loc.url}") from None
    head = _head(s3, loc)
    got_etag = str((head or {}).get("ETag", "")).strip('"')
    if (head is None or head.get("ContentLength") != d.size
            or head.get("Metadata", {}).get(SHA_META) != d.sha256 or got_etag != d.etag):
        raise ArchiveError(f"{loc.url}: the stored object does not match the file "
                           f"(size {None if head is None else head.get('ContentLength')} "
                           f"vs {d.size}, ETag {got_etag} vs {d.etag})")
    state.unlink(missing_ok=True)
    return Uploaded(loc.url, d.size, d.sha256, got_etag, sent)


def put_bytes(s3: Any, loc: S3Location, body: bytes, content_type: str) -> None:
    try:
        s3.put_object(Bucket=loc.bucket, Key=loc.key, Body=body, ContentType=content_type,
                      Metadata={SHA_META: hashlib.sha256(body).hexdigest()})
    except Exception as exc:
        raise _error(exc, f"cannot write {loc.url}") from None


def head(s3: Any, loc: S3Location) -> dict | None:
    return _head(s3, loc)


def download(s3: Any, loc: S3Location, dest: Path, progress: Progress | None = None) -> str:
    """Download `loc` to `dest` (written whole: a partial file never takes its place),
    checking the SHA-256 the archive recorded. Returns the object's ETag."""
    info = _head(s3, loc)
    if info is None:
        raise ArchiveError(f"{loc.url}: no such object")
    want = info.get("Metadata", {}).get(SHA_META)
    try:
        body = s3.get_object(Bucket=loc.bucket, Key=loc.key)["Body"]
    except Exception as exc:
        raise _error(exc, f"cannot read {loc.url}") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    sha = hashlib.sha256()
    with open(tmp, "wb") as f:
        for chunk in body.iter_chunks(1 << 20):
            f.write(chunk)
            sha.update(chunk)
            if progress:
                progress(len(chunk))
    if want is not None and sha.hexdigest() != want:
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"{loc.url}: the download does not match its SHA-256 "
                           f"({sha.hexdigest()[:12]}… vs {want[:12]}…)")
    os.replace(tmp, dest)
    return str(info.get("ETag", "")).strip('"')
