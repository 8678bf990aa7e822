"""The reference trainer killed and resumed continues bit for bit (CPU, same seed).

Dropout is switched on so that the random generators matter: a resume that restored
weights, optimizer and data order but not each rank's generator states would draw other
dropout masks and show a different loss from the first step after the resume.
"""

from __future__ import annotations

import random
import time

import numpy
import pytest
import torch

from examples.charlm import checkpoint
from tests.harness.torchrun import spool_files

# Dropout on; evaluations at other steps in the resumed run than in the uninterrupted one
# (at its start, then every 6) must not disturb training either.
SETTINGS = ["--set", "model.dropout=0.1", "--set", "checkpoint.every=8",
            "--set", "eval.every=6", "--set", "control.every=4"]  # fmt: skip
STEPS = 24
KILLED_AT = 13  # after the checkpoint of step 8: steps 9..13 are trained twice


def _losses(files) -> dict[tuple[int, int], float]:
    """{(rank, step): loss} of the train records in `files`; a step seen twice fails."""
    found: dict[tuple[int, int], float] = {}
    for _header, records in files:
        for r in records:
            if r["t"] == "train":
                key = (r["rank"], r["step"])
                assert key not in found, f"step {key} reported twice"
                found[key] = r["loss"]
    return found


def test_generator_states_survive_a_weights_only_checkpoint(tmp_path) -> None:
    """Python, NumPy and torch CPU draws after a restore repeat those after the capture,
    through the real save/load path (`weights_only=True`)."""
    random.seed(1)
    numpy.random.seed(2)
    torch.manual_seed(3)
    cpu = torch.device("cpu")
    saved = checkpoint.save(tmp_path, 1, {"rng": checkpoint.capture_rng(cpu)}, keep=1)

    def draws() -> tuple:
        return (random.random(), random.gauss(0, 1), float(numpy.random.standard_normal()),
                torch.rand(3).tolist())  # fmt: skip

    first = draws()
    checkpoint.restore_rng(checkpoint.load(saved.path)["rng"], cpu)
    assert draws() == first


def test_restoring_a_state_of_another_shape_names_it() -> None:
    state = checkpoint.capture_rng(torch.device("cpu"))
    state["torch_cpu"] = torch.zeros(7, dtype=torch.uint8)
    with pytest.raises(checkpoint.CheckpointError,
                       match="random generator state does not fit: torch_cpu"):  # fmt: skip
        checkpoint.restore_rng(state, torch.device("cpu"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_and_resumed_two_ranks_match_the_uninterrupted_run_bit_for_bit(
    tmp_path, charlm_data, run_charlm
) -> None:
    whole = run_charlm(tmp_path / "whole", nproc=2, steps=STEPS, data_dir=charlm_data,
                       extra_args=SETTINGS)  # fmt: skip
    assert whole.wait(timeout=90) == 0, whole.output()
    expected = _losses(spool_files(whole.spool_dir))
    assert sorted(expected) == [(r, s) for r in (0, 1) for s in range(1, STEPS + 1)]
    # Dropout makes the ranks differ even where their data would not: per-rank streams.
    assert expected[(0, 1)] != expected[(1, 1)]

    # Rank 1 SIGKILLs itself at step 13, as an OOM killer would; torchrun ends the job.
    broken = run_charlm(tmp_path / "broken", nproc=2, steps=STEPS, data_dir=charlm_data,
                        extra_args=[*SETTINGS, "--set", f"fault.kill_at={KILLED_AT}"])  # fmt: skip
    assert broken.wait(timeout=90) != 0, broken.output()
    assert f"killing itself at step {KILLED_AT}" in broken.output()
    ended = time.time()

    again = run_charlm(tmp_path / "broken", nproc=2, steps=STEPS, data_dir=charlm_data,
                       extra_args=[*SETTINGS, "--resume", "auto"],
                       log_name="resume.log")  # fmt: skip
    assert again.wait(timeout=90) == 0, again.output()
    out = again.output()
    assert f"resumed from {broken.checkpoint_dir / 'ckpt-00000008.pt'} (step 8)" in out
    assert "not bit for bit" not in out

    resumed = _losses([f for f in spool_files(broken.spool_dir) if f[0]["ts"] > ended])
    assert sorted(resumed) == [(r, s) for r in (0, 1) for s in range(9, STEPS + 1)]
    mismatched = {k: (resumed[k], expected[k]) for k in resumed if resumed[k] != expected[k]}
    assert not mismatched, f"(rank, step): (resumed, uninterrupted) losses differ: {mismatched}"
