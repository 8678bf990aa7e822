"""Operator controls inside a real Hugging Face Trainer (a tiny GPT-2 built from a config,
on the CPU): each one done, or refused with the reason, and acknowledged only once done;
and a resume from the checkpoint folder the Trainer saved, continuing at its step."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.wire import checkpoints
from agent.wire.checkpoints import RESUME_ENV

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it
torch = pytest.importorskip("torch")

from torch.utils.data import Dataset  # noqa: E402

from agent.hook import resume_checkpoint  # noqa: E402
from agent.hook.hf import CockpitCallback  # noqa: E402

VOCAB, SEQ, BATCH = 64, 16, 4


class _Tokens(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class _Operator:
    """Writes control lines into the job's control file at chosen steps, as the agent
    does for `cockpit adjust` (listed before the cockpit's callback: it runs first)."""

    def __init__(self, control_file: Path, at: dict[int, list[dict]]) -> None:
        self.control_file = control_file
        self.at = at

    def __getattr__(self, name: str):
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        self.control_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.control_file, "a") as f:
            for i, knobs in enumerate(self.at.get(state.global_step, [])):
                f.write(json.dumps({"id": f"op{state.global_step}-{i}", "ts": time.time(),
                                    "knobs": knobs}) + "\n")


def _train(tmp_path: Path, max_steps: int, at: dict[int, list[dict]], resume: str | None = None,
           **overrides) -> tuple:
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    kwargs = dict(output_dir=str(tmp_path / "out"), max_steps=max_steps, logging_steps=1,
                  save_strategy="no", eval_strategy="no", per_device_train_batch_size=BATCH,
                  per_device_eval_batch_size=BATCH, learning_rate=1e-3, seed=3, report_to=[],
                  use_cpu=True, disable_tqdm=True)
    kwargs.update(overrides)
    args = transformers.TrainingArguments(**kwargs)
    cb = CockpitCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    operator = _Operator(tmp_path / "run" / "control" / "job-a.ndjson", at)
    torch.manual_seed(0)
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=_Tokens(64, 0),
        eval_dataset=_Tokens(8, 1) if kwargs["eval_strategy"] != "no" else None,
        callbacks=[operator, cb])
    trainer.train(resume_from_checkpoint=resume)
    cb.close()
    return trainer, cb


def _acks(spool) -> dict[str, dict]:
    return {e["data"]["id"]: e for e in spool("event") if e["kind"] == "control_ack"}


@pytest.fixture(autouse=True)
def _offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv(RESUME_ENV, raising=False)
    monkeypatch.delenv("COCKPIT_CHECKPOINT_DIR", raising=False)


def test_lr_scale_shows_in_the_next_step_and_what_cannot_be_done_is_refused(
        tmp_path: Path, spool, monkeypatch) -> None:
    # Two set-up mistakes the callback tells: a restart the script does not resume, and
    # checkpoints saved where the agent does not look.
    monkeypatch.setenv(RESUME_ENV, "/nowhere/checkpoint-9")
    monkeypatch.setenv("COCKPIT_CHECKPOINT_DIR", str(tmp_path / "elsewhere"))
    trainer, _cb = _train(tmp_path, 6, {3: [{"lr_scale": 0.1}, {"eval_now": True},
                                            {"dropout": 0.2}]})
    scheduled = {h["step"]: h["learning_rate"] for h in trainer.state.log_history
                 if "learning_rate" in h}
    lrs = {r["step"]: r["lr"] for r in spool("train")}
    assert sorted(lrs) == [1, 2, 3, 4, 5, 6]
    for step in (1, 2, 3):
        assert lrs[step] == pytest.approx(scheduled[step])
    for step in (4, 5, 6):  # the optimizer stepped with the scaled LR from step 4
        assert lrs[step] == pytest.approx(scheduled[step] * 0.1)
    assert scheduled[6] > 0  # the schedule itself went on unscaled
    acks = _acks(spool)
    lr_ack = acks["op3-0"]
    assert lr_ack["step"] == 4 and lr_ack["data"]["ok"] is True
    assert lr_ack["data"]["knobs"] == {"lr_scale": 0.1} and lr_ack["msg"] == "applied lr_scale=0.1"
    assert acks["op3-1"]["data"]["ok"] is False
    assert acks["op3-1"]["msg"] == ("refused eval_now: the Trainer has no evaluation set up "
                                    "(eval_strategy='no'): give it an eval_dataset and an "
                                    "eval_strategy")
    assert acks["op3-2"]["data"]["ok"] is False
    assert "does not apply dropout" in acks["op3-2"]["msg"]
    told = [r["line"] for r in spool("log")]
    assert any("restarted this job from /nowhere/checkpoint-9, but the Trainer starts at "
               "step 0" in line for line in told), told
    assert any("the agent looks for checkpoints in " + str(tmp_path / "elsewhere") in line
               for line in told), told
    assert not [e for e in spool("event") if e["kind"] == "resumed"]


def test_checkpoint_and_eval_now_are_done_then_acknowledged(tmp_path: Path, spool) -> None:
    _train(tmp_path, 5, {2: [{"checkpoint_now": True}], 4: [{"eval_now": True}]},
           eval_strategy="steps", eval_steps=1000)
    folder = tmp_path / "out" / "checkpoint-2"
    found, why = checkpoints.inspect(folder)
    assert why is None and found.kind == "dir" and found.step == 2
    assert checkpoints.newest_valid(tmp_path / "out")[0].path == folder
    saved = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert [(e["step"], e["data"]["path"]) for e in saved] == [(2, str(folder))]
    # Step 4's evaluation is the operator's; the Trainer evaluates at its last step too.
    assert [e["step"] for e in spool("eval")] == [4, 5]
    acks = _acks(spool)
    assert (acks["op2-0"]["step"], acks["op2-0"]["msg"]) == (2, "applied checkpoint_now=True")
    assert (acks["op4-0"]["step"], acks["op4-0"]["msg"]) == (4, "applied eval_now=True")


def test_a_restart_resumes_at_the_checkpoint_step_and_says_so(
        tmp_path: Path, spool, monkeypatch) -> None:
    _train(tmp_path, 4, {2: [{"checkpoint_now": True}, {"lr_scale": 0.5}]})
    folder = tmp_path / "out" / "checkpoint-2"
    assert checkpoints.newest_valid(tmp_path / "out")[0].path == folder
    monkeypatch.setenv(RESUME_ENV, str(folder))  # as the agent starts the restart
    trainer, _cb = _train(tmp_path, 6, {}, resume=resume_checkpoint())
    train = spool("train")
    steps = [r["step"] for r in train]
    assert steps == [1, 2, 3, 4, 3, 4, 5, 6]  # the second run continued after step 2
    (resumed,) = [e for e in spool("event") if e["kind"] == "resumed"]
    assert resumed["step"] == 2 and resumed["data"]["path"] == str(folder)
    assert resumed["msg"] == "resumed from checkpoint-2 at step 2"
    # The operator's factor, set before the restart, holds from its first step on.
    scheduled = {h["step"]: h["learning_rate"] for h in trainer.state.log_history
                 if "learning_rate" in h}
    assert [r["lr"] for r in train[4:]] == pytest.approx([scheduled[s] * 0.5
                                                          for s in (3, 4, 5, 6)])
