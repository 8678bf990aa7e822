"""A keymap's error names the line of the entry at fault: a top-level key, not a key of
the same name under a table, and no line rather than line 1 where none is found."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.ui.keymap import KeymapError, load_keymap


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "keys.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(KeymapError) as err:
        load_keymap(path)
    message = str(err.value)
    assert message.startswith(str(path)), message
    return message[len(str(path)):]


@pytest.mark.parametrize(("text", "message"), [
    # A table where an action's key belongs: its header is the line.
    ('# mine\nquit = "q"\n\n[acknowledge]\nx = 1\n',
     ":4: 'acknowledge' must map to a key string"),
    ('# mine\n[[help]]\nx = 1\n', ":2: 'help' must map to a key string"),
    ('# mine\n[extras]\nquit = "x"\n', ":2: 'extras' is not an action"),
    # An action written with an escape is found by its name.
    ('# mine\n\n"\\u0071uit" = 5\n', ":3: 'quit' must map to a key string"),
    # A commented-out entry is not the one at fault.
    ('# acknowledge = "q"\n\nacknowledge = 5\n', ":3: 'acknowledge' must map to a key"),
])
def test_the_line_is_the_entrys(tmp_path: Path, text: str, message: str) -> None:
    assert _error(tmp_path, text).startswith(message)


def test_a_clash_names_the_remapped_entrys_line(tmp_path: Path) -> None:
    message = _error(tmp_path, '# mine\n\nhelp = "?"\n\nalerts = "q"\n')
    assert message.startswith(":5: 'alerts': key 'q' is already bound to 'quit'"), message
