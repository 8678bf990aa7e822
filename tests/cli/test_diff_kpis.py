"""`cockpit diff A B` and `cockpit report --kpis [DIR]` on real stores: the recorded run
(tests/data) and stores built through the real wire encoding and ingest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.wire.protocol import encode
from cockpit.app.cli import main
from cockpit.store.database import Store

T = 1_800_000_000.0
SHARDS = [{"file": f"train-{i:05d}.bin", "sha256": f"sum{i}", "bytes": 262144}
          for i in range(5)]
CONFIG = {"optim": {"lr": 0.003, "warmup_steps": 30}, "train": {"batch_size": 16},
          "data": {"dir": "/data/charlm", "shards": SHARDS}}
ENV = {"python": "3.11.7", "torch": "2.4.0", "cuda": "12.4", "packages_hash": "abc"}


def _run(job: str, ts: float, config: dict[str, Any], data_version: str) -> tuple:
    return (ts, "run", {"job": job, "rank": 0, "world_size": 2, "total_steps": 100,
                        "config": config, "seed": 1337, "data_version": data_version,
                        "git_commit": "c998e4c"})


def _steps(job: str, t0: float, first: int, n: int) -> list[tuple]:
    return [(t0 + i, "train", {"job": job, "rank": 0, "step": first + i, "loss": 2.0,
                               "step_time": 1.0, "data_time": 0.1, "samples": 16,
                               "extra": {}}) for i in range(n)]


def write_store(path: Path, records: list[tuple]) -> Path:
    records = [(T, "hello", {"agent_version": "t", "protocol": 1, "hostname": "h",
                             "driver": "550.54", "env": ENV,
                             "gpus": [{"index": 0}, {"index": 1}]}), *records]
    lines = [encode("stream", 0, {"protocol": 1, "agent_version": "t", "journal_id": "j",
                                  "from": 0, "first": 1, "head": len(records)}, ts=T)]
    lines += [encode(t, seq, fields, ts=ts) for seq, (ts, t, fields)
              in enumerate(sorted(records, key=lambda r: r[0]), 1)]
    with Store(path) as store:
        assert not store.ingest("h", b"".join(lines)).malformed
    return path


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Jobs `base` and `reshard` in one recording, the same in all but shard 3's content
    (hence its data_version); `lr-fork`, a fork of `base` with one override."""
    changed = [dict(s) for s in SHARDS]
    changed[3]["sha256"] = "sum3-regenerated"
    forked = {**CONFIG, "optim": {"lr": 0.001, "warmup_steps": 30}}
    records = [
        (T + 1, "event", {"kind": "job_started", "job": "base", "data": {"reason": "launch"}}),
        _run("base", T + 2, CONFIG, "dv-1"), *_steps("base", T + 5, 1, 50),
        (T + 60, "event", {"kind": "job_exited", "job": "base", "data": {"returncode": 0}}),
        (T + 100, "event", {"kind": "job_started", "job": "reshard",
                            "data": {"reason": "launch"}}),
        _run("reshard", T + 101, {**CONFIG, "data": {**CONFIG["data"], "shards": changed}},
             "dv-2"),
        *_steps("reshard", T + 105, 1, 50),
        (T + 200, "event", {"kind": "fork", "job": "lr-fork", "step": 40, "data": {
            "ok": True, "parent": "base", "parent_step": 40,
            "overrides": {"optim.lr": 0.001}}}),
        (T + 201, "event", {"kind": "job_started", "job": "lr-fork",
                            "data": {"reason": "fork"}}),
        _run("lr-fork", T + 202, forked, "dv-1"), *_steps("lr-fork", T + 205, 41, 20),
    ]
    return write_store(tmp_path_factory.mktemp("diff") / "runs.duckdb", records)


