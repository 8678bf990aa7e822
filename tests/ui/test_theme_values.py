"""A theme's numbers are finite and within what Textual means by them (an alpha and a
luminosity spread are fractions, 0 to 1): `luminosity_spread = nan` passed the check and
then crashed the app when the theme's colours were generated. Each error names its line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cockpit.ui.themes import ThemeError, load_themes, parse_theme, themes_dir


def _folder(tmp_path: Path, toml: str) -> Path:
    folder = tmp_path / "themes"
    shutil.copytree(themes_dir(), folder)
    (folder / "themes.toml").write_text(toml, encoding="utf-8")
    return folder


HEAD = '# mine\n[dark]\nprimary = "#58A6FF"\n\n[mine]\nprimary = "#123456"\n'


@pytest.mark.parametrize("setting", [
    "luminosity_spread = nan", "luminosity_spread = inf", "luminosity_spread = 1e308",
    "luminosity_spread = -0.1", "luminosity_spread = 1.5", "text_alpha = -1e30",
    "text_alpha = nan", "text_alpha = 2", "text_alpha = -inf",
])
def test_a_number_out_of_its_range_is_refused_with_its_line(tmp_path: Path,
                                                            setting: str) -> None:
    folder = _folder(tmp_path, HEAD + setting + "\n")
    with pytest.raises(ThemeError) as err:
        load_themes(folder)
    field = setting.split(" =")[0]
    assert str(err.value).startswith(f"{folder / 'themes.toml'}:7: theme 'mine': {field} = "
                                     ), str(err.value)
    assert "must be a finite number from 0 to 1" in str(err.value)


@pytest.mark.parametrize("value", [0, 0.0, 0.15, 1, 1.0])
def test_every_value_in_range_generates_the_colours(value: float) -> None:
    for field in ("luminosity_spread", "text_alpha"):
        theme = parse_theme("mine", {"primary": "#123456", field: value}, "themes.toml")
        assert theme.to_color_system().generate()


def test_the_other_errors_name_their_line_too(tmp_path: Path) -> None:
    folder = _folder(tmp_path, HEAD + 'dark = "yes"\n')
    with pytest.raises(ThemeError, match=r"themes\.toml:7: theme 'mine': 'dark' must be"):
        load_themes(folder)
    folder = _folder(tmp_path / "b", HEAD.replace('"#123456"', '"not-a-colour"'))
    with pytest.raises(ThemeError, match=r"themes\.toml:6: theme 'mine': primary = "):
        load_themes(folder)
    folder = _folder(tmp_path / "c", HEAD + "[other]\nsecondary = '#123456'\n")
    with pytest.raises(ThemeError, match=r"themes\.toml:7: theme 'other' has no 'primary'"):
        load_themes(folder)


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "")
    (folder / "themes.toml").write_bytes(b'[mine]\n\nprimary = "\xff"\n')
    with pytest.raises(ThemeError, match=r"themes\.toml:3: not UTF-8 text"):
        load_themes(folder)
