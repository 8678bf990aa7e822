"""The control layer's messages show what they quote of a job spec, an alerts file or
Slurm as text: an unknown key or a login node's words with an escape sequence, a C1
CSI or a bidi override in them reach the terminal (stderr, a log line) as text."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from cockpit.analysis.alert_config import AlertConfigError, load_alert_config
from cockpit.control.jobspec import JobSpecError, parse_jobspec
from cockpit.control.slurm import SlurmError
from cockpit.control.slurm_watch import SlurmWatcher

HOSTILE = "j\x1b]0;PWN\x07\u009b2J\u202e"
SHOWN = "j\u241b]0;PWN\u2407\\x9b2J\\u202e"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")
SPEC = 'name = "charlm"\nhosts = ["gpu1"]\nnproc_per_node = 1\nscript = "train.py"\n' \
       'run_dir = "/data/runs/charlm"\n'
TOML_HOSTILE = "j\\u001b]0;PWN\\u0007\\u009b2J\\u202e"


def assert_text(value: str) -> None:
    for control in CONTROLS:
        assert control not in value, (control, value)


def test_an_unknown_spec_key_is_named_as_text() -> None:
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(SPEC + f'"{TOML_HOSTILE}" = 1\n', "job.toml")
    assert_text(str(caught.value))
    assert f"field '{SHOWN}': unknown key" in str(caught.value)


def test_an_unknown_key_of_a_spec_table_is_named_as_text() -> None:
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(SPEC + f'[recovery]\n"{TOML_HOSTILE}" = 1\n', "job.toml")
    assert_text(str(caught.value))
    assert f"field 'recovery.{SHOWN}': unknown key" in str(caught.value)


def test_a_spec_value_is_quoted_as_toml_text() -> None:
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(SPEC.replace("nproc_per_node = 1", "nproc_per_node = 1\n"
                                   f'nnodes = "{TOML_HOSTILE}"'), "job.toml")
    assert_text(str(caught.value))
    assert "\\u009b2J\\u202e" in str(caught.value)


def test_hosts_not_in_the_inventory_are_named_as_text() -> None:
    spec = SPEC.replace('hosts = ["gpu1"]', 'hosts = ["gpu1\\u202e"]')
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(spec, "job.toml", known_hosts=["gpu1"])
    assert_text(str(caught.value))


def test_an_unknown_alerts_key_is_named_as_text(tmp_path: Path) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text(f'[alerts]\n"{TOML_HOSTILE}" = 1\n')
    with pytest.raises(AlertConfigError) as caught:
        load_alert_config(path)
    assert_text(str(caught.value))
    assert f"alerts.{SHOWN} is not a threshold" in str(caught.value)


class _Job:
    """A SlurmJob whose login node answers with controls in its words."""

    def __init__(self) -> None:
        self.spec = SimpleNamespace(name="charlm")
        self.lock = threading.RLock()
        self.events: list[tuple[str, str]] = []
        self.told = threading.Event()

    def current_id(self) -> str | None:
        raise SlurmError(f"squeue failed: {HOSTILE}\nsecond line \x1b[31m")

    def event(self, kind: str, msg: str, **data: object) -> dict[str, object]:
        self.events.append((kind, msg))
        self.told.set()
        return {}


def test_slurms_words_are_logged_as_text(caplog: pytest.LogCaptureFixture,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    job = _Job()
    watcher = SlurmWatcher(job, lambda nodes: None, every=0.01)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="cockpit.control.slurm_watch"):
        watcher.start()
        assert job.told.wait(10)  # the loop's look failed, and said so
        watcher.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # the loop's one look, then the last look
    for message in messages:
        assert_text(message)
        assert f"squeue failed: {SHOWN}\nsecond line \u241b[31m" in message
    err = capsys.readouterr().err
    assert_text(err)
