"""End to end: an elastic torchrun job (`nnodes = "2:3"`, gloo on CPU) on pretend hosts
served by real sshd on 127.0.0.2-.5, each with its own agent daemon, operated with the
command line's operations and judged from the store a watching session records.

It grows from 2 to 3 nodes and shrinks back while the first two hosts' torchrun
processes keep running, then loses a host to a GPU fault and the inventory's spare takes
its place. A CPU host cannot raise a real XID: the host's simulated GPU reports one
through the agent's `sim_xid` op, exactly as NVML's event thread would, and its rank is
SIGKILLed, so the default `exclude_on = ["gpu_fault"]` takes the host out.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job.supervisor import alive, children_of
from agent.journal.control_inbox import append_op
from cockpit.app.operations import run_operation, wait_streaming
from cockpit.sessions.live import LiveSession
from tests.harness.job_hosts import (
    SMALL_CHARLM,
    StoreView,
    free_port,
    job_pids,
    start_daemon,
    stop_daemon,
)
from tests.harness.sshd import REPO_ROOT, SshdHost
from tests.harness.torchrun import TRAIN_SCRIPT
from tests.transport.support import options_for, spec_for, stream_agent_command

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(480)]

NAME = "elastic"
SETTINGS = SMALL_CHARLM


def _files(hosts: list[SshdHost], tmp: Path) -> tuple[Path, Path]:
    """The inventory (the fourth host is a spare) and the job spec, as an operator writes
    them. The job names no spares: it takes the inventory's."""
    inventory = tmp / "hosts.toml"
    inventory.write_text("".join(textwrap.dedent(f"""\
        [[hosts]]
        name = "{h.name}"
        address = "{h.address}"
        port = {h.port}
        user = "{h.user}"
        identity_file = {json.dumps(str(h.key_path))}
        state_dir = {json.dumps(str(h.state_dir))}
        agent = {json.dumps(stream_agent_command())}
        spare = {"true" if h is hosts[-1] else "false"}
    """) for h in hosts))
    args = ["--max-steps", "100000", "--set", f"data.dir={tmp / 'data'}"]
    for setting in SETTINGS:
        args += ["--set", setting]
    job = tmp / "job.toml"
    job.write_text(textwrap.dedent(f"""\
        name = "{NAME}"
        hosts = ["{hosts[0].name}", "{hosts[1].name}"]
        nnodes = "2:3"
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN_SCRIPT))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp / "shared" / NAME))}
        workdir = {json.dumps(str(tmp))}
        stop_grace = 5
        [env]
        PYTHONPATH = {json.dumps(str(REPO_ROOT))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [resume]
        newest_args = ["--resume", "auto"]
        [rendezvous]
        endpoint = "127.0.0.1:{free_port()}"
        host = "{hosts[0].name}"
        last_call = 1
        keep_alive = 1
        [recovery]
        backoff = 0.2
        [hang]
        startup = 120
    """))
    return inventory, job


class JobView(StoreView):
    """What this test reads of the job."""

    quiet_kinds = ("checkpoint_saved", "stage")

    def events(self, kind: str, after: float = 0.0) -> list[dict]:
        # Acks of ops that name no job (a ping) carry none; the others carry the job.
        job = "(job = ? OR job IS NULL)" if kind == "control_ack" else "job = ?"
        return [{"host": h, "ts": ts, "step": step, "data": json.loads(d) if d else {}}
                for h, ts, step, d in self.rows(
                    f"SELECT host, ts, step, data FROM event WHERE kind = ? AND {job} "
                    "AND ts > ? ORDER BY ts", [kind, NAME, after])]

    def placed(self, after: float) -> set[tuple[str, int]]:
        """(host, rank) of the train records after `after`."""
        return set(self.rows("SELECT DISTINCT host, rank FROM train WHERE job = ? AND ts > ?",
                             [NAME, after]))  # fmt: skip


