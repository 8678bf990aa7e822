"""A day-long recording of a multi-host job, written through the cockpit's real ingest path.

`bench/ui_store.py` fills the tables with `INSERT … SELECT`, which is quick but leaves out
everything ingest does to a recording's layout: rows arriving host after host in flushes,
the chart levels folded as flushes come (rows parked, then folded), hourly maintenance
(retention, re-clustering of the level tables), the hosts' marks. A figure measured on
such a file says little about a file a user's `cockpit watch` wrote. Here each host's
stream is made of wire lines as its agent journals them (`docs/protocol.md`: a `stream`
header, `hello`, then per second one `gpu` record per GPU and one `host` record, and the
trainer's records from the spool: a `train` record per rank per step, and on the head
host the `run`, `eval`, `log`, checkpoint and lifecycle `event`s, `alert`s), numbered by a
host-local seq in time order, and stored by `Store.ingest_many` (what `StoreWriter` calls
per flush) with every host's lines of `FLUSH_S` seconds per call. Every simulated hour the
live session's maintenance runs (`apply_retention` at that hour, then
`Store.recluster_levels`), and the store is closed as `cockpit watch` closes it.

One flush per `FLUSH_S` (30 s) of recording rather than the writer's 0.5-1 s keeps the
build to minutes; row groups (122,880 rows: about 10 minutes of a 64-rank job's steps)
are built from many flushes either way, so their time ranges, which the readers' zone
maps prune on, are the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from cockpit.store import Store
from cockpit.store.retention import RetentionPolicy, apply_retention

T0 = 1_700_000_000.0
STEP_S = 0.3  # one optimizer step of the whole job
FIRST_STEP_S = 0.05  # after T0
SAMPLE_S = 1.0  # the agent's default sampling interval (`cockpit-agent run --interval`)
FLUSH_S = 30.0  # recording seconds per `ingest_many` call
STEPS_PER_FLUSH = round(FLUSH_S / STEP_S)
MAINTENANCE_S = 3600.0  # LiveSession's maintenance period
EVAL_EVERY = 200
LOG_EVERY = 100
CHECKPOINT_EVERY = 5000
SAMPLES_PER_RANK = 16
TOKENS_PER_SAMPLE = 2048
JOB = "bench-job"


@dataclass(frozen=True)
class Shape:
    hosts: int = 8
    gpus_per_host: int = 8
    hours: float = 24.0

    @property
    def ranks(self) -> int:
        return self.hosts * self.gpus_per_host

    @property
    def steps(self) -> int:
        return int(self.hours * 3600 / FLUSH_S) * STEPS_PER_FLUSH

    @property
    def flushes(self) -> int:
        return self.steps // STEPS_PER_FLUSH

    def host(self, h: int) -> str:
        return f"gpu-node-{h}"


def step_ts(step: int) -> float:
    return T0 + FIRST_STEP_S + step * STEP_S


def _sparse(shape: Shape) -> list[tuple[int, float, str, str]]:
    """The records that are not per second or per step: (host index, ts, type, fields)."""
    last = shape.hosts - 1
    out: list[tuple[int, float, str, str]] = []
    for h in range(shape.hosts):
        gpus = ",".join(
            f'{{"index":{i},"uuid":"GPU-{h:02d}{i:02d}-5e1f","name":"NVIDIA H100 80GB HBM3",'
            f'"mem_total":85899345920,"simulated":false}}' for i in range(shape.gpus_per_host))
        out.append((h, T0, "hello", (
            f'"agent_version":"0.1.0","protocol":1,"hostname":"{shape.host(h)}",'
            f'"boot_id":"boot-{h}","pid":4100,"python":"3.11.7",'
            f'"platform":"Linux-5.15.0-x86_64-with-glibc2.35","cpu_count":96,'
            f'"mem_total":1081145769984,"gpu_source":"nvml","gpu_state":"ok",'
            f'"driver":"550.54.15","gpus":[{gpus}],"env":{{"python":"3.11.7",'
            f'"executable":"/opt/venv/bin/python","torch":"2.3.0","cuda":"12.1",'
            f'"nccl":"2.20.5","packages":180,"packages_hash":"9f2c1d0e4b7a6c55"}},'
            f'"psutil":true,"state_dir":"/var/lib/cockpit","run_dirs":["/runs/bench"],'
            f'"interval":{SAMPLE_S}')))
    out.append((0, T0 + 0.01, "event", (
        f'"kind":"job_started","job":"{JOB}","rank":null,"step":null,"msg":"job started",'
        f'"data":{{"ranks":{shape.ranks}}}')))
    out.append((0, T0 + 0.02, "run", (
        f'"job":"{JOB}","rank":0,"world_size":{shape.ranks},'
        f'"total_steps":{int(shape.steps * 1.2)},"total_epochs":null,"total_samples":null,'
        f'"total_tokens":null,"stages":["pretrain"],'
        f'"config":{{"lr":0.0003,"batch_size":{SAMPLES_PER_RANK}}},"seed":7,'
        f'"data_version":"c0ffee","git_commit":"0123456789abcdef","flops_per_step":4e15,'
        f'"peak_flops":9.9e14,"tags":["bench"],"src":"5f0c0000ab:1"')))
    out.append((0, T0 + 60, "event", (
        '"kind":"spool_error","job":null,"rank":null,"step":null,'
        '"msg":"malformed spool line","data":{"file":"spool/rank-1.ndjson","line":17,'
        '"error":"not JSON"}')))
    out.append((last, T0 + 90, "event", (
        '"kind":"xid","job":null,"rank":null,"step":null,"msg":"XID 13 on GPU 1",'
        '"data":{"gpu":1,"xid":13}')))
    for step in range(shape.steps):
        ts0 = step_ts(step)
        if step and step % EVAL_EVERY == 0:
            val = 1.0 / (1 + step / 20000.0) + 0.8
            out.append((0, ts0 + 0.2, "eval", (
                f'"job":"{JOB}","rank":0,"step":{step},"loss":{val!r},"metrics":{{"acc":0.5}},'
                f'"src":"5f0c0000ab:{step * 400 + 7}"')))
        if step % LOG_EVERY == 0:
            out.append((0, ts0 + 0.25, "log", (
                f'"job":"{JOB}","rank":0,"stream":"stdout","line":"step {step} loss ok"')))
        if step and step % CHECKPOINT_EVERY == 0:
            out.append((0, ts0 + 0.21, "event", (
                f'"kind":"checkpoint_saved","job":"{JOB}","rank":0,"step":{step},'
                f'"msg":"checkpoint saved","data":{{"seconds":20.0,"bytes":1073741824}}')))
    for frac in (0.3, 0.6):
        step = int(shape.steps * frac)
        ts0 = step_ts(step)
        cause = f"rank {last * shape.gpus_per_host + 5} killed (SIGKILL)"
        out.append((last, ts0 + 0.15, "event", (
            f'"kind":"interruption","job":"{JOB}","rank":null,"step":{step},'
            f'"msg":"rank exited","data":{{"cause":"{cause}","detected_at":{ts0 + 0.15!r}}}')))
        out.append((last, ts0 + 0.18, "event", (
            f'"kind":"recovery","job":"{JOB}","rank":null,"step":{step},'
            f'"msg":"job recovered","data":{{"cause":"{cause}","recovery_seconds":0.03,'
            f'"steps_lost":12,"restart_count":1}}')))
    for a in range(3):  # three thermal warnings over the day
        out.append((last, T0 + 100 + a * shape.hours * 900, "alert", (
            f'"job":null,"rank":null,"kind":"resource","severity":"warning",'
            f'"code":"thermal_throttle","where":{{"host":"{shape.host(last)}","gpu":1}},'
            f'"what":"GPU 1 throttling (agent)","hint":"check cooling"')))
    return out


# One flush window of every host's journal as wire lines, made by DuckDB (Python string
# formatting would take longer than the ingest it feeds). GPU and host readings at the
# resolution NVML and psutil report them; losses and step times full-precision noise.
_WINDOW_SQL = """
WITH gpu AS (
    SELECT h AS hi, $a + s * {sample} + 0.1 + h * 0.001 AS ts, 'gpu' AS t,
        '"gpu":' || g || ',"uuid":"GPU-' || lpad(h::VARCHAR, 2, '0')
        || lpad(g::VARCHAR, 2, '0') || '-5e1f","sim":false,"util":'
        || round(88 + random() * 10)::DOUBLE || ',"mem_util":'
        || round(30 + random() * 10)::DOUBLE || ',"mem_used":'
        || (64424509440 + g * 134217728) || ',"mem_total":85899345920,"temp":'
        || round(62 + random() * 8)::DOUBLE || ',"power":'
        || round(520 + random() * 80, 3) || ',"power_limit":700.0,"sm_clock":1980,'
        || '"mem_clock":2619,"fan":null,"throttle":0,"ecc_vol_corr":0,"ecc_vol_unc":0,'
        || '"ecc_agg_corr":0,"ecc_agg_unc":0,"retired_pages":0,"remap_pending":false,'
        || '"pcie_tx":' || round(1e4 + random() * 1e6, 1) || ',"pcie_rx":'
        || round(1e4 + random() * 1e6, 1) || ',"pcie_replay":0,"nvlink_err":0,'
        || '"procs":[{{"pid":' || (5000 + g) || ',"mem":' || (63350767616 + g * 134217728)
        || ',"rank":' || (h * {gpus} + g) || '}}]' AS body
    FROM range({seconds}) r(s), range({hosts}) hh(h), range({gpus}) gg(g)
), host AS (
    SELECT h, $a + s * {sample} + 0.1 + h * 0.001, 'host',
        '"cpu":' || round(30 + random() * 15, 1) || ',"load1":9.5,"load5":9.1,'
        || '"load15":9.0,"mem_used":' || (322122547200 + (random() * 2e10)::BIGINT)
        || ',"mem_total":1081145769984,"swap_used":0,"swap_total":0,"disk_path":"/",'
        || '"disk_used":2199023255552,"disk_total":4398046511104,"disk_read":'
        || round(1e6 + random() * 5e7, 1) || ',"disk_write":' || round(1e6 + random() * 5e7, 1)
        || ',"net_rx":' || round(1e9 + random() * 2e9, 1) || ',"net_tx":'
        || round(1e9 + random() * 2e9, 1) || ',"procs":[' || p.procs || ']'
    FROM range({seconds}) r(s), range({hosts}) hh(h), procs p WHERE p.hi = h
), train AS (
    SELECT rank // {gpus}, {t0} + {first} + step * {step_s} + rank * 0.0005, 'train',
        '"job":"{job}","rank":' || rank || ',"step":' || step || ',"epoch":'
        || (step / 50000.0)::DOUBLE || ',"stage":"pretrain","loss":'
        || CASE WHEN step % 250000 = 777 THEN 'null,"nonfinite":"nan"'
                ELSE (2.0 / (1 + step / 20000.0) + 0.5 + random() * 0.05
                      + CASE WHEN step % 100000 = 500 THEN 3.0 ELSE 0 END)::DOUBLE
                     || ',"nonfinite":null' END
        || ',"lr":0.0003,"samples":{samples},"tokens":{tokens},"step_time":'
        || ({step_s} - 0.002 + random() * 0.004) || ',"data_time":'
        || (0.01 + random() * 0.005) || ',"compute_time":' || (0.22 + random() * 0.01)
        || ',"comm_time":' || (0.05 + random() * 0.01) || ',"ckpt_time":null,'
        || '"loss_scale":65536.0,"grad_norm":' || (1.0 + random())
        || ',"extra":{{}},"src":"5f0c' || lpad(rank::VARCHAR, 4, '0') || 'ab:'
        || (step * 400 + 7) || '"'
    FROM range($first_step, $first_step + {steps}) r(step), range({ranks}) rr(rank)
), recs AS (
    SELECT * FROM gpu UNION ALL SELECT * FROM host UNION ALL SELECT * FROM train
    UNION ALL SELECT hi, ts, t, body FROM sparse WHERE ts >= $a AND ts < $b
), numbered AS (
    SELECT hi, t, ts, body, row_number() OVER (PARTITION BY hi ORDER BY ts, t) AS n
    FROM recs
)
SELECT hi, count(*), string_agg('{{"t":"' || t || '","seq":' || (n + base.seq) || ',"ts":'
    || ts || ',' || body || '}}', chr(10) ORDER BY n) || chr(10)
