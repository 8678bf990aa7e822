"""`cockpit launch` runs the pre-flight check before it asks any agent to start, and
`--no-check` skips it (a deliberate launch on a network the check cannot see)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit.app import cli, operations, ssh_cli


def test_launch_checks_first_and_no_check_skips_it(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(ssh_cli, "preflight_launch",
                        lambda args, options: calls.append("check"))

    def run_operation(command: str, job: Path, **kw: Any) -> int:
        calls.append(command)
        return 0

    monkeypatch.setattr(operations, "run_operation", run_operation)
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "gpu1"\naddress = "127.0.0.9"\n')
    job = tmp_path / "job.toml"
    job.write_text('name = "j"\nhosts = ["gpu1"]\nscript = "train.py"\n'
                   f'run_dir = "{tmp_path / "run"}"\n')
    argv = ["launch", str(job), "--inventory", str(inventory),
            "--store", str(tmp_path / "s.duckdb")]
    assert cli.main(argv) == 0
    assert calls == ["check", "launch"]
    calls.clear()
    assert cli.main([*argv, "--no-check"]) == 0
    assert calls == ["launch"]
