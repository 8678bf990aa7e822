"""Keymap files: valid ones rebind, every mistake names file, line and entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.ui.keymap import KEYS, SPECS, KeymapError, bindings, check_key, load_keymap


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_keymap_is_returned_by_action_id(tmp_path: Path) -> None:
    path = write(tmp_path, 'pause_job = "P"\nalerts = "ctrl+a"\n')
    assert load_keymap(path) == {"pause_job": "P", "alerts": "ctrl+a"}


def test_unknown_action_names_file_line_and_entry(tmp_path: Path) -> None:
    path = write(tmp_path, '# my keys\nalerts = "A"\npuase_job = "x"\n')
    with pytest.raises(KeymapError) as err:
        load_keymap(path)
    assert f"{path}:3: 'puase_job' is not an action" in str(err.value)
    assert "pause_job" in str(err.value)  # the known actions are listed


def test_non_string_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "quit = 5\n")
    with pytest.raises(KeymapError, match=r"keys\.toml:1: 'quit' must map to a key string"):
        load_keymap(path)


@pytest.mark.parametrize("key, reason", [
    ("ctrl+nokey", "unknown key 'nokey'"),
    ("super-ctrl+x", "unknown modifier"),
    ("", "non-empty"),
])
def test_bad_keys_are_explained(tmp_path: Path, key: str, reason: str) -> None:
    path = write(tmp_path, f'\n\nlog = "{key}"\n')
    with pytest.raises(KeymapError, match=reason) as err:
        load_keymap(path)
    assert f"{path}:3:" in str(err.value)


def test_clash_with_a_default_key_names_both_actions(tmp_path: Path) -> None:
    path = write(tmp_path, 'alerts = "q"\n')  # q is quit's default, both app-wide
    with pytest.raises(KeymapError) as err:
        load_keymap(path)
    assert "'alerts'" in str(err.value) and "'quit'" in str(err.value)
    assert ":1:" in str(err.value)


def test_character_and_key_name_are_the_same_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'run_info = "question_mark"\n')  # help's default is "?"
    with pytest.raises(KeymapError, match="already bound to 'help'"):
        load_keymap(path)


def test_screen_scoped_keys_may_reuse_keys_of_other_screens(tmp_path: Path) -> None:
    # "[" on the host screen and "/" on the filter screens never coexist
    path = write(tmp_path, 'prev_host = "slash"\n')
    assert load_keymap(path) == {"prev_host": "slash"}


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'quit = "q\n')
    with pytest.raises(KeymapError, match="not valid TOML"):
        load_keymap(path)


def test_a_keymap_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_bytes(b'quit = "q"\npause_job = "\xff"\n')
    with pytest.raises(KeymapError, match=r"keys.toml:2: not UTF-8 text \(byte 0xff\)"):
        load_keymap(path)


def test_missing_file_is_a_keymap_error(tmp_path: Path) -> None:
    with pytest.raises(KeymapError, match="cannot read keymap"):
        load_keymap(tmp_path / "nope.toml")


def test_every_default_key_is_valid_and_every_binding_has_its_id() -> None:
    assert all(check_key(spec.key) is None for spec in KEYS)
    scoped = [b for scope in ("app", "main", "map", "host", "filter", "alerts", "compare",
                              "replay")
              for b in bindings(scope)]
    assert sorted(b.id for b in scoped) == sorted(SPECS)