FROM numbered JOIN base USING (hi) GROUP BY hi ORDER BY hi
"""


def _stream_header(name: str) -> bytes:
    return (f'{{"t":"stream","seq":0,"ts":{T0!r},"protocol":1,"agent_version":"0.1.0",'
            f'"journal_id":"j-{name}","from":0,"first":1,"head":0,"daemon":true}}\n').encode()


class _Journals:
    """Every host's journal, one flush window at a time."""

    def __init__(self, shape: Shape, seed: int) -> None:
        self.shape = shape
        self.con = duckdb.connect()
        self.con.execute("SELECT setseed(?)", [seed / 1000])
        self.con.execute("CREATE TABLE sparse (hi INTEGER, ts DOUBLE, t VARCHAR, body VARCHAR)")
        self.con.executemany("INSERT INTO sparse VALUES (?, ?, ?, ?)", _sparse(shape))
        self.con.execute("CREATE TABLE procs (hi INTEGER, procs VARCHAR)")
        g = shape.gpus_per_host
        self.con.executemany("INSERT INTO procs VALUES (?, ?)", [
            (h, ",".join(f'{{"pid":{5000 + i},"rank":{h * g + i},"cpu":99.5,'
                         f'"rss":{34359738368 + i},"state":"R","fds":212}}' for i in range(g)))
            for h in range(shape.hosts)])
        self.con.execute("CREATE TABLE base (hi INTEGER, seq BIGINT)")
        self.con.executemany("INSERT INTO base VALUES (?, 0)", [(h,) for h in range(shape.hosts)])
        self.sql = _WINDOW_SQL.format(
            sample=SAMPLE_S, gpus=g, hosts=shape.hosts, seconds=int(FLUSH_S / SAMPLE_S),
            t0=T0, first=FIRST_STEP_S, step_s=STEP_S, job=JOB, samples=SAMPLES_PER_RANK,
            tokens=SAMPLES_PER_RANK * TOKENS_PER_SAMPLE, steps=STEPS_PER_FLUSH,
            ranks=shape.ranks)

    def window(self, k: int) -> list[tuple[str, bytes]]:
        a = T0 + k * FLUSH_S
        rows = self.con.execute(self.sql, {"a": a, "b": a + FLUSH_S,
                                           "first_step": k * STEPS_PER_FLUSH}).fetchall()
        chunks = []
        for hi, n, text in rows:
            name = self.shape.host(hi)
            data = text.encode()
            chunks.append((name, _stream_header(name) + data if k == 0 else data))
            self.con.execute("UPDATE base SET seq = seq + ? WHERE hi = ?", [n, hi])
        return chunks


