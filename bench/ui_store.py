"""Recordings for the UI benchmark, generated inside DuckDB through the real schema.

A job of `RANKS` ranks on `HOSTS` hosts (one GPU per rank) trains for `steps` steps of
`STEP_S` seconds. Around it, at the rates a real agent produces them: a GPU sample per
GPU and a host sample per host every second, an evaluation every `EVAL_EVERY` steps, a
checkpoint every `CHECKPOINT_EVERY` steps, a log line every `LOG_EVERY` steps, a few
interruptions with their recoveries, an XID, a spool error and agent alerts, plus a
`hello` and a `hosts` row per host. Rows are inserted in time order (as ingest would
store them) and the level tables are filled the way ingest fills them
(`cockpit.store.levels.update_levels`), then clustered as hourly maintenance does
(`cluster_levels`). (host, seq) is unique across tables: each table takes its own seq
range per host.
"""

from __future__ import annotations

import time
from pathlib import Path

from cockpit.store import Store
from cockpit.store.levels import cluster_levels, update_levels

RANKS = 8
HOSTS = 2
GPUS_PER_HOST = RANKS // HOSTS
STEP_S = 0.3
T0 = 1_700_000_000.0
FIRST_STEP_TS = T0 + 10.0
EVAL_EVERY = 200
CHECKPOINT_EVERY = 5000
LOG_EVERY = 100
SAMPLES_PER_RANK = 16
TOKENS_PER_SAMPLE = 2048
JOB = "bench-job"
SEQ_BLOCK = 10**12  # seq range of one table on one host
HOST_NAMES = tuple(f"gpu-node-{h}" for h in range(HOSTS))
_TABLE_SEQ = {"hello": 0, "run": 1, "train": 2, "eval": 3, "event": 4, "log": 5,
              "alert": 6, "gpu": 7, "host_sample": 8}


def _seq(table: str, local: str) -> str:
    """SQL for a seq unique per host across tables: the table's block plus a local index."""
    return f"({_TABLE_SEQ[table]} * {SEQ_BLOCK} + ({local}) + 1)"


def _host(index: str) -> str:
    return f"'gpu-node-' || ({index})::VARCHAR"


def span_seconds(steps: int) -> float:
    """Recording time from the first record to the last step."""
    return FIRST_STEP_TS - T0 + steps * STEP_S + 1.0


def build(path: Path, steps: int) -> float:
    """Write a recording of `steps` steps at `path`; returns the seconds it took."""
    start = time.perf_counter()
    seconds = int(span_seconds(steps))
    with Store(path) as store:
        with store.write_cursor() as cur:
            _facts(cur, steps)
            _train(cur, steps)
            _samples(cur, seconds)
            _sparse(cur, steps)
            for table in ("train", "gpu", "host_sample"):
                update_levels(cur, table, dict.fromkeys(HOST_NAMES, 0))
            cluster_levels(cur)
        store.checkpoint()
    return time.perf_counter() - start


def _facts(cur, steps: int) -> None:
    for h, host in enumerate(HOST_NAMES):
        gpus = ", ".join(
            f'{{"index": {g}, "uuid": "GPU-{h}-{g}", "name": "H100", '
            f'"mem_total": {80 << 30}, "simulated": false}}'
            for g in range(GPUS_PER_HOST)
        )
        cur.execute(
            "INSERT INTO hello (host, seq, ts, agent_version, protocol, hostname, boot_id, "
            "pid, python, platform, cpu_count, mem_total, gpu_source, gpu_state, driver, "
            "gpus, env, psutil, interval) VALUES (?, ?, ?, '1.0', 1, ?, 'boot-1', 100, "
            "'3.12.1', 'Linux', 64, ?, 'nvml', 'ok', '550.54', ?, ?, true, 1.0)",
            [host, _TABLE_SEQ["hello"] * SEQ_BLOCK + 1, T0, host, 512 << 30, f"[{gpus}]",
             '{"torch": "2.13.0", "cuda": "12.4"}'],
        )
        cur.execute(
            "INSERT INTO hosts (host, address, state, detail, state_ts, journal_id, "
            "high_water) VALUES (?, ?, 'streaming', '', ?, ?, ?)",
            [host, f"10.0.0.{h + 1}", T0, f"j-{host}", 9 * SEQ_BLOCK],
        )
    cur.execute(
        "INSERT INTO run (host, seq, ts, job, rank, total_steps, stages, config, seed, "
        "flops_per_step, peak_flops, world_size, tags) VALUES (?, ?, ?, ?, 0, ?, "
        "'[\"pretrain\"]', '{\"lr\": 0.0003}', 7, 4e15, 9.9e14, ?, '[\"bench\"]')",
        [HOST_NAMES[0], _TABLE_SEQ["run"] * SEQ_BLOCK + 1, T0 + 1, JOB, int(steps * 1.2),
         RANKS],
    )


