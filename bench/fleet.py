"""Fleet bench: hundreds of hosts x 8 GPUs at 1 Hz into one DuckDB file.

Each pretend host is a loopback address served by a real sshd; its remote command is a
synthetic agent (this file, `synth` mode) that emits realistic gpu/host/train records at
the real rate, resuming from `--from` like the real agent. The cockpit side is what the
live cockpit runs: `Fleet` (one SSH link per host) feeding the store writer.

Measured on the cockpit process only (sshd and the agents are other processes): CPU
time / wall time during a steady window, and sample-to-store latency (record `ts` to
commit). The baseline is the same load at a smaller fleet, measured in the same run.

    .venv/bin/python bench/fleet.py [--hosts 256] [--baseline-hosts 32] [--seconds 30]

The last line printed is the JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result import result_line

GPUS = 8
GOAL_CPU_SHARE = 0.25
GOAL_P95_S = 2.0
UNIT = "cores (cockpit CPU time / wall)"
GOAL = f"value <= {GOAL_CPU_SHARE} and p95_latency_s <= {GOAL_P95_S}"


# --------------------------------------------------------------------------------------
# The synthetic agent (runs on the "host", started by sshd). Standard library only, and
# cheap: records are formatted from templates, and it sleeps on stdin until the next tick.


def synth_agent(argv: list[str]) -> int:
    after = int(argv[argv.index("--from") + 1])
    host = argv[argv.index("--host") + 1]
    out = sys.stdout.buffer
    stdin = sys.stdin.fileno()
    gpu = (
        '{"t":"gpu","seq":%d,"ts":%.3f,"gpu":%d,"uuid":"GPU-%s-%d","sim":true,'
        '"util":%.1f,"mem_util":%.1f,"mem_used":%d,"mem_total":85899345920,"temp":%.1f,'
        '"power":%.1f,"power_limit":700.0,"sm_clock":1980,"mem_clock":2619,"fan":null,'
        '"throttle":0,"ecc_vol_corr":0,"ecc_vol_unc":0,"ecc_agg_corr":0,"ecc_agg_unc":0,'
        '"retired_pages":0,"remap_pending":false,"pcie_tx":%.1f,"pcie_rx":%.1f,'
        '"pcie_replay":0,"nvlink_err":0,"procs":[{"pid":%d,"mem":%d,"rank":%d}]}\n'
    )
    hostrec = (
        '{"t":"host","seq":%d,"ts":%.3f,"cpu":%.1f,"load1":%.2f,"load5":%.2f,"load15":%.2f,'
        '"mem_used":%d,"mem_total":2164392632320,"swap_used":0,"swap_total":0,'
        '"disk_path":"/data","disk_used":%d,"disk_total":7681501126656,'
        '"disk_read":%.1f,"disk_write":%.1f,"net_rx":%.1f,"net_tx":%.1f,"procs":[]}\n'
    )
    train = (
        '{"t":"train","seq":%d,"ts":%.3f,"job":"bench","rank":%d,"step":%d,"epoch":%.3f,'
        '"stage":"train","loss":%.5f,"nonfinite":null,"lr":0.0003,"samples":32,'
        '"tokens":65536,"step_time":%.4f,"data_time":0.01,"compute_time":0.8,'
        '"comm_time":0.1,"ckpt_time":null,"loss_scale":65536.0,"grad_norm":%.4f,"extra":{}}\n'
    )
    header = (
        '{"t":"stream","seq":0,"ts":%.3f,"protocol":1,"agent_version":"bench",'
        '"journal_id":"bench-%s","from":%d,"first":1,"head":%d}\n'
    )
    seq = after
    now = time.time()
    out.write((header % (now, host, after, after)).encode())
    out.flush()
    tick = int(now) + 1
    step = after // (GPUS + 2)
    while True:
        wait = tick - time.time()
        if wait > 0:
            ready, _, _ = select.select([stdin], [], [], wait)
            if ready and not os.read(stdin, 4096):
                return 0  # the cockpit closed the channel
        ts = time.time()
        step += 1
        lines = []
        for g in range(GPUS):
            seq += 1
            phase = (step + g) % 10
            lines.append(
                gpu
                % (
                    seq,
                    ts,
                    g,
                    host,
                    g,
                    90 + phase,
                    40 + phase,
                    60 << 30,
                    65 + phase,
                    600 + phase,
                    1e4,
                    2e4,
                    4000 + g,
                    60 << 30,
                    g,
                )
            )
        seq += 1
        lines.append(
            hostrec % (seq, ts, 40.0, 30.1, 29.5, 28.0, 900 << 30, 3 << 40, 1e7, 5e6, 1e8, 1e8)
        )
        seq += 1
        lines.append(train % (seq, ts, 0, step, step / 1000, 2.5 - step * 1e-5, 1.01, 0.9))
        try:
            out.write("".join(lines).encode())
            out.flush()
        except BrokenPipeError:
            return 0
        tick += 1
        if tick < time.time() - 5:  # fell far behind (suspended): skip ahead, do not burst
            tick = int(time.time()) + 1


# --------------------------------------------------------------------------------------
# The cockpit side.


def _chunk_ts(chunk: bytes) -> float | None:
    start = chunk.find(b'"ts":')
    if start < 0:
        return None
    end = chunk.find(b",", start)
    try:
        return float(chunk[start + 5 : end])
    except ValueError:
        return None


class _Counter:
    """The cheapest consumer: isolates the transport's own cost from the store's."""

    def __init__(self) -> None:
        self.lines = 0

    def put(self, host: str, chunk: bytes) -> None:
        self.lines += chunk.count(b"\n")

    def high_water(self, host: str) -> int:
        return 0


def run_fleet(n_hosts: int, seconds: float, workdir: Path, store: bool = True) -> dict[str, float]:
    from cockpit.store.database import Store
    from cockpit.store.writer import StoreWriter
    from cockpit.transport import Fleet, HostSpec, KnownHosts, LinkOptions, SshConfig
    from tests.harness.sshd import MAX_LISTEN_ADDRESSES, sshd_hosts

    latencies: list[float] = []
    writer_cpu = [0.0]
    lat_lock = threading.Lock()

    class TimedWriter(StoreWriter):
        """Stamps each committed chunk: commit time minus the sample time in its first line."""

        def _commit(self, batch):  # type: ignore[no-untyped-def]
            cpu = time.thread_time()
            result = super()._commit(batch)
            done = time.time()
            lags = [done - ts for _, chunk, *_ in batch if (ts := _chunk_ts(chunk)) is not None]
            with lat_lock:
                latencies.extend(lags)
                writer_cpu[0] += time.thread_time() - cpu
            return result

    base = workdir / f"fleet-{n_hosts}-{'store' if store else 'transport'}"
    with sshd_hosts(n_hosts, base / "sshd", hosts_per_process=MAX_LISTEN_ADDRESSES) as hosts:
        agent = shlex.join([sys.executable, "-S", str(Path(__file__).resolve()), "synth"])
        specs = [
            HostSpec(
                name=h.name,
                address=h.address,
                port=h.port,
                user=h.user,
                identity_file=str(h.key_path),
                state_dir=str(h.state_dir),
                agent=f"{agent} --host {h.name}",
            )
            for h in hosts
        ]
        options = LinkOptions(
            known_hosts=KnownHosts(
                extra_files=[hosts[0].known_hosts_path],
                use_system=False,
                use_user=False,
                record_file=base / "cockpit_known_hosts",
            ),
            ssh_config=SshConfig(None),
            stale_after=10.0,
        )
        db = Store(base / "fleet.duckdb") if store else None
        writer = TimedWriter(db).start() if db is not None else _Counter()
        fleet = Fleet(specs, writer.high_water, writer.put, None, options)
        t_connect = time.monotonic()
        fleet.start()
        try:
            deadline = time.monotonic() + 45
            while len(fleet.streaming()) < n_hosts and time.monotonic() < deadline:
                time.sleep(0.2)
            streaming = len(fleet.streaming())
            connect_s = time.monotonic() - t_connect
            time.sleep(3.0)  # let backlogs drain and the writer settle
            with lat_lock:
                latencies.clear()
                store0 = writer_cpu[0]
            cpu0, wall0 = time.process_time(), time.monotonic()
            time.sleep(seconds)
            cpu1, wall1 = time.process_time(), time.monotonic()
            with lat_lock:
                window = sorted(latencies)
                store_cpu = writer_cpu[0] - store0
            backlog = getattr(writer, "backlog_lines", 0)
        finally:
            fleet.stop()
            if isinstance(writer, TimedWriter) and db is not None:
                thread = writer._thread
                writer.stop()
                if thread is not None:
                    thread.join()  # the backlog must be committed before the store closes
                db.close()
    p95 = window[int(0.95 * (len(window) - 1))] if window else None
    return {
        "hosts": n_hosts,
        "streaming": streaming,
        "connect_s": round(connect_s, 2),
        "cpu_share": (cpu1 - cpu0) / (wall1 - wall0),
        # The store writer thread's own CPU; the rest is transport (and DuckDB helpers).
        "store_writer_cpu_share": store_cpu / (wall1 - wall0),
        "transport_cpu_share": max(0.0, (cpu1 - cpu0) - store_cpu) / (wall1 - wall0),
        "writer_backlog_lines": backlog,
        "p95_latency_s": p95,
        "p50_latency_s": window[len(window) // 2] if window else None,
        "chunks": len(window),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "synth":
        return synth_agent(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=256)
    parser.add_argument("--baseline-hosts", type=int, default=32)
    # The store folds chart levels every FOLD_INTERVAL (15 s) at a cost that does not
    # depend on how much it folds: a window must hold whole fold cycles, or the CPU share
    # would depend on whether a fold fell inside it.
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="steady window of the store phases (2 fold intervals)")
    args = parser.parse_args()
    from tests.harness.sshd import require_sshd_or_explain

    reason = require_sshd_or_explain()
    if reason:
        print(result_line("fleet", None, UNIT, None, goal=GOAL, passed=False, error=reason))
        return 1
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-fleet-") as tmp:
        baseline = run_fleet(args.baseline_hosts, args.seconds, Path(tmp))
        print(f"baseline  {json.dumps(baseline)}", flush=True)
        full = run_fleet(args.hosts, args.seconds, Path(tmp))
        print(f"full      {json.dumps(full)}", flush=True)
        transport = run_fleet(args.hosts, args.seconds * 0.7, Path(tmp), store=False)
        print(f"transport {json.dumps(transport)}", flush=True)
    ok = (
        full["streaming"] == args.hosts
        and full["cpu_share"] <= GOAL_CPU_SHARE
        and full["p95_latency_s"] is not None
        and full["p95_latency_s"] <= GOAL_P95_S
    )
    extra = {
        "metric": f"cockpit CPU share (1.0 = one core), {args.hosts} hosts x {GPUS} GPUs at 1 Hz",
        "baseline_name": f"the same cockpit with {args.baseline_hosts} hosts",
        "baseline_hosts": args.baseline_hosts,
        "p95_latency_s": _rounded(full["p95_latency_s"]),
        "p95_latency_baseline_s": _rounded(baseline["p95_latency_s"]),
        "p50_latency_s": _rounded(full["p50_latency_s"]),
        "streaming": full["streaming"],
        "connect_s": full["connect_s"],
        "records_per_s": args.hosts * (GPUS + 2),
        "store_writer_cpu_share": round(full["store_writer_cpu_share"], 4),
        "writer_backlog_lines": full["writer_backlog_lines"],
        "transport_only_cpu_share": round(transport["cpu_share"], 4),
        "transport_only_streaming": transport["streaming"],
    }
    print(result_line("fleet", round(full["cpu_share"], 4), UNIT, round(baseline["cpu_share"], 4),
                      goal=GOAL, passed=ok, **extra))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
