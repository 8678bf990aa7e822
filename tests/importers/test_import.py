"""`cockpit import` of TensorBoard runs, JSONL logs and wire recordings, and `cockpit
export`: what is stored equals what TensorBoard's own reader, the log's lines or a live
stream of the same records would give, point for point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from cockpit.importers.mapping import MappingError, field_for, parse_overrides
from cockpit.importers.sources import import_paths
from cockpit.store.export import export_tables
from cockpit.store.schema import RECORD_COLUMNS
from tests.harness.recording import RECORDING, load_recording

COCKPIT = str(Path(sys.executable).parent / "cockpit")
T0 = 1_790_000_000.0


@pytest.mark.parametrize(("name", "field"), [
    ("train/loss", "loss"), ("loss", "loss"), ("Loss/train", "loss"), ("val/loss", "val_loss"),
    ("eval_loss", "val_loss"), ("validation/loss", "val_loss"), ("train/learning_rate", "lr"),
    ("lr-Adam", "lr"), ("grad_norm", "grad_norm"), ("epoch", "epoch"),
    ("eval/accuracy", "metric"), ("throughput", "extra"),
])
def test_names_map_by_the_documented_rules(name: str, field: str) -> None:
    assert field_for(name) == field


def test_an_override_beats_the_rules_and_a_bad_one_is_named() -> None:
    assert field_for("eval/ppl", parse_overrides(["eval/ppl=val_loss"])) == "val_loss"
    with pytest.raises(MappingError, match="FIELD must be one of"):
        parse_overrides(["loss=weight"])


RESTART_AT, RESTART_T = 10, T0 + 100.0  # run b: steps 0-29, then again from step 10


def _write_steps(w: Any, steps: range, t0: float, shift: float = 0.0) -> None:
    """A SummaryWriter's scalars for `steps`, 0.5 s of wall time per step from `t0`."""
    for step in steps:
        t = t0 + 0.5 * step
        w.add_scalar("train/loss", 3.0 / (step + 1) + 0.1234567 + shift, step, walltime=t)
        w.add_scalar("train/lr", 1e-3 * 0.99 ** step, step, walltime=t)
        w.add_scalar("throughput", 100.0 + step + shift, step, walltime=t)
        if step % 10 == 9:
            w.add_scalar("val/loss", 2.0 / (step + 1) + shift, step, walltime=t)