def _train(cur, steps: int) -> None:
    """`steps` × `RANKS` rows; loss falls with noise, a spike every 100 k steps."""
    per_host = RANKS // HOSTS
    cur.execute(
        f"""
        INSERT INTO train (host, seq, ts, job, rank, step, epoch, stage, loss, nonfinite,
            lr, samples, tokens, step_time, data_time, compute_time, comm_time,
            loss_scale, grad_norm)
        SELECT {_host(f"(i % {RANKS}) // {per_host}")},
            {_seq("train", f"i // {RANKS} * {per_host} + (i % {RANKS}) % {per_host}")},
            {FIRST_STEP_TS} + (i // {RANKS}) * {STEP_S} + (i % {RANKS}) * 0.001,
            '{JOB}', (i % {RANKS})::INTEGER, i // {RANKS}, (i // {RANKS}) / 50000.0,
            'pretrain',
            CASE WHEN (i // {RANKS}) % 250000 = 777 THEN NULL
                 ELSE 2.0 / (1 + (i // {RANKS}) / 20000.0) + 0.5 + random() * 0.05
                      + CASE WHEN (i // {RANKS}) % 100000 = 500 THEN 3.0 ELSE 0 END END,
            CASE WHEN (i // {RANKS}) % 250000 = 777 THEN 'nan' END,
            3e-4, {SAMPLES_PER_RANK}, {SAMPLES_PER_RANK * TOKENS_PER_SAMPLE},
            {STEP_S} - 0.002 + random() * 0.004, 0.01 + random() * 0.005,
            0.22 + random() * 0.01, 0.05 + random() * 0.01, 65536.0, 1.0 + random()
        FROM range({steps * RANKS}) r(i)
        """
    )


def _samples(cur, seconds: int) -> None:
    """One GPU sample per GPU and one host sample per host, every second."""
    per_second = HOSTS * GPUS_PER_HOST
    cur.execute(
        f"""
        INSERT INTO gpu (host, seq, ts, gpu, uuid, sim, util, mem_util, mem_used, mem_total,
            temp, power, power_limit, sm_clock, mem_clock, throttle, ecc_vol_corr,
            ecc_vol_unc, ecc_agg_corr, ecc_agg_unc, retired_pages, remap_pending,
            pcie_tx, pcie_rx, pcie_replay, nvlink_err)
        SELECT {_host(f"(i % {per_second}) // {GPUS_PER_HOST}")},
            {_seq("gpu", f"i // {per_second} * {GPUS_PER_HOST} + i % {GPUS_PER_HOST}")},
            {T0} + i // {per_second} + 0.1, (i % {GPUS_PER_HOST})::INTEGER,
            'GPU-' || (i % {per_second})::VARCHAR, false, 90 + random() * 8, 40.0,
            {60 << 30}, {80 << 30}, 68 + random() * 4, 600 + random() * 50, 700.0, 1800,
            2600, 0, 0, 0, 0, 0, 0, false, 1e5, 1e5, 0, 0
        FROM range({seconds * per_second}) r(i)
        """
    )
    cur.execute(
        f"""
        INSERT INTO host_sample (host, seq, ts, cpu, load1, load5, load15, mem_used,
            mem_total, swap_used, swap_total, disk_path, disk_used, disk_total, disk_read,
            disk_write, net_rx, net_tx)
        SELECT {_host(f"i % {HOSTS}")}, {_seq("host_sample", f"i // {HOSTS}")},
            {T0} + i // {HOSTS} + 0.5, 30 + random() * 10, 8.0, 8.0, 8.0, {200 << 30},
            {512 << 30}, 0, 0, '/data', {400 << 30}, {1000 << 30}, 1e6, 1e6, 1e8, 1e8
        FROM range({seconds * HOSTS}) r(i)
        """
    )


