"""`cockpit --alerts FILE …`: the [alerts] table is checked before any command runs, and
a mistake names the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.analysis import alert_config
from cockpit.app import cli


def test_a_wrong_threshold_stops_the_command_and_says_where(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cockpit.toml"
    config.write_text("[alerts]\nmemory_warn = 0.9\nhost_silent_s = 0\n")
    status = cli.main(["--alerts", str(config), "report", str(tmp_path / "none.duckdb")])
    err = capsys.readouterr().err
    assert status == 2
    assert f"{config}:3: alerts.host_silent_s = 0 is out of range" in err


def test_a_good_table_is_in_force_for_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cockpit.toml"
    config.write_text("[alerts]\nmemory_warn = 0.5\n")
    try:
        cli.main(["--alerts", str(config), "report", str(tmp_path / "none.duckdb")])
        assert alert_config.current().memory_warn == 0.5
        assert "alerts" not in capsys.readouterr().err  # the command's own error, if any
    finally:
        alert_config.configure(alert_config.AlertThresholds())
