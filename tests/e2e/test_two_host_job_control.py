"""End to end: one real 2-node torchrun job on two pretend hosts (real sshd on 127.0.0.2
and .3, each with its own agent daemon), operated through the cockpit's controller over
SSH, and judged by what the operator sees: the DuckDB store the live session writes.

Both pretend hosts are this machine, so the job's run dir is one path both hosts see:
the shared checkpoint storage docs/control.md requires for a multi-host restart. The job
name is full of shell syntax; nothing may ever run it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from cockpit.app.operations import wait_acks, wait_streaming
from cockpit.control.controller import ControlError, Controller
from cockpit.control.jobspec import parse_jobspec
from cockpit.sessions.live import LiveSession
from examples.charlm.config import load_config
from examples.charlm.train import lr_at
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
from tests.transport.support import options_for, spec_for

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(240)]

NAME = "duo; touch PWNED $(touch PWNED)"
SETTINGS = SMALL_CHARLM
STEPS = 2000


def _job_spec(hosts: list[SshdHost], tmp: Path) -> Any:
    args = ["--max-steps", str(STEPS), "--set", f"data.dir={tmp / 'data'}"]
    for setting in SETTINGS:
        args += ["--set", setting]
    text = textwrap.dedent(f"""\
        name = {json.dumps(NAME)}
        hosts = {json.dumps([h.name for h in hosts])}
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN_SCRIPT))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp / "shared" / NAME))}
        workdir = {json.dumps(str(tmp))}
        stop_grace = 5
        pause_timeout = 60
        [env]
        PYTHONPATH = {json.dumps(str(REPO_ROOT))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [resume]
        args = ["--resume", "{{checkpoint}}"]
        [rendezvous]
        endpoint = "127.0.0.1:{free_port()}"
        [recovery]
        backoff = 0.2
    """)
    path = tmp / "job.toml"
    path.write_text(text)
    return parse_jobspec(text, str(path), known_hosts=[h.name for h in hosts])


class JobView(StoreView):
    """What this test reads of the job."""

    def events(self, kind: str, host: str | None = None) -> list[dict]:
        sql = "SELECT host, ts, step, data FROM event WHERE kind = ? AND job = ?"
        params: list[Any] = [kind, NAME]
        if host is not None:
            sql += " AND host = ?"
            params.append(host)
        return [{"host": h, "ts": ts, "step": step, "data": json.loads(d) if d else {}}
                for h, ts, step, d in self.rows(sql + " ORDER BY ts", params)]  # fmt: skip

    def train(self, after: float = 0.0) -> list[tuple[str, int, int, float, float]]:
        return self.rows("SELECT host, rank, step, lr, ts FROM train WHERE job = ? AND ts > ? "
                         "ORDER BY ts", [NAME, after])  # fmt: skip


def _acked(session: LiveSession, controller: Controller) -> None:
    outcomes = wait_acks(session, dict(controller.last_ops), 30)
    assert all(o.ok for o in outcomes), outcomes


def _launched(session: LiveSession, spec: Any, hosts: list[SshdHost]
              ) -> tuple[JobView, Controller]:  # fmt: skip
    """The job launched through the controller, both hosts acknowledging, both ranks
    training: what the store shows of it, and its controller."""
    store = JobView(session, NAME)
    wait_streaming(session, [h.name for h in hosts], 60)
    controller = Controller(spec, session.fleet.send)
    controller.launch()
    _acked(session, controller)
    store.wait(lambda: {r for _h, r, *_ in store.train()} == {0, 1}, 120,
               "train records of both ranks")  # fmt: skip
    return store, controller


def test_two_host_job_is_controlled_and_recovers_through_the_store(
    sshd_hosts, tmp_path: Path
) -> None:
    hosts = sshd_hosts(2)
    a, b = hosts
    spec = _job_spec(hosts, tmp_path)
    cfg = load_config(None, [*SETTINGS, f"train.max_steps={STEPS}"])
    daemons = [start_daemon(h) for h in hosts]
    store_path = tmp_path / "recording.duckdb"
    session = LiveSession([spec_for(h) for h in hosts], store_path, options_for(hosts, tmp_path))
    try:
        with session:
            # Launch: both hosts acknowledge; each trains one rank (torchrun's c10d
            # rendezvous decides which), and each host's agent journals its own rank only.
            store, controller = _launched(session, spec, hosts)
            time.sleep(1.0)  # a duplicate from the other host would have arrived by now
            placed = {(h, r) for h, r, *_ in store.train()}
            assert len(placed) == 2 and {h for h, _r in placed} == {a.name, b.name}, placed
            # two torchruns, two ranks: the check below sees them
            assert len(job_pids(NAME, tmp_path)) == 4

            # Adjust: the LR is halved from a step the ranks agreed on, without a restart.
            controller.adjust(lr_scale=0.5)
            _acked(session, controller)
            ack = store.wait(lambda: [e for e in store.events("control_ack")
                                      if e["data"].get("applied_step") is not None], 60,
                             "rank 0's ack of the adjustment")  # fmt: skip
            every = cfg["control"]["every"]
            # The ack names the first step trained with it, the one after the ranks agreed.
            agreed = ack[0]["data"]["applied_step"] - 1
            assert agreed % every == 0, ack
            store.wait(lambda: any(s > agreed for _h, _r, s, *_ in store.train()), 60,
                       "steps after the adjustment")  # fmt: skip

            # Pause: rank 0 checkpoints, every job process on both hosts exits.
            controller.pause()
            _acked(session, controller)
            paused = store.wait(lambda: len(store.events("pause")) == 2 and store.events(
                "pause"), 90, "both hosts paused")  # fmt: skip
            assert all(p["data"]["ok"] for p in paused), paused
            first = next(p for p in paused if p["host"] == a.name)["data"]
            assert first["mode"] == "checkpoint" and first["step"] > agreed
            step = first["step"]
            store.wait(lambda: not job_pids(NAME, tmp_path), 15, "no job process left")
            # Discarded: what the first host's rank trained past the checkpoint, as journaled.
            trained = max(s for h, _r, s, *_ in store.train() if h == a.name)
            assert first["steps_discarded"] == max(0, trained - step)

            # Resume: both ranks continue from the paused checkpoint.
            resumed_at = time.time()
            controller.resume()
            _acked(session, controller)
            store.wait(lambda: {r for _h, r, *_ in store.train(resumed_at)} == {0, 1}, 120,
                       "steps of both ranks after the resume")  # fmt: skip
            for rank in (0, 1):
                steps = [s for _h, r, s, *_ in store.train(resumed_at) if r == rank]
                assert steps[0] == step + 1, (rank, steps[:5])

            # Crash: rank 1's process on the second host is SIGKILLed; both agents recover
            # on their own from the newest valid checkpoint.
            store.wait(lambda: [e for e in store.events("checkpoint_saved")
                                if e["ts"] > resumed_at], 90, "a checkpoint after the resume")
            victim = store.wait(lambda: [pid for h, pid in store.rows(
                "SELECT DISTINCT host, CAST(json_extract(data, '$.pid') AS BIGINT) FROM event "
                "WHERE kind = 'job_started' AND job = ? AND ts > ?", [NAME, resumed_at - 1])
                if h == b.name], 30, "the second host's attempt")  # fmt: skip
            torchrun = victim[-1]
            children = subprocess.run(["pgrep", "-P", str(torchrun)], capture_output=True,
                                      text=True).stdout.split()  # fmt: skip
            assert len(children) == 1, children
            killed_at = time.time()
            os.kill(int(children[0]), signal.SIGKILL)
            saved_before = max(e["step"] for e in store.events("checkpoint_saved")
                               if e["ts"] <= killed_at)  # fmt: skip
            recovered = store.wait(lambda: len(rs := [e for e in store.events("recovery")
                                                      if e["ts"] > killed_at]) == 2 and rs,
                                   150, "both hosts' recovery")  # fmt: skip
            interruptions = [e for e in store.events("interruption") if e["ts"] > killed_at]
            assert {e["host"] for e in interruptions} == {a.name, b.name}, interruptions
            for cut in interruptions:  # the killed rank's host, and its peer's (a consequence)
                data = cut["data"]
                assert data["cause"] and data["evidence"] and data["decision"]["retry"], data
                assert data["detected_at"] >= killed_at and data["detection_latency"] >= 0
            crash = next(e for e in interruptions if e["host"] == b.name)["data"]
            assert crash["cause"] == "killed", crash
            assert any("killed by SIGKILL" in line for line in crash["evidence"]), crash
            assert {r["host"] for r in recovered} == {a.name, b.name}
            for rec in recovered:
                data = rec["data"]
                assert data["cause"] == next(e["data"]["cause"] for e in interruptions
                                             if e["host"] == rec["host"])  # fmt: skip
                assert data["recovery_seconds"] > 0 and data["steps_lost"] >= 0, data
                # A restart may die while the peers' group re-forms: the same outage.
                assert data["restart_count"] == 1 + len(data["failed_restarts"]), data
                # From the shared dir's newest checkpoint: a periodic one, no older than the
                # newest saved before this host restarted (rank 0 may save one more after
                # the kill, before it notices, and die before it reports it).
                restarted = next(e["ts"] for e in store.events("job_started", rec["host"])
                                 if e["data"]["reason"] == "recovery")  # fmt: skip
                saved = {e["step"]: e["ts"] for e in store.events("checkpoint_saved")}
                newest = max(step for step, ts in saved.items() if ts < restarted)
                used = data["checkpoint_step"]
                assert used >= newest >= saved_before, (data, newest)
                assert used % cfg["checkpoint"]["every"] == 0, data
                assert Path(data["checkpoint"]) == (Path(spec.run_dir) / "checkpoints"
                                                    / f"ckpt-{used:08d}.pt")  # fmt: skip
                assert data["first_step"] == data["checkpoint_step"] + 1, data
            assert len({r["data"]["checkpoint"] for r in recovered}) == 1, recovered

            controller.stop()
            _acked(session, controller)
            store.wait(lambda: not job_pids(NAME, tmp_path), 30, "the job to stop")
            # The operator's LR scale held through pause, resume and recovery, on both ranks.
            for _h, _r, s, lr, _ts in store.train():
                scale = 0.5 if s > agreed else 1.0
                assert lr == pytest.approx(lr_at(s, cfg) * scale), (s, lr)
    finally:
        for d in daemons:
            stop_daemon(d)

    # The closed recording, as a later `cockpit report` reads it: every rank's step was
    # journaled by one host only, the one it ran on (a shared run dir must not make the
    # other host's agent tail it too), and the whole story is there.
    con = duckdb.connect(str(store_path), read_only=True)
    doubled = con.execute("SELECT rank, step, ts FROM train WHERE job = ? GROUP BY ALL "
                          "HAVING count(DISTINCT host) > 1", [NAME]).fetchall()  # fmt: skip
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM event WHERE job = ?",
                                        [NAME]).fetchall()}  # fmt: skip
    con.close()
    assert not doubled, f"records stored by both hosts: {doubled[:5]}"
    assert {"job_started", "pause", "resume", "interruption", "recovery"} <= kinds, kinds
    # Where a shell would have run the name: the job's workdir (tmp), the daemons' cwd
    # (the repo), this process's cwd and the login shell's home.
    pwned = [*tmp_path.rglob("PWNED"), *(d / "PWNED" for d in (REPO_ROOT, Path.cwd(),
                                                                Path.home()))]
    assert not [p for p in pwned if p.exists()], pwned


def test_a_host_the_resume_did_not_reach_resumes_with_the_other(
    sshd_hosts, tmp_path: Path
) -> None:
    """The job is paused on both hosts; the second host's sshd is then down, so the
    operator's resume reaches the first only. The second host's agent, which still sees
    the shared run dir, resumes its part by itself: both ranks train on from the paused
    step, with no relaunch, and the store shows why once the link is back."""
    hosts = sshd_hosts(2)
    a, b = hosts
    spec = _job_spec(hosts, tmp_path)
    daemons = [start_daemon(h) for h in hosts]
    session = LiveSession([spec_for(h) for h in hosts], tmp_path / "recording.duckdb",
                          options_for(hosts, tmp_path))
    try:
        with session:
            store, controller = _launched(session, spec, hosts)
            controller.pause()
            _acked(session, controller)
            paused = store.wait(lambda: len(store.events("pause")) == 2 and store.events(
                "pause"), 90, "both hosts paused")  # fmt: skip
            step = next(p["data"]["step"] for p in paused if p["data"].get("step") is not None)
            store.wait(lambda: not job_pids(NAME, tmp_path), 15, "no job process left")

            b.stop()
            store.wait(lambda: session.fleet.status()[b.name].state != "streaming", 30,
                       "the link to the second host to notice its sshd is down")
            resumed_at = time.time()
            with pytest.raises(ControlError) as missed:
                controller.resume()
            assert missed.value.sent == (a.name,) and b.name in missed.value.unsent
            store.wait(lambda: store.events("resume", a.name), 30, "the first host's resume")
            # The first host's rank trains again while the second host's link is still
            # down: a 2-node torchrun trains only once the second host's part has joined.
            store.wait(lambda: [s for h, _r, s, *_ in store.train(resumed_at)
                                if h == a.name and s > step + 5], 120,
                       "the first host's rank to train past the paused step")  # fmt: skip

            b.start()
            followed = store.wait(lambda: store.events("resume", b.name), 60,
                                  "the second host's resume, once its link is back")
            data = followed[0]["data"]
            assert data["mode"] == "peer" and data["peer"] == a.name, data
            assert data["step"] == step, (data, step)
            store.wait(lambda: {r for _h, r, *_ in store.train(resumed_at)} == {0, 1}, 60,
                       "steps of both ranks after the resume")  # fmt: skip
            for rank in (0, 1):
                steps = [s for _h, r, s, *_ in store.train(resumed_at) if r == rank]
                assert steps[0] == step + 1, (rank, steps[:5])
            assert len(store.events("relaunch")) == 0
            controller.stop()
            _acked(session, controller)
            store.wait(lambda: not job_pids(NAME, tmp_path), 30, "the job to stop")
    finally:
        for d in daemons:
            stop_daemon(d)


def test_each_host_keeps_its_own_files_in_the_shared_run_dir(tmp_path: Path) -> None:
    """Spool, logs and error file per host; checkpoints and controls shared through links."""
    from agent.job.launch import LaunchSpec
    from agent.wire.op_error import OpError

    hosts = ("gpu1", "gpu2")
    text = textwrap.dedent(f"""\
        name = "j"
        hosts = {json.dumps(list(hosts))}
        script = "train.py"
        nproc_per_node = 1
        run_dir = {json.dumps(str(tmp_path / "shared"))}
        [rendezvous]
        endpoint = "gpu1:29400"
    """)
    job = parse_jobspec(text, "job.toml", known_hosts=list(hosts))
    specs = [LaunchSpec(job.for_host(h)) for h in hosts]
    for spec in specs:
        spec.prepare_dirs()
        spec.prepare_dirs()  # a restart finds the links in place
    shared = tmp_path / "shared"
    assert [s.run_dir for s in specs] == [shared / "nodes" / h for h in hosts]
    assert {s.checkpoint_dir for s in specs} == {shared / "checkpoints"}
    for spec in specs:
        for name in ("checkpoints", "control"):
            assert (spec.run_dir / name).resolve() == shared / name
    (specs[0].run_dir / "checkpoints" / "ckpt").write_text("x")
    assert (specs[1].run_dir / "checkpoints" / "ckpt").read_text() == "x"
    single = LaunchSpec(parse_jobspec(text.replace('"gpu1", "gpu2"', '"gpu1"'), "job.toml",
                                      known_hosts=["gpu1"]).for_host("gpu1"))  # fmt: skip
    assert single.run_dir == shared and single.checkpoint_dir == shared / "checkpoints"
    clash = shared / "nodes" / "gpu3"
    (clash / "control").mkdir(parents=True)
    with pytest.raises(OpError, match="is not a link to the shared"):
        LaunchSpec(job.for_host("gpu2") | {"host": "gpu3"}).prepare_dirs()