def test_an_elastic_job_scales_up_and_down_and_a_spare_replaces_a_faulty_host(
    sshd_hosts, tmp_path: Path
) -> None:
    hosts = sshd_hosts(4)
    a, b, c, spare = (h.name for h in hosts)
    inventory, job = _files(hosts, tmp_path)
    daemons = [start_daemon(h) for h in hosts]
    options = options_for(hosts, tmp_path)
    said: list[str] = []
    count = iter(range(100))

    def cockpit(action: str, **kw: Any) -> int:
        """`cockpit ACTION job.toml --inventory hosts.toml [...]`, in this process."""
        return run_operation(action, job, inventory_path=inventory, options=options,
                             store_path=tmp_path / f"op-{next(count)}-{action}.duckdb",
                             echo=said.append, connect_timeout=60, ack_timeout=60, **kw)

    session = LiveSession([spec_for(h) for h in hosts], tmp_path / "watch.duckdb", options)
    try:
        with session:
            store = JobView(session, NAME)
            wait_streaming(session, [h.name for h in hosts], 60)

            # Launch: two nodes train; the inventory's spare waits in standby, no process.
            assert cockpit("launch") == 0, said
            acks = store.wait(lambda: len(seen := {
                e["host"]: e["data"] for e in store.events("control_ack")
                if e["data"]["op"] == "launch"}) == 3 and seen, 30, "the launch acks")
            assert acks[spare]["state"] == "standby" and acks[a]["state"] != "standby"
            store.wait(lambda: store.placed(0) >= {(a, 0), (b, 1)} or store.placed(0) >= {
                (a, 1), (b, 0)}, 150, "both nodes training")
            torchrun = {e["host"]: e["data"]["pid"] for e in store.events("job_started")}
            assert set(torchrun) == {a, b}

            # Scale up to 3: host3 starts torchrun with the same rendezvous; the two
            # running torchrun processes admit it and keep running.
            grew = time.time()
            assert cockpit("scale", add=c) == 0, said
            assert any(f"torchrun starts on {c}" in line for line in said), said
            done = store.wait(lambda: len(s := [e for e in store.events("scale", grew)
                                                if e["data"].get("nodes")]) == 3 and s,
                              150, "the scale-up on all three hosts")  # fmt: skip
            for event in done:
                data = event["data"]
                assert data["ok"] and data["change"] == "add" and data["host"] == c, data
                assert data["nodes"] == 3 and data["world_size"] == 3, data
                if event["host"] in (a, b):
                    assert data["torchrun_pid"] == torchrun[event["host"]], data
            formed = max(e["ts"] for e in done)
            store.wait(lambda: {r for _h, r in store.placed(formed)} == {0, 1, 2}, 60,
                       "three ranks training")  # fmt: skip
            assert {h for h, _r in store.placed(formed)} == {a, b, c}
            assert [e["host"] for e in store.events("job_started", grew)] == [c]
            assert not store.events("interruption", grew)
            assert alive(torchrun[a]) and alive(torchrun[b])
            torchrun[c] = store.events("job_started", grew)[0]["data"]["pid"]

            # Scale down to 2: host3's part stops; the others regroup in place.
            shrank = time.time()
            assert cockpit("scale", remove=c) == 0, said
            done = store.wait(lambda: len(s := store.events("scale", shrank)) == 3 and s,
                              150, "the scale-down on all three hosts")
            left = next(e for e in done if e["host"] == c)["data"]
            assert left["ok"] and left["left"] and left["hosts"] == [a, b], left
            for event in (e for e in done if e["host"] != c):
                data = event["data"]
                assert data["ok"] and data["change"] == "remove" and data["nodes"] == 2, data
                assert data["torchrun_pid"] == torchrun[event["host"]], data
            formed = max(e["ts"] for e in done)
            store.wait(lambda: store.placed(formed + 1) and {
                h for h, _r in store.placed(formed + 1)} == {a, b}, 60, "two nodes again")
            assert not alive(torchrun[c])
            assert not store.events("job_started", shrank)
            assert not store.events("interruption", shrank)
            assert alive(torchrun[a]) and alive(torchrun[b])

            # A GPU fault: host2's GPU reports XID 79 and its rank dies. Its agent
            # excludes host2 and claims the spare; host4 starts torchrun; host1's
            # torchrun regroups in place with it.
            ranks = children_of(torchrun[b])
            assert len(ranks) == 1, ranks
            faulted = time.time()
            append_op(hosts[1].state_dir, {"op": "sim_xid", "id": "xid-1", "gpu": 0,
                                           "xid": 79, "_rx": faulted})
            store.wait(lambda: store.rows("SELECT 1 FROM event WHERE kind = 'xid' AND "
                                          "host = ? AND ts >= ?", [b, faulted]),
                       30, "host2's XID")  # fmt: skip
            killed = time.time()
            os.kill(ranks[0], signal.SIGKILL)
            cut = store.wait(lambda: [e for e in store.events("interruption", killed)
                                      if e["host"] == b], 60, "host2's interruption")[0]
            assert cut["data"]["cause"] == "gpu_fault", cut
            assert any("XID" in line and "79" in line for line in cut["data"]["evidence"]), cut
            assert cut["data"]["exclusion"] == {"host": b, "spare": spare, "hosts": [a, spare],
                                                "cause": "gpu_fault"}, cut  # fmt: skip
            assert not cut["data"]["decision"]["retry"]
            takeover = store.wait(lambda: store.events("takeover", killed), 60,
                                  "the spare's takeover")[0]  # fmt: skip
            assert takeover["host"] == spare and takeover["data"]["replaced"] == b
            # host1's torchrun regroups in place, in one of two ways depending on which it
            # sees first: its rank failing on the lost peer (a recovery, cause nccl), or
            # the spare waiting at the rendezvous (torchrun restarts its workers to admit
            # it before they fail: a join). Both keep host1's torchrun running.
            recovered = store.wait(lambda: sorted((
                dict(e, kind=kind) for kind in ("recovery", "membership")
                for e in store.events(kind, killed) if e["host"] == a),
                key=lambda e: e["ts"]), 150, "host1's regroup with the spare")[0]
            if recovered["kind"] == "recovery":
                # Its evidence whole on a failure (the lines the cause was told from).
                assert recovered["data"]["cause"] == "nccl", recovered["data"].get("evidence")
                peer = next(e for e in store.events("interruption", killed) if e["host"] == a)
                assert peer["data"]["decision"]["in_place"], peer
            else:
                assert recovered["data"]["change"] == "join", recovered
                assert recovered["data"]["in_place"], recovered
            store.wait(lambda: {h for h, _r in store.placed(recovered["ts"])} == {a, spare}
                       and {r for _h, r in store.placed(recovered["ts"])} == {0, 1}, 60,
                       "host1 and the spare training")  # fmt: skip
            assert alive(torchrun[a]) and not alive(torchrun[b])
            assert [e["host"] for e in store.events("job_started", killed)] == [spare]
            alert = store.rows("SELECT code FROM alert WHERE job = ? AND ts > ?",
                               [NAME, killed])  # fmt: skip
            assert ("host_excluded",) in alert, alert

            # Pause from a fresh command line: the agents say who takes part now, and the
            # spare's torchrun, which would regroup, is stopped with its ranks.
            said.clear()
            paused_at = time.time()
            assert cockpit("pause") == 0, said
            assert {line.split(":")[0] for line in said if ": ok" in line} == {a, spare}, said
            paused = store.wait(lambda: len(p := store.events("pause", paused_at)) == 2 and p,
                                90, "both hosts paused")  # fmt: skip
            assert {e["host"] for e in paused} == {a, spare}
            assert all(e["data"]["ok"] for e in paused), paused
            store.wait(lambda: not job_pids(NAME, tmp_path), 30, "no job process left")
            assert not store.events("interruption", paused_at)
    finally:
        for d in daemons:
            stop_daemon(d)
