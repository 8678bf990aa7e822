"""The exporter's families from snapshots (pure), its HTTP endpoint, and a real
Prometheus server scraping it on loopback and answering queries with the same figures
the panes show."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from cockpit.analysis.kpis import JobKpis
from cockpit.errors import CockpitError
from cockpit.export.metrics import SnapshotCollector, families
from cockpit.export.server import MetricsServer, job_kpis, job_snapshots, parse_listen
from cockpit.snapshot import (
    Alert,
    Effect,
    Efficiency,
    GpuCell,
    Health,
    HostHealth,
    Interruption,
    Progress,
    Snapshot,
)
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.harness.job_hosts import SMALL_DEMO_PACED, demo_settings

HOSTILE_HOST = 'gpu\x1b]0;pwned\x07"\n} evil'


def _snapshot(host: str = "gpu1") -> Snapshot:
    return Snapshot(
        ts=1000.0, source_label="LIVE", job="j1", jobs=("j1",),
        progress=Progress(step=120, total_steps=1000, samples=3840, percent=12.0,
                          eta_seconds=600.0, steps_per_second=1.5, state="running"),
        effect=Effect(last_loss=2.5, last_val_loss=2.7, last_lr=3e-4, nonfinite_count=2),
        efficiency=Efficiency(gpu_busy=87.5, samples_per_s=48.0, data_wait_pct=5.0,
                              comm_pct=10.0, step_time_median=0.66),
        health=Health(
            hosts=(HostHealth(host=host, state="streaming", gpu_state="simulated", cpu=25.0,
                              gpus=(GpuCell(index=0, online=True, simulated=True, util=90.0,
                                            temp=71.0, power=250.0, mem_used=2**30,
                                            mem_total=2**34, ecc_unc=0, xid=79),)),),
            interruptions=(
                Interruption(cause="killed", detected_at=900.0, recovered_in=4.5,
                             steps_lost=7, restart_count=1),
                Interruption(cause="hang", detected_at=950.0, recovered_in=None,
                             steps_lost=None, restart_count=2),
            )),
        alerts=(Alert(ts=1.0, kind="resource", severity="critical", code="xid", where="x",
                      what="XID 79", hint="drain the host"),),
    )


def _kpis() -> JobKpis:
    return JobKpis(job="j1", recording=None, gpus=8, gpus_from="world size", launched=0.0,
                   end=3600.0, running=True, finished=False, span_s=3600.0, gpu_hours=8.0,
                   productive_s=3000.0, utilization=3000 / 3600,
                   lost_s={"interruption": 400.0, "startup": 200.0}, mttr_s=80.0,
                   steps_recomputed=150, checkpoint_share=0.01, turnaround_s=3500.0)


def test_kpis_are_exported_per_job_and_cause() -> None:
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in families([_snapshot()], {"j1": _kpis()}) for s in fam.samples}
    job = (("training_job", "j1"),)
    assert got[("cockpit_job_gpu_seconds_total", job)] == 8.0 * 3600
    assert got[("cockpit_job_gpu_utilization_ratio", job)] == pytest.approx(3000 / 3600)
    assert got[("cockpit_job_lost_seconds_total",
                (("cause", "interruption"), ("training_job", "j1")))] == 400.0
    assert got[("cockpit_job_mttr_seconds", job)] == 80.0


def _samples(snap: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in families([snap]) for s in fam.samples}


def test_families_carry_the_snapshots_figures_in_prometheus_units() -> None:
    got = _samples(_snapshot())
    job = (("training_job", "j1"),)
    assert got[("cockpit_job_step", job)] == 120
    assert got[("cockpit_job_progress_ratio", job)] == pytest.approx(0.12)
    assert got[("cockpit_job_samples_total", job)] == 3840
    assert got[("cockpit_learning_rate", job)] == pytest.approx(3e-4)
    assert got[("cockpit_gpu_busy_ratio", job)] == pytest.approx(0.875)
    assert got[("cockpit_job_state", (("state", "running"), ("training_job", "j1")))] == 1
    hang = (("cause", "hang"), ("training_job", "j1"))
    assert got[("cockpit_job_interruptions_total", hang)] == 1
    assert got[("cockpit_job_restarts_total", job)] == 2
    assert got[("cockpit_job_steps_lost_total", job)] == 7
    assert got[("cockpit_alerts", (("kind", "resource"), ("severity", "critical"),
                                   ("training_job", "j1")))] == 1
    gpu = (("gpu", "0"), ("host", "gpu1"))
    assert got[("cockpit_gpu_utilization_ratio", gpu)] == pytest.approx(0.9)
    assert got[("cockpit_gpu_memory_total_bytes", gpu)] == 2**34
    assert got[("cockpit_gpu_last_xid", gpu)] == 79
    assert got[("cockpit_gpu_simulated", gpu)] == 1
    # Unknown figures are absent, not zero: no val, no tokens were given.
    assert not any(name == "cockpit_tokens_per_second" for name, _ in got)


def test_a_lost_hosts_gpus_are_not_online_whatever_they_last_said() -> None:
    """The exporter says what the screen says: a GPU whose host is unreachable does
    not answer, though its last sample is still the newest held."""
    snap = _snapshot()
    gpu = (("gpu", "0"), ("host", "gpu1"))
    assert _samples(snap)[("cockpit_gpu_online", gpu)] == 1
    (host,) = snap.health.hosts
    lost = dataclasses.replace(snap, health=dataclasses.replace(
        snap.health, hosts=(dataclasses.replace(host, state="unreachable"),)))
    assert _samples(lost)[("cockpit_gpu_online", gpu)] == 0


def test_an_xid_unseen_is_zero_only_where_it_would_have_been_seen() -> None:
    snap = _snapshot()
    (host,) = snap.health.hosts
    gpu = (("gpu", "0"), ("host", "gpu1"))

    def last_xid(**cell: object) -> float | None:
        changed = dataclasses.replace(host, gpus=(host.gpus[0]._replace(xid=None, **cell),))
        return _samples(dataclasses.replace(snap, health=dataclasses.replace(
            snap.health, hosts=(changed,)))).get(("cockpit_gpu_last_xid", gpu))

    assert last_xid(xid_watched=True) == 0
    assert last_xid(xid_watched=None) == 0  # an agent that does not say: as before
    assert last_xid(xid_watched=False) is None  # its XIDs never reach the agent


def test_a_cause_a_host_names_freely_is_counted_as_other() -> None:
    """A label's values are a fixed set: the agent's causes and Slurm's; what else a
    host sends as a cause (free text, as many as it likes) is one "other"."""
    snap = _snapshot()
    odd = [Interruption(cause=c, detected_at=900.0 + i, recovered_in=1.0, steps_lost=0,
                        restart_count=1)
           for i, c in enumerate(("rank 11 killed (SIGKILL)", "x" * 500, "slurm_node_fail",
                                  "oom"))]
    snap = dataclasses.replace(snap, health=dataclasses.replace(
        snap.health, interruptions=tuple(odd)))
    causes = {dict(labels)["cause"]: value for (name, labels), value in _samples(snap).items()
              if name == "cockpit_job_interruptions_total"}
    assert causes == {"other": 2, "slurm_node_fail": 1, "oom": 1}


def test_every_family_is_documented_and_on_the_dashboard() -> None:
    docs = (Path(__file__).parents[2] / "docs")
    text = (docs / "metrics.md").read_text()
    dashboard = (docs / "grafana-dashboard.json").read_text()
    json.loads(dashboard)
    names = {fam.name + ("_total" if fam.type == "counter" else "")
             for fam in families([_snapshot()], {"j1": _kpis()})}
    names |= {"cockpit_exporter_up", "cockpit_exporter_refreshed_timestamp_seconds"}
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert not missing, missing
    assert "cockpit_job_step" in dashboard and "cockpit_gpu_utilization_ratio" in dashboard


def test_labels_are_bounded_and_never_free_text() -> None:
    labels = {k for fam in families([_snapshot()]) for s in fam.samples for k in s.labels}
    assert labels <= {"training_job", "host", "gpu", "cause", "kind", "severity", "state"}


def test_a_hostile_host_name_cannot_break_the_exposition() -> None:
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector()
    collector.update([_snapshot(HOSTILE_HOST)])
    registry.register(collector)
    for text in (generate_latest(registry).decode(), openmetrics_latest(registry).decode()):
        assert "\x1b" not in text and "\x07" not in text
        for line in text.splitlines():  # every line is a comment or one whole sample
            assert line.startswith("#") or line.startswith("cockpit_"), line


def test_a_failed_refresh_keeps_the_figures_and_says_so() -> None:
    collector = SnapshotCollector()
    collector.update([_snapshot()])
    collector.update([], error="StoreError: closed")
    names = {s.name: s.value for fam in collector.collect() for s in fam.samples}
    assert names["cockpit_exporter_up"] == 0
    assert names["cockpit_job_step"] == 120


@pytest.mark.parametrize(("text", "want"), [
    ("9400", ("127.0.0.1", 9400)), (":9400", ("127.0.0.1", 9400)),
    ("0.0.0.0:9400", ("0.0.0.0", 9400)), ("[::1]:9400", ("::1", 9400)),
])
def test_listen_addresses_default_to_loopback(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["x", "70000", "host.example:80", "0"])
def test_bad_listen_addresses_are_refused_with_why(text: str) -> None:
    with pytest.raises(CockpitError, match="--metrics"):
        parse_listen(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "prometheus"], capture_output=True)
        found = shutil.which("prometheus")
    if found is None:
        pytest.fail("the real Prometheus server is needed: apt-get install prometheus")
    return found


def _query(port: int, expr: str, at: float | None = None) -> list[dict]:
    params = {"query": expr, **({"time": str(at)} if at is not None else {})}
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@contextlib.contextmanager
def _prometheus_scraping(target_port: int, tmp_path: Path) -> Iterator[int]:
    """A real Prometheus scraping 127.0.0.1:`target_port` every second; yields its API
    port."""
    web = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: cockpit\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n")
    proc = subprocess.Popen(
        [_prometheus(), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
    try:
        yield web
    finally:
        proc.terminate()
        proc.wait(30)


def _poll(web: int, expr: str, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = _query(web, expr)
        except OSError:
            result = []
        if result:
            return result
        time.sleep(0.5)
    return []


@pytest.mark.slow
@pytest.mark.starts
@pytest.mark.timeout(240)
def test_prometheus_scrapes_a_live_two_rank_run_with_the_stores_figures(tmp_path: Path) -> None:
    """`cockpit demo --metrics` trains the example model on two ranks under torchrun (the
    suite's small one, paced); a real Prometheus scrapes it while it runs, until the demo
    is ended. Each scraped step
    and loss is one the store holds for that step, and the GPU figures are the stored
    samples'."""
    port = _free_port()
    demo = subprocess.Popen(
        [str(Path(sys.executable).parent / "cockpit"), "demo", "--headless", "600",
         "--steps", "100000", "--fault-at", "0", "--dir", str(tmp_path / "demo"),
         "--metrics", str(port), *demo_settings(SMALL_DEMO_PACED)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    seen: list[tuple[float, float, float]] = []  # (step, loss, temp)
    try:
        with _prometheus_scraping(port, tmp_path) as web:
            assert _poll(web, 'up{job="cockpit"} == 1'), "Prometheus never scraped the demo"
            deadline = time.monotonic() + 150
            while demo.poll() is None and time.monotonic() < deadline and len(seen) < 3:
                step = _query(web, "cockpit_job_step")
                # The other figures from the same scrape: an instant query at its time.
                at = step[0]["value"][0] if step else None
                loss = _query(web, "cockpit_train_loss", at)
                temp = _query(web, "cockpit_gpu_temperature_celsius", at)
                if step and loss and temp:
                    seen.append((float(step[0]["value"][1]), float(loss[0]["value"][1]),
                                 float(temp[0]["value"][1])))
                time.sleep(2)
        demo.send_signal(signal.SIGHUP)  # ends as a closed terminal ends it: cleanly
        demo.wait(120)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 128 + signal.SIGHUP, demo.stderr.read() if demo.stderr else ""
    assert seen, "no step, loss and GPU temperature were ever scraped"
    con = duckdb.connect(str(tmp_path / "demo" / "recording.duckdb"), read_only=True)
    losses: dict[int, dict[int, float]] = {}  # rank -> step -> loss
    for rank, step_, loss_ in con.execute("SELECT rank, step, loss FROM train").fetchall():
        losses.setdefault(rank, {})[step_] = loss_
    temps = {t for (t,) in con.execute("SELECT temp FROM gpu").fetchall()}
    con.close()
    for step, loss, temp in seen:
        assert int(step) in losses[0], step
        # The loss is the reference rank's newest, which may trail the newest step (of
        # any rank) by the records still in flight from it: on a loaded machine, one
        # rank's spool can be read several steps after another's. The reference rank is
        # the lowest one heard from: in the first seconds, rank 1's records can land
        # before rank 0's first ones, and the loss is then rank 1's.
        stored = [(s, v) for by_step in losses.values() for s, v in by_step.items()
                  if v == pytest.approx(loss, rel=1e-12)]
        assert stored, (step, loss)
        assert min(s for s, _ in stored) <= step, (step, loss, stored)
        assert temp in temps


def test_promtool_accepts_the_exposition(recorded_store: Path, tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or (_prometheus() and shutil.which("promtool"))
    assert promtool, "promtool ships with the prometheus package"
    store = Store(recorded_store, read_only=True)
    reader = StoreReader(store)
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector()
    snaps = job_snapshots(reader, None)
    collector.update(snaps, kpis=job_kpis(reader, snaps))
    registry.register(collector)
    store.close()
    text = generate_latest(registry)
    # The recorded run's KPIs, as `cockpit report --kpis` computes them.
    assert b"cockpit_job_gpu_seconds_total{" in text and b"cockpit_job_mttr_seconds{" in text
    assert b'cockpit_job_lost_seconds_total{cause="interruption"' in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_real_prometheus_scrapes_the_recorded_runs_figures(
    recorded_store: Path, tmp_path: Path
) -> None:
    """The recording of a real run, served by the exporter and scraped by a real
    Prometheus: its answers are the snapshot's figures."""
    binary = _prometheus()
    store = Store(recorded_store, read_only=True)
    reader = StoreReader(store)
    expected = job_snapshots(reader, None)
    with MetricsServer(("127.0.0.1", 0), lambda: job_snapshots(reader, None)) as server:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as r:
            assert b"cockpit_job_step" in r.read()
        web = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: cockpit\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{server.port}']\n")
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{web}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
        try:
            deadline = time.monotonic() + 90
            result: list[dict] = []
            while time.monotonic() < deadline and not result:
                time.sleep(1)
                with pytest.MonkeyPatch.context():
                    try:
                        result = _query(web, "cockpit_job_step")
                    except OSError:
                        result = []
            assert result, (tmp_path / "prometheus.log").read_text()[-2000:]
            by_job = {r["metric"]["training_job"]: float(r["value"][1]) for r in result}
            for snap in expected:
                if snap.job is not None and snap.progress.step is not None:
                    assert by_job[snap.job] == snap.progress.step
            up = _query(web, 'up{job="cockpit"}')
            assert up and up[0]["value"][1] == "1"
            gpus = _query(web, "cockpit_gpu_temperature_celsius")
            assert gpus and all("host" in g["metric"] and "gpu" in g["metric"] for g in gpus)
        finally:
            proc.terminate()
            proc.wait(30)
    store.close()


@pytest.mark.starts
def test_watch_serves_metrics_while_it_records(tmp_path: Path) -> None:
    """`cockpit watch --metrics`: the endpoint is up while the session runs, names the
    host's link, and is gone with it."""
    with socket.socket() as probe:  # a host port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    port = _free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "cockpit"), "watch", f"me@127.0.0.1:{dead}",
         "--headless", "6", "--store", str(tmp_path / "w.duckdb"), "--metrics", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    body = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                body = r.read().decode()
            if "cockpit_host_link_state" in body:
                break
        except OSError:
            pass
        time.sleep(0.2)
    _out, err = proc.communicate(timeout=60)
    assert f"metrics: http://127.0.0.1:{port}/metrics" in err
    assert "cockpit_exporter_up 1.0" in body, body
    assert f'cockpit_host_link_state{{host="127.0.0.1:{dead}"' in body, body
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
