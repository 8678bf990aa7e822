"""Ingest throughput: wire records over a real SSH channel into a DuckDB recording.

Generates >= 500 k realistic records (gpu / train / host, as the agent writes them),
starts a real OpenSSH sshd on loopback and, over one paramiko exec channel running
`cat FILE`:

  (a) baseline: reads the channel and discards the bytes (the transport's ceiling);
  (b) feeds the same channel through the real ingest path (line-boundary chunks →
      StoreWriter → Store.ingest_many → DuckDB file in a temp dir), timed until the
      last commit and the fold of every row still parked into the chart levels
      (`Store.fold_levels`, which closing the store would do), as (c) and (d) fold;
  (c) for reference, the store path alone: the same bytes, already in memory and cut
      into the same 4 MB chunks, stored in one `Store.ingest_many` call (the writer's
      best case: a flush takes everything queued), with no SSH. It bounds what (b) can
      reach on this machine, whatever the channel does;
  (d) for reference, DuckDB's own part of (b) alone: each record type's lines already in
      a file of their own, stored by the very INSERT a flush runs, their rows folded
      into the chart levels (which the UI's downsampled series read) by the flush's own
      fold, all in one transaction with its commit: no routing, Python or SSH. (b)
      cannot spend less CPU than (a)'s channel and (d) together, so even with nothing
      else to do and perfect overlap on every core, its ratio cannot pass
      raw seconds / ((a's + d's core-seconds) / cores). The inserts' share is printed
      too.

Metric points = numeric (int/float, non-null, non-bool) top-level fields per record.
Goals: (b) >= 1,000,000 points/s and >= 0.5 of (a). The last line printed is JSON.

Both read over the cockpit's own SSH transport (`ssh_link.ssh_transport`: AES-GCM, one
pass per packet where paramiko's default AES-CTR + HMAC-SHA2 makes two). For reference
the bench also reads the channel raw with paramiko's defaults and reports what each
side spent on the two reads: sshd's CPU (`raw_sshd_core_s` against
`raw_default_ciphers_sshd_core_s`), this process's CPU, paramiko's decryption
(`raw_cockpit_core_s` against `raw_default_ciphers_cockpit_core_s`), and the wall time
(`raw_s` against `raw_default_ciphers_s`).

Each of (a) and (b) also reports the CPU it used: sshd's (its encryption, `cat`) and this
process's (the channel's decryption, and for (b) the splitting and DuckDB), counted per
process, so other load on the machine does not enter. When (b) keeps every core busy,
its ratio is what the machine's cores allow: the CPU (a) spends per point against what
(b) spends, not a wait somewhere in the path.

    .venv/bin/python bench/ingest.py [--records 500000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import orjson
import paramiko
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result import report
from cockpit.ingest.synthetic import synthetic_lines
from cockpit.store import Store
from cockpit.store.levels import update_levels
from cockpit.store.loader import insert_statement
from cockpit.store.schema import LEVEL_SERIES, TABLE_FOR_TYPE, levels_open_table, levels_table
from cockpit.store.writer import StoreWriter
from cockpit.transport.ssh_link import ssh_transport
from tests.harness.sshd import sshd_hosts

RECV = 4 << 20


def count_points(data: bytes) -> tuple[int, int]:
    """(records, metric points) of the data lines (the stream header excluded)."""
    records = points = 0
    for line in data.splitlines():
        record = orjson.loads(line)
        if record.get("t") == "stream":
            continue
        records += 1
        points += sum(
            1 for k, v in record.items()
            if k not in ("seq", "ts") and isinstance(v, (int, float)) and not isinstance(v, bool)
        )
    return records, points


def connect(host, cockpit_ciphers: bool = True) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    key = paramiko.Ed25519Key.from_private_key_file(str(host.server.host_key_path))
    client.get_host_keys().add(f"[{host.address}]:{host.port}", key.get_name(), key)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host.address, port=host.port, username=host.user,
                   key_filename=str(host.key_path), look_for_keys=False, allow_agent=False,
                   # the cockpit's ciphers (AES-GCM), or paramiko's defaults (AES-CTR)
                   transport_factory=ssh_transport if cockpit_ciphers else None)
    return client


def sshd_seconds(sshd_pid: int) -> float:
    """CPU time used so far by the sshd serving the channel (its session processes, and
    the `cat`s it has reaped): on a real host, the GPU host's share."""
    total = 0.0
    daemon = psutil.Process(sshd_pid)
    for proc in (daemon, *daemon.children(recursive=True)):
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def own_cpu_seconds() -> float:
    """CPU time used so far by this process (every thread, DuckDB's included)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def cpu_seconds(sshd_pid: int) -> float:
    """CPU time used so far by this process and the sshd serving the channel."""
    return own_cpu_seconds() + sshd_seconds(sshd_pid)


def timed_raw(client: paramiko.SSHClient, path: Path, sshd_pid: int,
              repeat: int) -> tuple[float, float, float]:
    """The best of `repeat` raw reads: (seconds, core-seconds in all, sshd's of them)."""
    best = (float("inf"), 0.0, 0.0)
    for _ in range(repeat):
        before, sshd_before = cpu_seconds(sshd_pid), sshd_seconds(sshd_pid)
        elapsed, size = run_raw(client, path)
        assert size == path.stat().st_size, f"channel delivered {size} bytes"
        if elapsed < best[0]:
            best = (elapsed, cpu_seconds(sshd_pid) - before,
                    sshd_seconds(sshd_pid) - sshd_before)
    return best


def run_raw(client: paramiko.SSHClient, path: Path) -> tuple[float, int]:
    channel = client.get_transport().open_session()  # type: ignore[union-attr]
    channel.exec_command(f"cat {path}")
    start = time.perf_counter()
    size = 0
    while True:
        data = channel.recv(RECV)
        if not data:
            break
        size += len(data)
    elapsed = time.perf_counter() - start
    channel.close()
    return elapsed, size


def run_ingest(client: paramiko.SSHClient, path: Path, db: Path) -> tuple[float, int]:
    store = Store(db)
    writer = StoreWriter(store).start()
    channel = client.get_transport().open_session()  # type: ignore[union-attr]
    channel.exec_command(f"cat {path}")
    start = time.perf_counter()
    tail = b""
    while True:
        data = channel.recv(RECV)
        if not data:
            break
        data = tail + data
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if cut:
            writer.put("bench-host", data[:cut])
    if tail:
        writer.put("bench-host", tail + b"\n")
    writer.stop(timeout=600)
    store.fold_levels()  # what is still parked, as (c) folds it; closing would do it anyway
    elapsed = time.perf_counter() - start
    channel.close()
    stored = store.high_water("bench-host")
    store.close()
    return elapsed, stored


def run_store_only(data: bytes, db: Path) -> tuple[float, int]:
    """The store path alone, every ~4 MB chunk of whole lines in one flush."""
    chunks = []
    pos = 0
    while pos < len(data):
        cut = data.rfind(b"\n", pos, pos + RECV) + 1 or len(data)
        chunks.append(("bench-host", data[pos:cut]))
        pos = cut
    with Store(db) as store:
        start = time.perf_counter()
        store.ingest_many(chunks)
        store.fold_levels()
        elapsed = time.perf_counter() - start
        return elapsed, store.high_water("bench-host")


def run_typed_inserts(data: bytes, db: Path, files: Path) -> tuple[float, float, float]:
    """(seconds, core-seconds, of them the inserts') for DuckDB alone to store `data`'s
    records in their typed tables and fold them into the chart levels: each type's lines
    in a file of their own beforehand (outside the timing), one `loader.insert_statement`
    each on the writer's connection, then `levels.update_levels` of the charted tables,
    in one transaction."""
    groups: dict[str, list[bytes]] = {}
    for line in data.splitlines():
        record = orjson.loads(line)
        table = TABLE_FOR_TYPE.get(record.get("t"))
        if table is not None:
            groups.setdefault(table, []).append(line)
    paths = {}
    for table, lines in groups.items():
        paths[table] = files / f"{table}.ndjson"
        paths[table].write_bytes(b"\n".join(lines) + b"\n")
    with Store(db) as store:
        before, start = own_cpu_seconds(), time.perf_counter()
        with store.write_cursor() as cur:
            for table, path in paths.items():
                query, params = insert_statement(table)
                cur.execute(query, params(path=str(path), host="bench-host", offset=0))
            inserts = own_cpu_seconds() - before
            for table in paths:
                if table in LEVEL_SERIES:
                    update_levels(cur, table, {"bench-host": 1})
        elapsed, cpu = time.perf_counter() - start, own_cpu_seconds() - before
        stored = sum(len(lines) for lines in groups.values())
        with store.cursor() as cur:
            counted = sum(cur.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                          for t in groups)
        assert counted == stored, f"typed inserts stored {counted} of {stored} records"
        with store.cursor() as cur:
            folded = sum(cur.execute(f'SELECT coalesce(sum(n), 0) FROM "{name}" WHERE level = 0'
                                     ).fetchone()[0]
                         for t in groups if t in LEVEL_SERIES
                         for name in (levels_table(t), levels_open_table(t)))
        charted = sum(len(lines) for t, lines in groups.items() if t in LEVEL_SERIES)
        assert folded == charted, f"chart levels hold {folded} of {charted} rows"
    for path in paths.values():
        path.unlink()
    return elapsed, cpu, inserts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of N for each side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as tmp:
        tmpdir = Path(tmp)
        data = synthetic_lines(args.records, ranks=8)
        wire = tmpdir / "wire.ndjson"
        wire.write_bytes(data)
        records, points = count_points(data)
        print(f"{records} records, {points} metric points, {len(data) / 1e6:.1f} MB")
        with sshd_hosts(1, tmpdir / "sshd") as hosts:
            client = connect(hosts[0])
            raw_best = ingest_best = float("inf")
            raw_cpu = ingest_cpu = raw_sshd = 0.0  # core-seconds of the best run
            sshd_pid = hosts[0].server.proc.pid  # type: ignore[union-attr]
            for i in range(args.repeat):
                elapsed, cpu, sshd_cpu = timed_raw(client, wire, sshd_pid, 1)
                if elapsed < raw_best:
                    raw_best, raw_cpu, raw_sshd = elapsed, cpu, sshd_cpu
                before = cpu_seconds(sshd_pid)
                elapsed, high = run_ingest(client, wire, tmpdir / f"ingest-{i}.duckdb")
                cpu = cpu_seconds(sshd_pid) - before
                assert high == records, f"stored up to seq {high}, expected {records}"
                if elapsed < ingest_best:
                    ingest_best, ingest_cpu = elapsed, cpu
            client.close()
            # For reference: the same raw read with paramiko's default ciphers.
            client = connect(hosts[0], cockpit_ciphers=False)
            ctr_best, ctr_cpu, ctr_sshd = timed_raw(client, wire, sshd_pid, args.repeat)
            client.close()
        store_best = float("inf")
        for i in range(args.repeat):
            elapsed, high = run_store_only(data, tmpdir / f"store-{i}.duckdb")
            assert high == records, f"stored up to seq {high}, expected {records}"
            store_best = min(store_best, elapsed)
        shm = Path("/dev/shm")  # where the store's own scratch files go, when it can
        files = Path(tempfile.mkdtemp(dir=shm if os.access(shm, os.W_OK) else tmpdir))
        typed_s, typed_cpu, inserts_cpu = min(
            run_typed_inserts(data, tmpdir / f"typed-{i}.duckdb", files)
            for i in range(args.repeat))
        files.rmdir()
    raw_pps = points / raw_best
    ingest_pps = points / ingest_best
    store_pps = points / store_best
    ratio = ingest_pps / raw_pps
    cores = psutil.cpu_count() or 1
    print(f"(a) raw channel: {raw_pps / 1e6:.2f} M points/s ({records / raw_best / 1e3:.0f} k "
          f"records/s, {len(data) / raw_best / 1e6:.0f} MB/s); {raw_cpu:.2f} core-s "
          f"(sshd's: {raw_sshd:.2f}), "
          f"{raw_cpu / raw_best:.2f} of {cores} cores busy")
    print(f"(b) ingest:      {ingest_pps / 1e6:.2f} M points/s ({records / ingest_best / 1e3:.0f} "
          f"k records/s); {ingest_cpu:.2f} core-s, "
          f"{ingest_cpu / ingest_best:.2f} of {cores} cores busy")
    # (b) cannot take less wall time than its CPU spread over every core.
    ceiling = raw_best / (ingest_cpu / cores) if ingest_cpu else float("inf")
    print(f"    CPU per point, (b) against (a): {ingest_cpu / max(raw_cpu, 1e-9):.1f}x; the "
          f"ratio {cores} cores allow at (b)'s CPU per point: {ceiling:.2f}")
    print(f"    for reference, the raw read with paramiko's default ciphers (AES-CTR + "
          f"HMAC-SHA2): {points / ctr_best / 1e6:.2f} M points/s, sshd's CPU "
          f"{ctr_sshd:.2f} core-s (AES-GCM: {raw_sshd:.2f}), this process's "
          f"{ctr_cpu - ctr_sshd:.2f} core-s (AES-GCM: {raw_cpu - raw_sshd:.2f}); (b) "
          f"against it: {ingest_pps / (points / ctr_best):.2f}")
    print(f"(c) store alone: {store_pps / 1e6:.2f} M points/s, no SSH ({store_pps / raw_pps:.2f} "
          "of (a))")
    # (b) needs at least (a)'s channel and (d), spread perfectly over the cores.
    typed_ceiling = raw_best / ((raw_cpu + typed_cpu) / cores)
    print(f"(d) DuckDB's part alone: {points / typed_s / 1e6:.2f} M points/s, "
          f"{typed_cpu:.2f} core-s (typed inserts {inserts_cpu:.2f}, chart levels and "
          f"commit {typed_cpu - inserts_cpu:.2f}); with (a)'s {raw_cpu:.2f} core-s, {cores} cores "
          f"allow (b) a ratio of at most {typed_ceiling:.2f}")
    print(f"ratio (b)/(a):   {ratio:.2f}")
    passed = ingest_pps >= 1_000_000 and ratio >= 0.5
    return report(
        "ingest", round(ingest_pps), "points/s", round(raw_pps),
        goal="value >= 1000000 and ratio >= 0.5", passed=passed, metric="points_per_s",
        baseline_name="raw SSH channel read", records=records, points=points,
        bytes=len(data), raw_s=round(raw_best, 3), ingest_s=round(ingest_best, 3),
        store_only_s=round(store_best, 3), store_only_points_per_s=round(store_pps),
        duckdb_part_s=round(typed_s, 3), duckdb_part_core_s=round(typed_cpu, 2),
        typed_inserts_core_s=round(inserts_cpu, 2),
        ratio_duckdb_part_allows=round(typed_ceiling, 3),
        cores=cores, raw_core_s=round(raw_cpu, 2), ingest_core_s=round(ingest_cpu, 2),
        ratio_cores_allow=round(ceiling, 3), raw_default_ciphers_s=round(ctr_best, 3),
        raw_sshd_core_s=round(raw_sshd, 2), raw_default_ciphers_sshd_core_s=round(ctr_sshd, 2),
        raw_cockpit_core_s=round(raw_cpu - raw_sshd, 2),
        raw_default_ciphers_core_s=round(ctr_cpu, 2),
        raw_default_ciphers_cockpit_core_s=round(ctr_cpu - ctr_sshd, 2),
    )


if __name__ == "__main__":
    sys.exit(main())
