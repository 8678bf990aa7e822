"""An inventory that is not UTF-8 is named with the line of its first bad byte, as the
job spec, the keymap and the alerts file are."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.transport.inventory import InventoryError, load_inventory


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_bytes(b'[[hosts]]\nname = "a"\naddress = "a.example"\npython = "\xff"\n')
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{path}:4: inventory is not UTF-8 text"), str(
        caught.value)