def build(path: Path, shape: Shape, seed: int = 7,
          progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Write the recording at `path`; returns where the build's time went."""
    journals = _Journals(shape, seed)
    gen = ingest = maint = 0.0
    records = 0
    started = time.perf_counter()
    with Store(path) as store:
        next_maintenance = T0 + MAINTENANCE_S
        for k in range(shape.flushes):
            t = time.perf_counter()
            chunks = journals.window(k)
            gen += time.perf_counter() - t
            t = time.perf_counter()
            result = store.ingest_many(chunks)
            ingest += time.perf_counter() - t
            if result.malformed or result.failed:
                raise RuntimeError(f"flush {k}: {result.malformed} malformed lines, "
                                   f"failed hosts {result.failed}")
            records += result.stored
            end = T0 + (k + 1) * FLUSH_S
            if end >= next_maintenance:
                t = time.perf_counter()
                apply_retention(store, RetentionPolicy(), now=end)
                store.recluster_levels()
                maint += time.perf_counter() - t
                next_maintenance += MAINTENANCE_S
                if progress is not None:
                    progress(f"  {(end - T0) / 3600:.0f} h of {shape.hours:g} stored, "
                             f"{records:,} records, {time.perf_counter() - started:.0f} s")
        t = time.perf_counter()
    close = time.perf_counter() - t
    return {"records": records, "generate_s": round(gen, 1), "ingest_s": round(ingest, 1),
            "maintenance_s": round(maint, 1), "close_s": round(close, 1),
            "build_s": round(time.perf_counter() - started, 1)}


def span(shape: Shape) -> tuple[float, float]:
    return T0, step_ts(shape.steps - 1)