def _sparse(cur, steps: int) -> None:
    """Evaluations, checkpoints, logs, lifecycle events and alerts."""
    head = HOST_NAMES[0]

    def step_ts(expr: str) -> str:
        return f"{FIRST_STEP_TS} + ({expr}) * {STEP_S}"

    cur.execute(
        f"""
        INSERT INTO eval (host, seq, ts, job, rank, step, loss, metrics)
        SELECT '{head}', {_seq("eval", "i")}, {step_ts(f"(i + 1) * {EVAL_EVERY}")} + 0.2,
            '{JOB}', 0, (i + 1) * {EVAL_EVERY},
            1.0 / (1 + (i + 1) * {EVAL_EVERY} / 20000.0) + 0.8, '{{"acc": 0.5}}'
        FROM range({steps // EVAL_EVERY}) r(i)
        """
    )
    cur.execute(
        f"""
        INSERT INTO log (host, seq, ts, job, rank, stream, line)
        SELECT '{head}', {_seq("log", "i")}, {step_ts(f"i * {LOG_EVERY}")} + 0.25, '{JOB}',
            0, 'stdout', 'step ' || (i * {LOG_EVERY})::VARCHAR || ' loss ok'
        FROM range({steps // LOG_EVERY + 1}) r(i)
        """
    )
    events: list[tuple[float, str, str, int | None, str, str]] = [
        (T0 + 5, head, "job_started", None, "job started", "{}"),
        (T0 + 60, head, "spool_error", None, "malformed spool line",
         '{"file": "spool/rank-1.ndjson", "line": 17, "error": "not JSON"}'),
        (T0 + 90, HOST_NAMES[-1], "xid", None, "XID 13 on GPU 1", '{"gpu": 1, "xid": 13}'),
    ]
    for frac in (0.3, 0.6):
        at = int(steps * frac)
        ts = FIRST_STEP_TS + at * STEP_S
        events.append((ts + 0.15, HOST_NAMES[-1], "interruption", at, "rank 5 exited",
                       f'{{"cause": "rank 5 killed (SIGKILL)", "detected_at": {ts + 0.15}}}'))
        events.append((ts + 0.18, HOST_NAMES[-1], "recovery", at, "job recovered",
                       '{"cause": "rank 5 killed (SIGKILL)", "recovery_seconds": 0.03, '
                       '"steps_lost": 12, "restart_count": 1}'))
    n_ckpt = steps // CHECKPOINT_EVERY
    for i, (ts, host, kind, step, msg, data) in enumerate(sorted(events)):
        cur.execute(
            "INSERT INTO event (host, seq, ts, kind, job, rank, step, msg, data) "
            "VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?)",
            [host, _TABLE_SEQ["event"] * SEQ_BLOCK + n_ckpt + 1 + i, ts, kind,
             JOB if kind != "xid" else None, step, msg, data],
        )
    cur.execute(
        f"""
        INSERT INTO event (host, seq, ts, kind, job, rank, step, msg, data)
        SELECT '{head}', {_seq("event", "i")},
            {step_ts(f"(i + 1) * {CHECKPOINT_EVERY}")} + 0.21, 'checkpoint_saved', '{JOB}',
            0, (i + 1) * {CHECKPOINT_EVERY}, 'checkpoint saved',
            '{{"seconds": 20.0, "bytes": 1073741824}}'
        FROM range({n_ckpt}) r(i)
        """
    )
    cur.execute(
        f"""
        INSERT INTO alert (host, seq, ts, job, rank, kind, severity, code, "where", what,
            hint)
        SELECT '{HOST_NAMES[-1]}', {_seq("alert", "i")},
            {T0} + 100 + i * {max(span_seconds(steps) / 4, 1.0)}, NULL, NULL, 'resource',
            'warning', 'thermal_throttle', '{{"gpu": 1}}', 'GPU 1 throttling (agent)',
            'check cooling'
        FROM range(3) r(i)
        """
    )