def _tensorboard_runs(root: Path) -> None:
    """Two runs written by torch's SummaryWriter, with wall times 0.5 s per step apart;
    the second restarts from step 10 in a new event file after reaching step 29.
    TensorBoard's accumulator keeps both attempts' points of steps 10-29 (it purges
    only after a session restart marker, which SummaryWriter does not write), and the
    import must hold exactly what it holds, in its order."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(root / "a"))
    _write_steps(w, range(40), T0)
    w.close()
    w = SummaryWriter(str(root / "b"))
    _write_steps(w, range(30), T0)
    w.close()
    w = SummaryWriter(str(root / "b"), filename_suffix=".restart")
    _write_steps(w, range(RESTART_AT, 40), RESTART_T, shift=0.5)
    w.close()


def _accumulated(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(run), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.starts
def test_tensorboard_runs_import_every_point_exactly(tmp_path: Path) -> None:
    tb = tmp_path / "tb"
    _tensorboard_runs(tb)
    rec = tmp_path / "rec.duckdb"
    done = subprocess.run([COCKPIT, "import", str(tb), "-o", str(rec)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "job a on host import: 124 points -> 45 records" in done.stdout, done.stdout
    con = duckdb.connect(str(rec), read_only=True)
    for job in ("a", "b"):
        want = _accumulated(tb / job)
        stored = {
            "train/loss": con.execute("SELECT step, loss FROM train WHERE job = ? AND loss "
                                      "IS NOT NULL ORDER BY ts, step", [job]).fetchall(),
            "train/lr": con.execute("SELECT step, lr FROM train WHERE job = ? AND lr IS NOT "
                                    "NULL ORDER BY ts, step", [job]).fetchall(),
            "throughput": [(s, float(v)) for s, v in con.execute(
                "SELECT step, (extra->>'throughput') FROM train WHERE job = ? AND "
                "(extra->>'throughput') IS NOT NULL ORDER BY ts, step", [job]).fetchall()],
            "val/loss": con.execute("SELECT step, loss FROM eval WHERE job = ? ORDER BY ts, "
                                    "step", [job]).fetchall(),
        }
        assert stored == want  # float32 values compare equal, every point
        ts = con.execute("SELECT min(ts), max(ts) FROM train WHERE job = ?", [job]).fetchone()
        last = T0 + 0.5 * 39 if job == "a" else RESTART_T + 0.5 * 39
        assert ts == (T0, last)  # TensorBoard's wall times kept
    # Run b: both attempts at steps 10-29, each at its own wall time, as TensorBoard has them.
    assert sorted(len(v) for v in _accumulated(tb / "b").values()) == [6, 60, 60, 60]
    assert con.execute("SELECT count(*), min(ts) FROM train WHERE job = 'b' AND ts >= ?",
                       [RESTART_T]).fetchone() == (40 - RESTART_AT, RESTART_T + 0.5 * RESTART_AT)
    con.close()
    report = json.loads(subprocess.run([COCKPIT, "report", str(rec), "--format", "json",
                                        "--job", "a"], capture_output=True, text=True,
                                       timeout=120).stdout)
    assert report["progress"]["step"] == 39
    assert report["progress"]["steps_per_second"] == pytest.approx(2.0, rel=0.05)


def test_a_jsonl_log_imports_its_lines_and_counts_what_it_skips(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "ts": T0 + s, "loss": 1.0 / (s + 1), "lr": 0.1,
                         "phase": "train", **({"val_loss": 0.5} if s == 4 else {})})
             for s in range(5)]
    lines += ["not json", "[1, 2]", json.dumps({"step": 10**20, "loss": 1.0}),
              json.dumps({"step": 6, "ts": "soon", "loss": 1.0}),
              json.dumps({"step": 7, "ts": T0 + 7, "loss": float("inf")})]
    log.write_text("\n".join(lines) + "\n")
    rec = tmp_path / "rec.duckdb"
    [done] = import_paths([log], rec)
    assert done.kind == "jsonl" and done.job == "metrics"
    assert done.counts.skipped == {"not JSON": 1, "not a JSON object": 1,
                                   "step out of range": 1, "time not a valid timestamp": 1}
    con = duckdb.connect(str(rec), read_only=True)
    rows = con.execute("SELECT step, loss, lr, nonfinite FROM train ORDER BY step").fetchall()
    assert rows[:5] == [(s, 1.0 / (s + 1), 0.1, None) for s in range(5)]
    assert rows[5] == (7, None, None, "inf")  # Python's "Infinity": kept as the protocol says
    assert con.execute("SELECT step, loss FROM eval").fetchall() == [(4, 0.5)]
    con.close()


@pytest.mark.slow
def test_a_wire_recording_imports_to_the_same_store_as_a_live_stream_of_it(
        tmp_path: Path) -> None:
    live = load_recording(tmp_path / "live.duckdb")
    imported = tmp_path / "imported.duckdb"
    [done] = import_paths([RECORDING], imported, host="gpu-host-1")
    assert done.kind == "wire"
    a = duckdb.connect(str(live), read_only=True)
    b = duckdb.connect(str(imported), read_only=True)
    # Every column of every record table, row for row: the same store.
    for table in RECORD_COLUMNS:
        q = f'SELECT * FROM "{table}" ORDER BY host, seq'
        rows = a.execute(q).fetchall()
        assert b.execute(q).fetchall() == rows, table
    for table in ("train", "gpu", "event", "eval", "hello"):  # none of them left empty
        assert a.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] > 0, table
    a.close()
    b.close()


@pytest.mark.slow
def test_export_round_trips_parquet_and_writes_csv(recorded_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([COCKPIT, "export", str(recorded_store), "-o", str(out), "--what",
                           "train", "--what", "gpu"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["gpu.parquet", "train.parquet"]
    con = duckdb.connect(str(recorded_store), read_only=True)
    stored = con.execute("SELECT * FROM train ORDER BY host, seq").fetchall()
    con.close()
    assert duckdb.sql(f"SELECT * FROM '{out / 'train.parquet'}'").fetchall() == stored
    csv = subprocess.run([COCKPIT, "export", str(recorded_store), "-o", str(out), "--what",
                          "eval", "--format", "csv"], capture_output=True, text=True, timeout=120)
    assert csv.returncode == 0 and (out / "eval.csv").read_text().startswith("host,seq,ts")
    bad = subprocess.run([COCKPIT, "export", str(recorded_store), "-o", str(out), "--what",
                          "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no such table: nope" in bad.stderr


@pytest.mark.slow
def test_export_of_a_series_round_trips(recorded_store: Path, tmp_path: Path) -> None:
    """`--what TABLE.SERIES`: the stored values of one column, keyed, read back equal."""
    out = tmp_path / "out"
    written = export_tables(recorded_store, out, "parquet", ["train.loss", "gpu.temp"])
    assert written == [out / "train.loss.parquet", out / "gpu.temp.parquet"]
    con = duckdb.connect(str(recorded_store), read_only=True)
    for path, query in (
            (written[0], "SELECT host, seq, ts, job, rank, step, loss FROM train "
                         "WHERE loss IS NOT NULL ORDER BY host, seq"),
            (written[1], "SELECT host, seq, ts, gpu, temp FROM gpu WHERE temp IS NOT NULL "
                         "ORDER BY host, seq")):
        stored = con.execute(query).fetchall()
        assert len(stored) > 10
        assert duckdb.sql(f"SELECT * FROM '{path}'").fetchall() == stored
    con.close()
    with pytest.raises(ValueError, match=r"train has no series 'weight' .*loss"):
        export_tables(recorded_store, out, "csv", ["train.weight"])
    with pytest.raises(ValueError, match="train has no series 'step'"):
        export_tables(recorded_store, out, "csv", ["train.step"])
