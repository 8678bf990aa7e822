"""Chaos run: real hosts, a real job, real faults, and an exact account of every record.

`make chaos` (and, at a reduced size, `tests/chaos/test_chaos.py` in CI) starts pretend
hosts (a real sshd each on a loopback address), an agent daemon per host supervising a
2-rank torchrun job of the example trainer, and a cockpit process streaming every host
into one DuckDB file. While records flow it injects faults, rotating through the kinds
in a seeded random order:

    ssh_drop        the host's sshd killed and restarted (the link reconnects)
    agent_kill      the agent daemon SIGKILLed and started again (it adopts the job)
    cockpit_kill    the cockpit process SIGKILLed and started again (it resumes by seq)
    rank_kill       one trainer rank SIGKILLed (the agent recovers the job)
    rank_hang       one trainer rank SIGSTOPped (the agent's hang check recovers it)
    disk_full       the agent's journal disk (a small tmpfs) filled, then freed
    spool_corrupt   a torn line and binary garbage appended to a rank's spool
    hostile_records forged, oversized and escape-laden records written into a spool

After each fault it waits for the system to show it survived: training continues (a
train record journaled after the fault, past any recovery) and the cockpit's stored mark
moves on. At the end the jobs are stopped, the cockpit catches up, and for every host the
stored records are compared with the records the agent journaled, by seq: none missing,
none twice, none altered (a train record's step and loss compared exactly). It prints a
table (fault, count, survived) and ends with one JSON line:

    {"faults", "kinds", "survived", "written", "stored", "lost", "duplicated", ...}

Exit status 0 only when every fault was survived, nothing was lost or duplicated or
altered, and the store opened clean.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from agent.journal.journal import JournalReader
from agent.wire.events import INTERRUPTION
from tests.control.conftest import AgentDaemon, charlm_spec, children
from tests.harness.sshd import REPO_ROOT, SshdHost, sshd_hosts
from tests.transport.support import spec_for

KINDS = ("ssh_drop", "agent_kill", "cockpit_kill", "rank_kill", "rank_hang", "disk_full",
         "spool_corrupt", "hostile_records")
# The hang check fires after max(floor, k x median step time) of silence.
HANG = "\n[hang]\nk = 3.0\nfloor = 3.0\nstartup = 120.0\n"
JOURNAL_DISK = "48m"
SURVIVE_TIMEOUT = 90.0
HOSTILE = [
    {"t": "event", "kind": "job_started", "job": "forged", "msg": "\x1b]0;pwned\x07"},
    {"t": "train", "step": 99999999999999999999, "loss": 1.0},
    {"t": "train", "step": 5, "loss": "\x1b[31mred\x1b[0m [@click=app.quit]x[/]"},
    {"t": "event", "kind": "control_ack", "data": 1},
    {"t": "event", "kind": "checkpoint_saved", "data": [1]},
    {"t": "log", "line": "\x1b]52;c;cHduZWQ=\x07 tensor([[0.1, 0.2"},
    {"t": "hello"},
    {"t": "train", "job": ["J"], "step": 1},
]


def _now() -> float:
    return time.time()


def wait_until(predicate: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def _mount_tmpfs(path: Path, size: str) -> bool:
    """A small disk of its own for the journal, so `disk_full` can fill it. Needs root;
    without it the fault kind is left out (and the table says so)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    return done.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@dataclass
class ChaosHost:
    sshd: SshdHost
    job: str
    spec: dict
    on_tmpfs: bool
    daemon: AgentDaemon | None = None
    daemons: list[AgentDaemon] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.sshd.name

    def start_daemon(self) -> AgentDaemon:
        self.daemon = AgentDaemon(self.sshd.state_dir)
        self.daemons.append(self.daemon)
        return self.daemon

    def records(self, t: str | None = None) -> list[dict]:
        assert self.daemon is not None
        return self.daemon.records(t)

    def last_train_ts(self) -> float:
        trains = [r["ts"] for r in self.records("train") if r.get("job") == self.job]
        return max(trains, default=0.0)

    def ranks(self) -> list[int]:
        assert self.daemon is not None
        started = [e for e in self.daemon.events("job_started", self.job)
                   if isinstance(e.get("data"), dict) and isinstance(e["data"].get("pid"), int)]
        if not started:
            return []
        return children(started[-1]["data"]["pid"])

    def spool_files(self) -> list[Path]:
        return sorted((Path(self.spec["run_dir"]) / "spool" / self.job).glob("rank-*.ndjson"))


