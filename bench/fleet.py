"""Fleet bench: hundreds of hosts x 8 GPUs at 1 Hz into one DuckDB file.

Each pretend host is a loopback address served by a real sshd; its remote command is a
synthetic agent (`bench/synth_host.py`) that emits realistic gpu/host/train records at
the real rate, resuming from `--from` like the real agent. The cockpit side is what the
live cockpit runs: `Fleet` (one SSH link per host) feeding the store writer.

Measured on the cockpit process only (sshd and the agents are other processes): CPU
time / wall time during a steady window, and sample-to-store latency (record `ts` to
commit). The baseline is the same load at a smaller fleet, measured in the same run.

Fan-out (`--fanout`, and first in a full run): the time from `Fleet.start()` to every
host streaming, all hosts at once into the store, each round in a fresh process. The
baseline is the same measurement on the transport, sshd harness and synthetic agent of
an earlier revision (`--baseline-ref`, archived from git into a temporary directory),
in the same run; the rounds alternate and each side's best round is reported.

Goals (a full run passes when all three hold, `--fanout` when the third does): the
cockpit's CPU share at `--hosts` <= 0.25 of a core (`GOAL_CPU_SHARE`), every host
streaming; p95 sample-to-store latency <= 2 s (`GOAL_P95_S`); fan-out, every host
streaming within 5 s of `Fleet.start()` (`FANOUT_GOAL_S`, best round).

    .venv/bin/python bench/fleet.py [--hosts 256] [--baseline-hosts 32] [--seconds 30]
    .venv/bin/python bench/fleet.py --fanout [--hosts 256] [--rounds 2]

The last line printed is the JSON result.
"""

from __future__ import annotations

# The cockpit side imports the rest where it runs (`Path` in annotations is that one): a
# baseline revision's synthetic agent is this file in `synth` mode, and cheap to start.
import os
import sys
import time

GPUS = 8
GOAL_CPU_SHARE = 0.25
GOAL_P95_S = 2.0
FANOUT_GOAL_S = 5.0
UNIT = "cores (cockpit CPU time / wall)"
GOAL = (f"value <= {GOAL_CPU_SHARE} and p95_latency_s <= {GOAL_P95_S} and fanout_s <= "
        f"{FANOUT_GOAL_S}")


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


def _synth_command(tree: Path) -> list[str]:  # noqa: F821 (imported where used)
    """argv of the synthetic agent of the checkout at `tree`: `bench/synth_host.py`, or
    this file's `synth` mode in a revision from before that module."""
    bench = tree / "bench"
    if (bench / "synth_host.py").is_file():
        sys.path.insert(0, str(bench))
        import synth_host

        sys.path.remove(str(bench))
        return synth_host.command(sys.executable, str(bench))
    return [sys.executable, "-S", str(bench / "fleet.py"), "synth"]


def run_fleet(n_hosts: int, seconds: float, workdir: os.PathLike[str], store: bool = True
              ) -> dict[str, float]:  # fmt: skip
    import shlex
    import threading
    from pathlib import Path

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

    base = Path(workdir) / f"fleet-{n_hosts}-{'store' if store else 'transport'}"
    with sshd_hosts(n_hosts, base / "sshd", hosts_per_process=MAX_LISTEN_ADDRESSES) as hosts:
        agent = shlex.join(_synth_command(Path(__file__).resolve().parents[1]))
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


# --------------------------------------------------------------------------------------
# Fan-out: from `Fleet.start()` to every host streaming.

# The revision before the fan-out work: its transport bounded 16 handshakes, every link
# parsed the known_hosts file while the cache was empty, and its synthetic agent started
# with this whole file's imports.
DEFAULT_BASELINE_REF = "f40b8d4"
FANOUT_WAIT_S = 90.0
FANOUT_UNIT = "s"
FANOUT_GOAL = f"value <= {FANOUT_GOAL_S}"


