"""The example trainer's building blocks: config, data format, sampling, schedule, checkpoints."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from examples.charlm import checkpoint
from examples.charlm.config import ConfigError, load_config
from examples.charlm.data import (
    DataConfig,
    DataError,
    TokenShards,
    WindowSampler,
    is_validation,
    prepare,
    validation_starts,
)
from examples.charlm.model import CharLM, ModelConfig
from examples.charlm.train import lr_at, resume

# ---------------------------------------------------------------- config


def test_defaults_and_overrides() -> None:
    cfg = load_config(None, ["optim.lr=1e-3", "batch_size=8", "amp.enabled=true",
                             "data.source=/somewhere"])  # fmt: skip
    assert cfg["optim"]["lr"] == 1e-3 and cfg["train"]["batch_size"] == 8
    assert cfg["amp"]["enabled"] is True and cfg["data"]["source"] == "/somewhere"
    assert isinstance(cfg["seed"], int)


def test_user_file_overrides_defaults(tmp_path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text("seed = 3\n[model]\nn_layer = 1\n")
    cfg = load_config(path, ["seed=4"])
    assert cfg["seed"] == 4 and cfg["model"]["n_layer"] == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optim.lr=fast"], "optim.lr must be a float, got 'fast'"),
        (["train.batch_size=1.5"], "train.batch_size must be a int"),
        (["nonsense=1"], "unknown setting 'nonsense'"),
        (["dir=x"], "'dir' is ambiguous"),
        (["lr"], "expected KEY=VALUE"),
    ],
)
def test_bad_overrides_are_named(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_bad_config_file_is_named(tmp_path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("seed = = 3\n")
    with pytest.raises(ConfigError, match=r"broken\.toml is not valid TOML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.toml")


def test_lr_warms_up_then_decays_to_min() -> None:
    cfg = load_config(None, ["optim.lr=1.0", "optim.min_lr=0.1", "warmup_steps=10",
                             "max_steps=110"])  # fmt: skip
    assert lr_at(5, cfg) == pytest.approx(0.5)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)
    assert lr_at(110, cfg) == pytest.approx(0.1)
    lrs = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))


def test_model_shape_is_checked_and_starts_near_uniform() -> None:
    with pytest.raises(ValueError, match=r"d_model \(96\) must be divisible by model.n_head \(5\)"):
        ModelConfig(128, 16, 1, 5, 96, 0.0)
    torch.manual_seed(0)
    model = CharLM(ModelConfig(128, 16, 1, 4, 32, 0.0))
    x = torch.randint(0, 128, (4, 16))
    assert model(x, x).item() == pytest.approx(math.log(128), abs=0.2)


# ---------------------------------------------------------------- data


@pytest.fixture
def corpus(tmp_path) -> Path:
    src = tmp_path / "src"
    for i in range(60):
        sub = src / f"pkg{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {i}  # é\n" * 40)
    (src / "tests").mkdir()
    (src / "tests" / "skipped.py").write_text("IGNORED = True\n" * 100)
    return src


def _data_cfg(tmp_path: Path, corpus: Path, **kw) -> DataConfig:
    values = {"dir": tmp_path / "shards", "source": str(corpus), "max_bytes": 10**6,
              "shard_bytes": 8192, "val_per_mille": 200}  # fmt: skip
    values.update(kw)
    return DataConfig(**values)


def test_prepare_builds_checksummed_shards_with_a_fixed_split(tmp_path, corpus) -> None:
    index = prepare(_data_cfg(tmp_path, corpus), log=lambda _m: None)
    shards = index["shards"]
    assert {s["split"] for s in shards} == {"train", "val"}
    assert index["documents"] == 60  # the tests/ folder is not part of the corpus
    total = sum(s["bytes"] for s in shards)
    assert total == index["tokens"]["train"] + index["tokens"]["val"]
    for shard in shards:
        data = (tmp_path / "shards" / shard["file"]).read_bytes()
        assert len(data) == shard["bytes"] and max(data) < 128  # é became '?'
    val_docs = sum(is_validation(f"pkg{i % 3}/mod{i}.py", 200) for i in range(60))
    assert 0 < val_docs < 60
    again = prepare(_data_cfg(tmp_path, corpus), log=lambda _m: None)
    assert again["data_version"] == index["data_version"]
    rebuilt = prepare(_data_cfg(tmp_path, corpus, shard_bytes=4096), log=lambda _m: None)
    assert rebuilt["params"]["shard_bytes"] == 4096 and len(rebuilt["shards"]) > len(shards)


def test_bad_data_settings_are_named(tmp_path, corpus) -> None:
    with pytest.raises(DataError, match="is not a directory"):
        prepare(_data_cfg(tmp_path, tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"val_per_mille must be in 1\.\.999"):
        prepare(_data_cfg(tmp_path, corpus, val_per_mille=0))


def test_sampler_is_deterministic_per_rank_and_step_and_resumable(tmp_path, corpus) -> None:
    index = prepare(_data_cfg(tmp_path, corpus), log=lambda _m: None)
    shards = TokenShards(tmp_path / "shards", index, "train", block_size=32)
    a = WindowSampler(shards, batch_size=4, seed=1, rank=0, world=2)
    b = WindowSampler(shards, batch_size=4, seed=1, rank=0, world=2)
    other_rank = WindowSampler(shards, batch_size=4, seed=1, rank=1, world=2)
    late = a.steps_per_epoch + 3  # a step in the second epoch, asked for first
    assert torch.equal(b.starts(late), a.starts(late))
    assert torch.equal(a.starts(1), b.starts(1))
    assert not torch.equal(a.starts(1), other_rank.starts(1))
    assert not torch.equal(a.starts(2), a.starts(2 + a.steps_per_epoch))
    x, y = a.batch(1)
    assert x.shape == (4, 32) and y.shape == (4, 32) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next characters


def test_validation_windows_are_fixed_and_split_across_ranks(tmp_path, corpus) -> None:
    index = prepare(_data_cfg(tmp_path, corpus), log=lambda _m: None)
    val = TokenShards(tmp_path / "shards", index, "val", block_size=32)
    whole = validation_starts(val, 16, 0, 1)
    parts = [validation_starts(val, 16, r, 2) for r in range(2)]
    assert sorted(torch.cat(parts).tolist()) == sorted(whole.tolist())
    assert torch.equal(whole, validation_starts(val, 16, 0, 1))


def test_damaged_shard_is_reported(tmp_path, corpus) -> None:
    index = prepare(_data_cfg(tmp_path, corpus), log=lambda _m: None)
    first = tmp_path / "shards" / index["shards"][0]["file"]
    first.write_bytes(first.read_bytes()[:100])
    with pytest.raises(DataError, match=r"delete .* to rebuild"):
        TokenShards(tmp_path / "shards", index, index["shards"][0]["split"], 32)


# ---------------------------------------------------------------- checkpoints


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((64,), float(step))}, "step": step, "note": "x"}


def test_save_writes_file_and_marker_and_prunes(tmp_path) -> None:
    for step in (10, 20, 30, 40):
        saved = checkpoint.save(tmp_path, step, _state(step), keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000030.pt", "ckpt-00000030.pt.done", "ckpt-00000040.pt", "ckpt-00000040.pt.done"
    ]  # fmt: skip
    marker = json.loads((tmp_path / "ckpt-00000040.pt.done").read_text())
    assert marker["bytes"] == saved.bytes == (tmp_path / "ckpt-00000040.pt").stat().st_size
    assert marker["sha256"] == saved.sha256 and marker["step"] == 40
    state = checkpoint.load(saved.path)
    assert state["step"] == 40 and torch.equal(state["model"]["w"], torch.full((64,), 40.0))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "truncated"),
        (lambda p: p.write_bytes(b"\0" + p.read_bytes()[1:]), "checksum mismatch"),
        (lambda p: p.with_name(p.name + ".done").unlink(), "no completion marker"),
        (lambda p: p.with_name(p.name + ".done").write_text("{"), "unreadable completion"),
    ],
)
def test_latest_valid_skips_damaged_newest_with_reason(tmp_path, damage, reason) -> None:
    checkpoint.save(tmp_path, 10, _state(10), keep=3)
    newest = checkpoint.save(tmp_path, 20, _state(20), keep=3).path
    damage(newest)
    logged: list[str] = []
    found = checkpoint.latest_valid(tmp_path, logged.append)
    assert found == tmp_path / "ckpt-00000010.pt"
    assert len(logged) == 1 and "ckpt-00000020.pt" in logged[0] and reason in logged[0]
    with pytest.raises(checkpoint.CheckpointError, match=reason):
        checkpoint.load(newest)


def test_no_checkpoint_at_all(tmp_path) -> None:
    assert checkpoint.latest_valid(tmp_path / "none", print) is None


def test_killed_save_leaves_no_usable_checkpoint_and_debris_is_cleared(tmp_path) -> None:
    checkpoint.save(tmp_path, 10, _state(10), keep=3)
    (tmp_path / ".ckpt-00000020.pt.999999.tmp").write_bytes(b"partial")
    (tmp_path / "ckpt-00000015.pt").write_bytes(b"torn, no marker")
    assert checkpoint.latest_valid(tmp_path, lambda _m: None) == tmp_path / "ckpt-00000010.pt"
    checkpoint.save(tmp_path, 30, _state(30), keep=3)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-00000010.pt", "ckpt-00000010.pt.done",
                     "ckpt-00000030.pt", "ckpt-00000030.pt.done"]  # fmt: skip


def _vouch_for(path: Path, data: bytes) -> None:
    """Write `data` as `path` with a marker that matches it: intact bytes, any content."""
    path.write_bytes(data)
    marker = {"step": int(path.stem.split("-")[1]), "file": path.name, "bytes": len(data),
              "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
    path.with_name(path.name + ".done").write_text(json.dumps(marker))


def test_a_marked_checkpoint_that_does_not_load_is_skipped_with_its_reason(tmp_path) -> None:
    checkpoint.save(tmp_path, 10, _state(10), keep=3)
    garbage = tmp_path / "ckpt-00000020.pt"
    _vouch_for(garbage, b"not a torch checkpoint at all")
    logged: list[str] = []
    path, state = checkpoint.load_latest(tmp_path, logged.append)
    assert path == tmp_path / "ckpt-00000010.pt" and state["step"] == 10
    assert len(logged) == 1 and "ckpt-00000020.pt: cannot be loaded" in logged[0]
    with pytest.raises(checkpoint.CheckpointError, match=r"ckpt-00000020\.pt is not usable"):
        checkpoint.load(garbage)


def test_a_checkpoint_torn_after_its_marker_does_not_count_toward_keep(tmp_path) -> None:
    for step in (10, 20):
        checkpoint.save(tmp_path, step, _state(step), keep=2)
    torn = tmp_path / "ckpt-00000020.pt"
    torn.write_bytes(torn.read_bytes()[:100])
    checkpoint.save(tmp_path, 30, _state(30), keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-00000010.pt", "ckpt-00000010.pt.done",
                     "ckpt-00000030.pt", "ckpt-00000030.pt.done"]  # fmt: skip


@pytest.mark.parametrize(("held", "why"), [
    ([1, 2], "list indices must be integers"),
    ("model and optimizer, no step", "it holds no 'step'"),
])
def test_resuming_from_a_checkpoint_of_another_shape_names_it(tmp_path, held, why) -> None:
    """Intact bytes of another program's file reach `resume`: it says the checkpoint does
    not fit, which the trainer prints as one error line, instead of a traceback."""
    model = CharLM(ModelConfig(128, 16, 1, 4, 32, 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if isinstance(held, str):
        held = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    path = tmp_path / "ckpt-00000005.pt"
    buffer = io.BytesIO()
    torch.save(held, buffer)
    _vouch_for(path, buffer.getvalue())
    with pytest.raises(checkpoint.CheckpointError,
                       match=rf"ckpt-00000005\.pt does not fit this model/config: {why}"):
        resume(str(path), tmp_path, model, opt, None, {"data_version": "v"}, None,
               SimpleNamespace(rank=1), lambda _msg: None)


def test_checkpoint_loading_refuses_code(tmp_path) -> None:
    """weights_only=True: a pickle that would run code is rejected, not executed."""

    class Evil:
        def __reduce__(self):
            return (math.floor, (1.5,))

    path = tmp_path / "ckpt-00000001.pt"
    torch.save({"x": Evil()}, path)
    _vouch_for(path, path.read_bytes())
    with pytest.raises(Exception, match=r"[Ww]eights only load failed"):
        checkpoint.load(path)