class Cockpit:
    """The cockpit child process (tests/chaos/cockpit_child.py), restartable."""

    def __init__(self, work: Path, hosts: list[ChaosHost]) -> None:
        self.status = work / "cockpit-status.json"
        self.store = work / "chaos.duckdb"
        self.config = work / "cockpit.json"
        self.log = work / "cockpit.log"
        self.config.write_text(json.dumps({
            "specs": [vars(spec_for(h.sshd)) for h in hosts],
            "known_hosts": str(hosts[0].sshd.known_hosts_path),
            "record_file": str(work / "cockpit_known_hosts"),
            "store": str(self.store), "status": str(self.status),
        }, default=str))
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.cockpit_child", str(self.config)],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT)
        self.starts += 1

    def marks(self) -> dict[str, int]:
        try:
            return json.loads(self.status.read_text())
        except (OSError, ValueError):
            return {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        with contextlib.suppress(OSError):
            self.status.unlink()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Chaos:
    def __init__(self, hosts: list[ChaosHost], cockpit: Cockpit, seed: int) -> None:
        self.hosts = hosts
        self.cockpit = cockpit
        self.rng = random.Random(seed)
        self.results: list[tuple[str, str, bool, str]] = []

    # -- checks shared by the faults --------------------------------------------------

    def trains_after(self, host: ChaosHost, ts: float, timeout: float = SURVIVE_TIMEOUT) -> bool:
        """The job trains on: a train record journaled after `ts`."""
        return bool(wait_until(lambda: host.last_train_ts() > ts, timeout))

    def stored_past(self, host: ChaosHost, timeout: float = SURVIVE_TIMEOUT) -> bool:
        """The cockpit stores past the journal's head as it is now."""
        head = max((r["seq"] for r in host.records()), default=0)
        return bool(wait_until(lambda: self.cockpit.marks().get(host.name, 0) >= head, timeout))

    def recovered_after(self, host: ChaosHost, ts: float) -> bool:
        assert host.daemon is not None
        recovery = wait_until(lambda: [e for e in host.daemon.events("recovery", host.job)
                                       if e["ts"] > ts], SURVIVE_TIMEOUT)
        return bool(recovery) and self.trains_after(host, recovery[-1]["ts"])

    # -- the faults ---------------------------------------------------------------------

    def ssh_drop(self, host: ChaosHost) -> tuple[bool, str]:
        host.sshd.stop()
        time.sleep(2.0)
        host.sshd.start()
        return self.stored_past(host), "sshd killed for 2 s"

    def agent_kill(self, host: ChaosHost) -> tuple[bool, str]:
        assert host.daemon is not None
        host.daemon.proc.kill()
        host.daemon.proc.wait(30)
        host.daemon.log.close()
        time.sleep(1.0)
        killed = _now()
        host.start_daemon()
        return self.trains_after(host, killed) and self.stored_past(host), "daemon SIGKILLed"

    def cockpit_kill(self, host: ChaosHost) -> tuple[bool, str]:
        self.cockpit.kill()
        time.sleep(1.0)
        self.cockpit.start()
        ok = all(self.stored_past(h) for h in self.hosts)
        return ok, "cockpit SIGKILLed and restarted"

    def _signal_rank(self, host: ChaosHost, sig: signal.Signals, what: str
                     ) -> tuple[bool, str]:
        """Send `sig` to one of the job's two ranks while it trains; survived when the
        agent recovers the job and it trains again."""
        if not self.trains_after(host, _now() - 1.0, 60):
            return False, "job not training before the fault"
        ranks = wait_until(lambda: host.ranks() if len(host.ranks()) == 2 else None, 60)
        if not ranks:
            return False, "no ranks found"
        pid = self.rng.choice(ranks)
        at = _now()
        os.kill(pid, sig)
        ok = self.recovered_after(host, at)
        if sig == signal.SIGSTOP:  # the hung attempt is gone; never leave it stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return ok, f"rank pid {pid} {what}"

    def rank_kill(self, host: ChaosHost) -> tuple[bool, str]:
        return self._signal_rank(host, signal.SIGKILL, "SIGKILLed")

    def rank_hang(self, host: ChaosHost) -> tuple[bool, str]:
        return self._signal_rank(host, signal.SIGSTOP, "SIGSTOPped")

    def disk_full(self, host: ChaosHost) -> tuple[bool, str]:
        filler = host.sshd.state_dir / "chaos-filler"
        written = 0
        began = _now()
        with open(filler, "wb") as f:
            block = b"\0" * (1 << 20)
            try:
                while True:
                    f.write(block)
                    f.flush()
                    written += len(block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        time.sleep(4.0)  # the agent samples and journals into a full disk meanwhile
        filler.unlink()
        freed = _now()
        ok = self.trains_after(host, freed) and self.stored_past(host)
        alive = host.daemon is not None and host.daemon.proc.poll() is None
        # The agent saw no step while its journal was full: that is no hang to restart for.
        restarts = [e["msg"] for e in host.daemon.events(INTERRUPTION, host.job)
                    if e["ts"] >= began] if host.daemon is not None else []
        return ok and alive and not restarts, (
            f"journal disk full for 4 s ({written >> 20} MiB filler)"
            + "".join(f"; {m}" for m in restarts))

    def _foreign_spool(self, host: ChaosHost, rank: int, body: bytes) -> tuple[bool, str]:
        """A spool file of a rank that does not exist, with `body` after a valid header:
        the daemon must skip what is bad in it and carry on with the job."""
        spools = host.spool_files()
        if not spools:
            return False, "no spool file"
        path = spools[0].with_name(f"rank-{rank}.chaos{int(_now() * 1000)}.ndjson")
        header = {"t": "spool", "v": 1, "file_id": path.stem.split(".", 1)[1],
                  "job": host.job, "rank": rank, "pid": 1, "ts": _now()}
        path.write_bytes(json.dumps(header).encode() + b"\n" + body)
        at = _now()
        ok = self.trains_after(host, at) and self.stored_past(host)
        alive = host.daemon is not None and host.daemon.proc.poll() is None
        return ok and alive, path.name

    def spool_corrupt(self, host: ChaosHost) -> tuple[bool, str]:
        ok, name = self._foreign_spool(host, 7, b'\xff\xfe\x00garbage\n{"t":"train","step":3,"lo')
        return ok, f"torn spool {name}"

    def hostile_records(self, host: ChaosHost) -> tuple[bool, str]:
        body = "".join(json.dumps(r) + "\n" for r in HOSTILE).encode()
        ok, _name = self._foreign_spool(host, 9, body)
        return ok, f"{len(HOSTILE)} hostile records"

    def inject(self, kind: str) -> None:
        candidates = [h for h in self.hosts if kind != "disk_full" or h.on_tmpfs]
        host = self.rng.choice(candidates)
        started = time.monotonic()
        try:
            ok, what = getattr(self, kind)(host)
        except Exception as e:  # a fault the harness itself could not inject or judge
            ok, what = False, f"{type(e).__name__}: {e}"
        took = time.monotonic() - started
        self.results.append((kind, host.name, ok, f"{what} ({took:.1f} s)"))
        print(f"  {kind:16} {host.name:6} {'survived' if ok else 'NOT SURVIVED':13} {what} "
              f"({took:.1f} s)", flush=True)

    def run(self, faults: int, kinds: list[str]) -> None:
        order: list[str] = []
        while len(order) < faults:
            round_ = list(kinds)
            self.rng.shuffle(round_)
            order += round_
        for kind in order[:faults]:
            self.inject(kind)


def _store_account(store: Path, hosts: list[ChaosHost]) -> dict[str, dict[str, Any]]:
    """Per host: journaled vs stored seqs, and train records compared field by field."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'seq' "
            "INTERSECT SELECT table_name FROM information_schema.columns "
            "WHERE column_name = 'host'").fetchall() if not t.endswith("_levels")]
        union = " UNION ALL ".join(f'SELECT host, seq FROM "{t}"' for t in tables)
        account: dict[str, dict[str, Any]] = {}
        for h in hosts:
            journal = list(JournalReader(h.sshd.state_dir).records())
            seqs = [r["seq"] for r in journal]
            stored = [s for (s,) in con.execute(
                f"SELECT seq FROM ({union}) WHERE host = ? ORDER BY seq", [h.name]).fetchall()]
            stored_set, journal_set = set(stored), set(seqs)
            trains = {r["seq"]: (r.get("step"), r.get("loss")) for r in journal
                      if r["t"] == "train"}
            rows = con.execute("SELECT seq, step, loss FROM train WHERE host = ?",
                               [h.name]).fetchall()
            altered = sum(1 for seq, step, loss in rows
                          if seq in trains and trains[seq] != (step, loss))
            account[h.name] = {
                "written": len(seqs),
                "stored": len(stored_set & journal_set),
                "lost": len(journal_set - stored_set),
                "duplicated": len(stored) - len(stored_set),
                "extra": len(stored_set - journal_set),
                "altered": altered,
                "gaps_in_journal": len(seqs) != (seqs[-1] - seqs[0] + 1 if seqs else 0),
            }
        return account
    finally:
        con.close()


@contextlib.contextmanager
def _hosts(n: int, work: Path, first_address: int, shards: Path) -> Iterator[list[ChaosHost]]:
    with sshd_hosts(n, work / "sshd", first_address=first_address) as sshds:
        hosts: list[ChaosHost] = []
        try:
            for s in sshds:
                on_tmpfs = _mount_tmpfs(s.state_dir, JOURNAL_DISK)
                job = f"chaos-{s.name}"
                spec = charlm_spec(work, shards, job, steps=1_000_000, extra=HANG)
                hosts.append(ChaosHost(sshd=s, job=job, spec=spec, on_tmpfs=on_tmpfs))
            yield hosts
        finally:
            for h in hosts:
                for d in h.daemons:
                    with contextlib.suppress(Exception):
                        d.close()
                _kill_job(h)
                if h.on_tmpfs:
                    _umount(h.sshd.state_dir)


def _kill_job(host: ChaosHost) -> None:
    """Whatever of the job is left once its daemons are gone."""
    if host.daemon is None:
        return
    for e in host.daemon.events("job_started", host.job):
        pid = e["data"]["pid"]
        for p in [*children(pid), pid]:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)


def run(n_hosts: int, faults: int, seed: int, work: Path, first_address: int) -> dict[str, Any]:
    shards = work / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    with _hosts(n_hosts, work, first_address, shards) as hosts:
        kinds = [k for k in KINDS if k != "disk_full" or any(h.on_tmpfs for h in hosts)]
        cockpit = Cockpit(work, hosts)
        chaos = Chaos(hosts, cockpit, seed)
        # One job at a time: the first prepares the data shards the others share.
        for h in hosts:
            h.start_daemon().op("launch", spec=h.spec)
            if not chaos.trains_after(h, 0.0, 180):
                raise RuntimeError(f"{h.name}: the job never trained")
        cockpit.start()
        try:
            print(f"chaos: {n_hosts} hosts, {faults} faults of {len(kinds)} kinds, seed {seed}",
                  flush=True)
            chaos.run(faults, kinds)
            for h in hosts:
                assert h.daemon is not None
                h.daemon.op("stop", job=h.job)
                h.daemon.wait_for(lambda h=h: h.daemon.events("job_exited", h.job)
                                  and not h.ranks(), 60, "the job to stop")
                h.daemon.close()
            heads = {h.name: max((r["seq"] for r in h.records()), default=0) for h in hosts}
            caught_up = wait_until(lambda: all(cockpit.marks().get(n, 0) >= hd
                                               for n, hd in heads.items()), 120)
        finally:
            cockpit.stop()
        account = _store_account(cockpit.store, hosts)
    totals = {k: sum(a[k] for a in account.values())
              for k in ("written", "stored", "lost", "duplicated", "extra", "altered")}
    survived = sum(1 for r in chaos.results if r[2])
    return {"faults": len(chaos.results), "kinds": len({r[0] for r in chaos.results}),
            "survived": survived, **totals, "caught_up": bool(caught_up),
            "cockpit_starts": cockpit.starts, "per_host": account, "results": chaos.results}


def print_table(result: dict[str, Any]) -> None:
    by_kind: dict[str, list[bool]] = {}
    for kind, _host, ok, _what in result["results"]:
        by_kind.setdefault(kind, []).append(ok)
    print(f"\n{'fault':16} {'count':>5} {'survived':>8}")
    for kind in KINDS:
        oks = by_kind.get(kind)
        if oks is None:
            print(f"{kind:16} {0:5} {'(left out: no tmpfs)' if kind == 'disk_full' else '-':>8}")
        else:
            print(f"{kind:16} {len(oks):5} {sum(oks):8}")
    for host, a in result["per_host"].items():
        print(f"{host}: written {a['written']} stored {a['stored']} lost {a['lost']} "
              f"duplicated {a['duplicated']} extra {a['extra']} altered {a['altered']}")


def passed(result: dict[str, Any]) -> bool:
    return (result["survived"] == result["faults"] and result["lost"] == 0
            and result["duplicated"] == 0 and result["extra"] == 0 and result["altered"] == 0
            and result["caught_up"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--faults", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first-address", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cockpit-chaos-"))
    try:
        result = run(args.hosts, args.faults, args.seed, work, args.first_address)
        print_table(result)
        line = {k: result[k] for k in ("faults", "kinds", "survived", "written", "stored",
                                       "lost", "duplicated")}
        line.update(altered=result["altered"], extra=result["extra"])
        print(json.dumps(line))
        return 0 if passed(result) else 1
    finally:
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
