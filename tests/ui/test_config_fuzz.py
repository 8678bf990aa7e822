"""Property tests of the files an operator or a host hands the cockpit: keymap and theme
files and checkpoint markers. Any content gives a result or a clear error naming the
file (and, where it has one, the line or field) — never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.wire import checkpoints
from cockpit.ui.keymap import SPECS, KeymapError, load_keymap
from cockpit.ui.themes import ThemeError, load_themes, themes_dir

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
_VALUE = st.one_of(_TEXT, st.integers(), st.floats(allow_nan=False), st.booleans(),
                   st.lists(st.integers(), max_size=3))


_DIRS: list[tempfile.TemporaryDirectory] = []


def _tmp() -> Path:
    """A fresh folder per example; the previous example's is removed first."""
    while _DIRS:
        _DIRS.pop().cleanup()
    _DIRS.append(tempfile.TemporaryDirectory(prefix="cockpit-fuzz-"))
    return Path(_DIRS[-1].name)


@FUZZ
@given(st.one_of(st.binary(max_size=200),
                 st.dictionaries(st.one_of(st.sampled_from(sorted(SPECS)), _TEXT), _VALUE,
                                 max_size=6).map(lambda d: tomli_w.dumps(d).encode())))
def test_any_keymap_file_loads_or_says_which_file_is_wrong(content: bytes) -> None:
    path = _tmp() / "keys.toml"
    path.write_bytes(content)
    try:
        keymap = load_keymap(path)
    except KeymapError as exc:
        assert str(path) in str(exc)
    else:
        assert set(keymap) <= set(SPECS) and all(isinstance(k, str) for k in keymap.values())


@FUZZ
@given(st.one_of(st.binary(max_size=200),
                 st.dictionaries(_TEXT.filter(bool), st.one_of(
                     _VALUE, st.dictionaries(st.sampled_from(["primary", "secondary", "dark",
                                                              "background", "luminosity"]),
                                             _VALUE, max_size=4)), max_size=3)
                 .map(lambda d: tomli_w.dumps(d).encode())))
def test_any_themes_file_loads_or_says_which_file_is_wrong(content: bytes) -> None:
    directory = _tmp()
    for css in themes_dir().glob("*.tcss"):
        (directory / css.name).write_bytes(css.read_bytes())
    (directory / "themes.toml").write_bytes(content)
    try:
        loaded = load_themes(directory)
    except ThemeError as exc:
        assert str(directory / "themes.toml") in str(exc)
    else:
        assert loaded.themes


@FUZZ
@given(marker=st.one_of(st.binary(max_size=120),
                        st.dictionaries(st.sampled_from(["step", "bytes", "sha256", "files"]),
                                        st.one_of(_VALUE, st.dictionaries(_TEXT, _VALUE,
                                                                          max_size=2)),
                                        max_size=4).map(lambda d: json.dumps(d).encode())),
       body=st.binary(max_size=64), as_dir=st.booleans())
def test_any_checkpoint_marker_is_judged_valid_or_skipped_with_a_reason(
        marker: bytes, body: bytes, as_dir: bool) -> None:
    directory = _tmp()
    path = directory / "ckpt-00000010.pt"
    if as_dir:
        path.mkdir()
        (path / "model.bin").write_bytes(body)
    else:
        path.write_bytes(body)
    checkpoints.marker_path(path).write_bytes(marker)
    found, why = checkpoints.inspect(path)
    assert (found is None) != (why is None)
    if found is not None:
        assert found.step >= 0 and found.path == path
    else:
        assert isinstance(why, str) and why
    newest, _skipped = checkpoints.newest_valid(directory)
    assert newest is None or newest.path == path
