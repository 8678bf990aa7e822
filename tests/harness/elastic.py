"""An elastic job spec as an operator writes it, for the tests of the agent's elastic
parts (spares, exclusion, regroup budgets): written as TOML and parsed by the real
`parse_jobspec`, so a test reads the spec the agent would get."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cockpit.control.jobspec import parse_jobspec

NAME = "el"


def elastic_spec(tmp_path: Path, host: str, *, hosts: tuple[str, ...] = ("a", "b"),
                 spares: tuple[str, ...] = (), nnodes: str = "2:3",
                 rendezvous_host: str = "b", recovery: str = "") -> dict:
    """The launch spec, for `host`, of a one-rank-per-node elastic job NAME whose run dir
    is shared under `tmp_path`; `recovery`: the lines of its [recovery] table."""
    lines = [
        f'name = "{NAME}"',
        f"hosts = {json.dumps(list(hosts))}",
        *([f"spares = {json.dumps(list(spares))}"] if spares else []),
        f'nnodes = "{nnodes}"',
        "nproc_per_node = 1",
        f"python = {json.dumps(sys.executable)}",
        f"script = {json.dumps(str(tmp_path / 'train.py'))}",
        f"run_dir = {json.dumps(str(tmp_path / 'shared' / NAME))}",
        "[resume]",
        'newest_args = ["--resume", "auto"]',
        "[rendezvous]",
        'endpoint = "127.0.0.1:29999"',
        f'host = "{rendezvous_host}"',
        "[recovery]",
        recovery,
    ]
    (tmp_path / "train.py").write_text("")
    return parse_jobspec("\n".join(lines) + "\n", str(tmp_path / "job.toml")).for_host(host)
