"""An alerts file's error points at the key in the `[alerts]` table: not at the same key
in another table, and at no line rather than a wrong one where the key is not found."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.analysis.alert_config import AlertConfigError, load_alert_config


def _error(tmp_path: Path, body: str) -> str:
    path = tmp_path / "cockpit.toml"
    path.write_text(body)
    with pytest.raises(AlertConfigError) as caught:
        load_alert_config(path)
    message = str(caught.value)
    assert message.startswith(str(path)), message
    return message[len(str(path)):]


@pytest.mark.parametrize(("body", "message"), [
    # The same key in another table, before [alerts]: its line is not the one at fault.
    ("[other]\ndisk_warn = 0.1\n[alerts]\ndisk_warn = 2.0\n",
     ":4: alerts.disk_warn = 2.0 is out of range"),
    ("[theme]\nname = 'x'\n\n[alerts]\nname = 1\n", ":5: alerts.name is not a threshold"),
    # A dotted key at the top level is the table's key as well.
    ("other = 1\nalerts.disk_warn = 2.0\n", ":2: alerts.disk_warn = 2.0 is out of range"),
    # A key written with an escape is found by its name.
    ('[alerts]\n\n"disk\\u005fwarn" = 2.0\n', ":3: alerts.disk_warn = 2.0 is out of range"),
    # The table itself, where it is not a table.
    ("x = 1\nalerts = 5\n", ":2: 'alerts' must be a table"),
    ("x = 1\n[[alerts]]\ndisk_warn = 0.5\n", ":2: 'alerts' must be a table"),
])
def test_the_line_is_the_keys_in_the_alerts_table(tmp_path: Path, body: str,
                                                  message: str) -> None:
    assert _error(tmp_path, body).startswith(message)


def test_a_check_of_two_keys_points_at_the_one_written(tmp_path: Path) -> None:
    # disk_critical keeps its default (0.97): the warning set above it is the mistake.
    assert _error(tmp_path, "[alerts]\n\ndisk_warn = 0.99\n").startswith(
        ":3: alerts.disk_critical must not be below alerts.disk_warn")


def test_a_key_inside_an_inline_table_is_found_on_the_tables_line(tmp_path: Path) -> None:
    body = 'note = """\ndisk_warn = 0.5\n"""\nalerts = { disk_warn = 2.0 }\n'
    assert _error(tmp_path, body).startswith(":4: alerts.disk_warn = 2.0")
