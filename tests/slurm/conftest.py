"""The real Slurm cluster (tests/harness/slurm.py) and Slurm job specs of the charlm example."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.control.jobspec import JobSpec, parse_jobspec
from tests.harness.slurm import SlurmCluster, SlurmUnavailable, slurm_cluster
from tests.harness.torchrun import FAST_SETTINGS, ROOT, TRAIN_SCRIPT


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    try:
        with slurm_cluster() as cluster:
            yield cluster
    except SlurmUnavailable as exc:
        if os.environ.get("CI"):  # `make test` installs Slurm: CI must run these tests
            pytest.fail(f"the Slurm tests need a real Slurm and CI must run them: {exc}")
        pytest.skip(f"no real Slurm here: {exc}")


def slurm_spec(tmp_path: Path, data: Path, name: str = "sjob", steps: int = 100000,
               launcher: str = "", nodes: int = 2) -> JobSpec:
    """A 2-node charlm job on Slurm (one CPU rank per node), as an operator's TOML."""
    args = ["--max-steps", str(steps), "--set", f"data.dir={data}", "--set",
            "checkpoint.every=1000000", "--set", "eval.at_start=false"]
    for setting in FAST_SETTINGS:
        args += ["--set", setting]
    text = textwrap.dedent(f"""\
        name = {json.dumps(name)}
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN_SCRIPT))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp_path / "runs" / name))}
        stop_grace = 10
        [env]
        PYTHONPATH = {json.dumps(str(ROOT))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [resume]
        args = ["--resume", "{{checkpoint}}"]
        [launcher]
        kind = "slurm"
        nodes = {nodes}
        partition = "debug"
        signal_seconds = 30
    """) + launcher
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return parse_jobspec(text, str(path))


def tiny_spec(tmp_path: Path, name: str, folder: str, code: str, launcher: str = "",
               tables: str = "", nodes: int = 2) -> str:
    """A job of a few lines of Python on `nodes` nodes (one rank per node); its spec's
    text, also written to FOLDER.toml."""
    script = tmp_path / f"{folder}.py"
    script.write_text(code)
    text = textwrap.dedent(f"""\
        name = {json.dumps(name)}
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(script))}
        run_dir = {json.dumps(str(tmp_path / "runs" / folder))}
        stop_grace = 2
        [env]
        PYTHONPATH = {json.dumps(str(ROOT))}
        GLOO_SOCKET_IFNAME = "lo"
    """) + tables + textwrap.dedent(f"""\
        [launcher]
        kind = "slurm"
        nodes = {nodes}
    """) + launcher
    (tmp_path / f"{folder}.toml").write_text(text)
    return text