def fanout_probe(argv: list[str]) -> int:
    """One fan-out in this process, with the code of the tree `--tree` (this checkout or
    an archived revision); prints one JSON line."""
    import argparse
    import json
    import shlex
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--no-reexec", action="store_true",
                        help="sshd serves each connection from a fork (sshd -r)")
    args = parser.parse_args(argv)
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    from cockpit.store.database import Store
    from cockpit.store.writer import StoreWriter
    from cockpit.transport import Fleet, HostSpec, KnownHosts, LinkOptions, SshConfig
    from tests.harness.sshd import MAX_LISTEN_ADDRESSES, sshd_hosts

    extra = {"reexec": False} if args.no_reexec else {}
    agent = shlex.join(_synth_command(tree))
    first: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-fanout-") as tmp:
        base = Path(tmp)
        with sshd_hosts(args.hosts, base / "sshd", hosts_per_process=MAX_LISTEN_ADDRESSES,
                        **extra) as hosts:  # fmt: skip
            specs = [HostSpec(name=h.name, address=h.address, port=h.port, user=h.user,
                              identity_file=str(h.key_path), state_dir=str(h.state_dir),
                              agent=f"{agent} --host {h.name}") for h in hosts]  # fmt: skip
            options = LinkOptions(
                known_hosts=KnownHosts(extra_files=[hosts[0].known_hosts_path],
                                       use_system=False, use_user=False,
                                       record_file=base / "cockpit_known_hosts"),
                ssh_config=SshConfig(None), stale_after=10.0)  # fmt: skip
            db = Store(base / "fleet.duckdb")
            writer = StoreWriter(db).start()
            started = [0.0]

            def on_state(host: str, state: str, detail: str) -> None:
                if state == "streaming" and host not in first:
                    first[host] = time.monotonic() - started[0]

            fleet = Fleet(specs, writer.high_water, writer.put, on_state, options)
            cpu0 = time.process_time()
            started[0] = time.monotonic()
            fleet.start()
            try:
                deadline = started[0] + FANOUT_WAIT_S
                while len(first) < args.hosts and time.monotonic() < deadline:
                    time.sleep(0.02)
                elapsed = time.monotonic() - started[0]
                cpu = time.process_time() - cpu0
                states = {}
                for status in fleet.status().values():
                    states[status.state] = states.get(status.state, 0) + 1
            finally:
                fleet.stop()
                thread = writer._thread
                writer.stop()
                if thread is not None:
                    thread.join()
                db.close()
    times = sorted(first.values())
    print(json.dumps({
        "hosts": args.hosts,
        "streaming": len(first),
        "all_streaming_s": round(elapsed, 2) if len(first) == args.hosts else None,
        "p50_s": round(times[len(times) // 2], 2) if times else None,
        "cockpit_cpu_s": round(cpu, 2),
        "states_at_end": states,
    }), flush=True)  # fmt: skip
    return 0


def _archive(ref: str, into: Path) -> str | None:  # noqa: F821 (imported where used)
    """The tree of `ref` under `into` (git archive: reads the repository, changes
    nothing in it); None, or why not."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    into.mkdir(parents=True)
    try:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref, "cockpit", "agent",
                                  "tests", "bench", "themes"],
                                 capture_output=True, check=True, timeout=60)  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True,
                       timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return f"cannot archive {ref}: {exc} {err.decode(errors='replace').strip()}"
    return None


def _probe(tree: Path, hosts: int, no_reexec: bool) -> dict:  # noqa: F821
    import json
    import subprocess
    from pathlib import Path

    argv = [sys.executable, str(Path(__file__).resolve()), "fanout-probe", "--tree", str(tree),
            "--hosts", str(hosts), *(["--no-reexec"] if no_reexec else [])]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=FANOUT_WAIT_S + 120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"status {done.returncode}: {done.stderr.strip()[-600:]}"}
    return dict(json.loads(lines[-1]))


def _best(results: list[dict]) -> float | None:
    times = [r["all_streaming_s"] for r in results if r.get("all_streaming_s") is not None]
    return min(times) if times else None


def run_fanout(hosts: int, rounds: int, ref: str, workdir: Path) -> dict:  # noqa: F821
    """Before and after, alternating, `rounds` times each; every round printed."""
    import json
    from pathlib import Path

    here = Path(__file__).resolve().parents[1]
    before_tree = workdir / "baseline-tree"
    why_not = _archive(ref, before_tree)
    variants = {
        "before": (before_tree, False),
        # This checkout's transport and agent with the pretend hosts' sshd as before:
        # the part of the gain that is the cockpit's own.
        "after_sshd_reexec": (here, False),
        "after": (here, True),
    }
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for round_ in range(rounds):
        for name, (tree, no_reexec) in variants.items():
            if name == "before" and why_not:
                results[name].append({"error": why_not})
                continue
            result = _probe(tree, hosts, no_reexec)
            results[name].append(result)
            print(f"fanout {name:18s} round {round_ + 1}: {json.dumps(result)}", flush=True)
    return {
        "after_s": _best(results["after"]),
        "before_s": _best(results["before"]),
        "after_sshd_reexec_s": _best(results["after_sshd_reexec"]),
        "after_cpu_s": min((r["cockpit_cpu_s"] for r in results["after"]
                            if "cockpit_cpu_s" in r), default=None),
        "before_cpu_s": min((r["cockpit_cpu_s"] for r in results["before"]
                             if "cockpit_cpu_s" in r), default=None),
        "errors": sorted({r["error"] for rs in results.values() for r in rs if "error" in r}),
    }  # fmt: skip


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "synth":  # as before bench/synth_host.py
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import synth_host

        return synth_host.main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "fanout-probe":
        return fanout_probe(sys.argv[2:])
    import argparse
    import json
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.result import report, result_line

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=256)
    parser.add_argument("--baseline-hosts", type=int, default=32)
    # The store folds chart levels every FOLD_INTERVAL (15 s) at a cost that does not
    # depend on how much it folds: a window must hold whole fold cycles, or the CPU share
    # would depend on whether a fold fell inside it.
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="steady window of the store phases (2 fold intervals)")
    parser.add_argument("--fanout", action="store_true",
                        help="only the fan-out: time until every host streams")
    parser.add_argument("--rounds", type=int, default=2, help="fan-out rounds per side")
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE_REF,
                        help="git revision whose transport is the fan-out baseline")
    args = parser.parse_args()
    from tests.harness.sshd import require_sshd_or_explain

    reason = require_sshd_or_explain()
    if reason:
        name, unit, goal = (("fleet-fanout", FANOUT_UNIT, FANOUT_GOAL) if args.fanout
                            else ("fleet", UNIT, GOAL))  # fmt: skip
        print(result_line(name, None, unit, None, goal=goal, passed=False, error=reason))
        return 1
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-fleet-") as tmp:
        fanout = run_fanout(args.hosts, args.rounds, args.baseline_ref, Path(tmp))
        print(f"fanout    {json.dumps(fanout)}", flush=True)
        fan_ok = fanout["after_s"] is not None and fanout["after_s"] <= FANOUT_GOAL_S
        fan_extra = {
            "metric": f"seconds from Fleet.start() to all {args.hosts} loopback hosts "
                      "streaming (best of the rounds)",
            "baseline_name": f"the same at git {args.baseline_ref} (transport, sshd "
                             "harness and synthetic agent)",
            "after_sshd_reexec_s": fanout["after_sshd_reexec_s"],
            "cockpit_cpu_s": fanout["after_cpu_s"],
            "cockpit_cpu_baseline_s": fanout["before_cpu_s"],
            "rounds": args.rounds,
            "errors": fanout["errors"],
        }  # fmt: skip
        if args.fanout:
            return report("fleet-fanout", fanout["after_s"], FANOUT_UNIT, fanout["before_s"],
                          goal=FANOUT_GOAL, passed=fan_ok, **fan_extra)  # fmt: skip
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
        and fan_ok
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
        "fanout_s": fanout["after_s"],
        "fanout_baseline_s": fanout["before_s"],
        "fanout_goal_s": FANOUT_GOAL_S,
    }
    return report("fleet", round(full["cpu_share"], 4), UNIT, round(baseline["cpu_share"], 4),
                  goal=GOAL, passed=ok, **extra)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
