"""A real Transformers Trainer logging every 5 steps, counted by the cockpit as it counts.

The records go the way they go in use: the adapter's callback writes the spool, the
agent's spool tailer journals it, the journal's bytes are ingested into a store, and the
cockpit's read model (the snapshot every pane and the report draw from) reads it. Its
steps/s, samples/s, samples seen and ETA must agree with the Trainer's own figures
(`train_steps_per_second`, `train_samples_per_second` over `train_runtime`, and the
remaining steps at the speed of the steps it saw, timed by a callback of the test's own)
within 25 %: one record per 5 steps counted as one step was 5x off. Skipped where the
`adapters` extra is not installed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolTailer
from cockpit.read.source import build_snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import header

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

from agent.hook.hf import CockpitCallback  # noqa: E402
from tests.trainer.test_adapters_real import VOCAB, _RandomTokens  # noqa: E402

MAX_STEPS = 60
LOG_EVERY = 5
BATCH = 4
# Reading an item takes this long, so that a step's time is mostly steady waiting (the
# same on a loaded machine) and the Trainer's start-up (in its runtime, before any
# record) a small part of the run.
ITEM_PAUSE = 0.04
# The Trainer's runtime includes its start-up and the steps before the first record,
# which the cockpit (timing from the first record on) does not see; on a loaded machine
# that part runs slower and the two speeds part by up to ~15 %. A record per 5 steps
# counted as one step is 5x off, well outside this.
AGREE = 0.25
# Where the ETA is read. Its reference is the speed of the steps before it, as the test's
# own callback timed them: the Trainer's figure covers the whole run, and a shared
# machine's load can change in the steps after (once 3x slower, an ETA 25 % off it).
ETA_AT = 50


class _StepClock(transformers.TrainerCallback):  # type: ignore[misc]
    """When each optimizer step ended, by the Trainer's own step count."""

    def __init__(self) -> None:
        self.ended: dict[int, float] = {}

    def on_step_end(self, args: object, state: object, control: object,
                    **kwargs: object) -> None:
        self.ended[int(getattr(state, "global_step", 0))] = time.perf_counter()


def _ingest(run_dir: Path, state: Path, store: Store) -> None:
    """The spool journaled by the agent's tailer, and the journal's bytes stored as a
    stream from the host sends them."""
    journal = Journal(state)
    try:
        SpoolTailer(journal, [run_dir], settle=0.0).poll()
    finally:
        journal.close()
    reader = JournalReader(state)
    first, head = reader.bounds()
    store.ingest("h1", header(first=first, head=head) + b"".join(reader.chunks(0)))


@pytest.mark.slow
def test_the_cockpit_counts_a_trainer_logging_every_5_steps_as_the_trainer_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=MAX_STEPS, logging_steps=LOG_EVERY,
        save_strategy="no", per_device_train_batch_size=BATCH, learning_rate=1e-3, seed=5,
        report_to=[], use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    cb = CockpitCallback(run_dir=str(run_dir), job="hf", register_atexit=False)
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=_RandomTokens(MAX_STEPS * BATCH, 0, pause=ITEM_PAUSE),
        callbacks=[cb, clock := _StepClock()],
    )  # fmt: skip
    own = trainer.train().metrics
    cb.close()
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["step"] for e in logged] == list(range(LOG_EVERY, MAX_STEPS + 1, LOG_EVERY))

    with Store(tmp_path / "hf.duckdb") as store:
        _ingest(run_dir, tmp_path / "state", store)
        reader = StoreReader(store)
        end = build_snapshot(reader, until_ts=None, label="REPLAY")
        with store.cursor() as cur:
            (at_ts,) = cur.execute("SELECT max(ts) FROM train WHERE step = ?",
                                   [ETA_AT]).fetchone()
            per_step = sorted(t / LOG_EVERY for (t,) in cur.execute(
                "SELECT step_time FROM train WHERE step_time IS NOT NULL").fetchall())
        later = build_snapshot(StoreReader(store), until_ts=at_ts, label="REPLAY", now=at_ts)

    # The steps the ETA had seen, after the first record's (whose first step holds the
    # start-up), as the test's own callback timed them.
    seen = (clock.ended[ETA_AT] - clock.ended[LOG_EVERY]) / (ETA_AT - LOG_EVERY)
    p, f = end.progress, end.efficiency
    print(f"cockpit {p.steps_per_second:.3f} steps/s, {f.samples_per_s:.2f} samples/s, "
          f"step {f.step_time_median:.4f} s, ETA at {ETA_AT} {later.progress.eta_seconds:.2f} s "
          f"(steps before it {seen:.4f} s each); "
          f"Trainer {own['train_steps_per_second']:.3f} steps/s, "
          f"{own['train_samples_per_second']:.2f} samples/s, runtime {own['train_runtime']} s")
    assert p.step == MAX_STEPS and p.total_steps == MAX_STEPS
    # Every sample the Trainer trained on, not one batch per record.
    assert p.samples == MAX_STEPS * BATCH == round(
        own["train_samples_per_second"] * own["train_runtime"])
    assert p.steps_per_second == pytest.approx(own["train_steps_per_second"], rel=AGREE)
    assert f.samples_per_s == pytest.approx(own["train_samples_per_second"], rel=AGREE)
    # A median (the report's "median step time"): of one step's time, a fifth of a record's.
    mid = len(per_step) // 2
    assert f.step_time_median == pytest.approx(
        per_step[mid] if len(per_step) % 2 else (per_step[mid - 1] + per_step[mid]) / 2)
    # The steps left at the speed of the steps it had seen.
    m = later.progress
    assert m.step == ETA_AT and m.samples == ETA_AT * BATCH
    assert m.eta_seconds == pytest.approx((MAX_STEPS - ETA_AT) * seen, rel=AGREE)