def cockpit(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_two_jobs_differing_in_one_shard_say_data_changed_naming_it(
        two_jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "diff", f"{two_jobs}:base", f"{two_jobs}:reshard")
    assert code == 0, err
    assert "data changed (data_version, shard train-00003.bin)" in out
    assert "sum3 → sum3-regenerated" not in out  # a fingerprint is the entry's whole rest
    assert "config changed" not in out and "code changed" not in out
    code, out, _ = cockpit(capsys, "diff", f"{two_jobs}:base", f"{two_jobs}:reshard",
                           "--format", "json")
    data = json.loads(out)
    assert data["changed"] == ["data"]
    assert [c["key"] for c in data["changes"]] == ["data_version", "shard train-00003.bin"]


def test_a_fork_names_its_override_and_its_parent(
        two_jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One side: the fork against its parent, found from the agent's fork event.
    code, out, err = cockpit(capsys, "diff", f"{two_jobs}:lr-fork", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["a"].endswith(":base") and data["b"].endswith(":lr-fork")
    assert data["relation"] == "B (lr-fork) is a fork of base at step 40 with optim.lr=0.001"
    assert [(c["section"], c["key"], c["old"], c["new"]) for c in data["changes"]] == [
        ("config", "optim.lr", 0.003, 0.001)]
    code, out, _ = cockpit(capsys, "diff", f"{two_jobs}:lr-fork", "--format", "markdown")
    assert "| config | optim.lr | 0.003 → 0.001 |" in out


def test_two_recordings_and_errors(two_jobs: Path, recorded_store: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "diff", recorded_store, f"{two_jobs}:base")
    assert code == 0, err
    assert "code changed (git_commit)" in out and "environment changed" in out
    assert "torch" in out and "seed changed" not in out
    code, _, err = cockpit(capsys, "diff", f"{two_jobs}:nope", f"{two_jobs}:base")
    assert code == 2 and "has no job 'nope'" in err
    code, _, err = cockpit(capsys, "diff", f"{two_jobs}:base")
    assert code == 2 and "is no fork" in err


def test_kpis_of_the_recorded_run(recorded_store: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "report", "--kpis", "--format", "json", recorded_store)
    assert code == 0, err
    (job,) = json.loads(out)["jobs"]
    # The recorded run: killed once, recovered, 41 steps redone, finished.
    assert job["finished"] and job["interruptions"] == job["recovered"] == 1
    assert job["steps_recomputed"] == 41 and job["lost_s"]["recomputed"] > 0
    assert job["mttr_s"] == pytest.approx(job["recovery_s"][0])
    assert job["productive_s"] + sum(job["lost_s"].values()) == pytest.approx(job["span_s"])
    assert 0 < job["utilization"] < 1


@pytest.mark.slow
def test_kpis_of_a_directory_give_a_table_per_job_and_totals(
        two_jobs: Path, recorded_store: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(two_jobs, tmp_path / "a.duckdb")
    shutil.copy(recorded_store, tmp_path / "b.duckdb")
    (tmp_path / "notes.txt").write_text("not a recording")
    code, out, err = cockpit(capsys, "report", "--kpis", tmp_path)
    assert code == 0, err
    for job in ("base", "reshard", "lr-fork"):
        assert f"JOB {job.upper()} IN A.DUCKDB" in out
    assert "IN B.DUCKDB" in out and "TOTALS" in out
    code, out, _ = cockpit(capsys, "report", "--kpis", "--format", "json", tmp_path)
    data = json.loads(out)
    assert data["totals"]["jobs"] == 4
    assert data["totals"]["gpu_hours"] == pytest.approx(
        sum(j["gpu_hours"] for j in data["jobs"]))
    base = next(j for j in data["jobs"] if j["job"] == "base")
    # base: launched at T+1, 50 one-second steps from T+5 (the first began at T+4), exit
    # at T+60 on 2 GPUs: 59 s allocated, 50 s of steps of which 5 s data wait.
    assert (base["span_s"], base["gpus"]) == (pytest.approx(59), 2)
    assert base["productive_s"] == pytest.approx(45)
    assert base["lost_s"]["startup"] == pytest.approx(3)
    assert base["lost_s"]["data_wait"] == pytest.approx(5)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cockpit(capsys, "report", "--kpis", empty)
    assert code == 2 and "holds no *.duckdb" in err


def test_run_info_shows_the_kpis_and_what_the_fork_changed(two_jobs: Path) -> None:
    """The drill-down (key `i`, "Run info" in the palette) reads them through details."""
    from cockpit.read.details import run_info
    from cockpit.store.queries import StoreReader
    from cockpit.ui.screens.run_info import shown

    store = Store(two_jobs, read_only=True)
    try:
        reader = StoreReader(store)
        fork = shown(run_info(reader, job="lr-fork"))
        base = shown(run_info(reader, job="base"))
    finally:
        store.close()
    assert isinstance(fork, dict) and isinstance(base, dict)
    assert fork["changed since base"] == {
        "relation": "B (lr-fork) is a fork of base at step 40 with optim.lr=0.001",
        "summary": "config changed (optim.lr)", "config: optim.lr": "0.003 → 0.001"}
    assert fork["KPIs"]["state"] == "running" and "GPU-h" in fork["KPIs"]["allocated"]
    # base is no fork and has no earlier run: nothing to compare it with.
    assert not any(key.startswith("changed since") for key in base)
    assert base["KPIs"]["state"] == "finished"
    assert base["KPIs"]["utilization"].startswith(f"{100 * 45 / 59:.1f}% productive")
