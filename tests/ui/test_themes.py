"""Theme files: validated with clear errors, CSS made of theme variables only, and
found both in a source checkout and in an installed copy."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.ui.themes import ThemeError, load_themes, themes_dir

REPO = Path(__file__).resolve().parents[2]


def test_shipped_themes_load_with_their_css() -> None:
    theme_set = load_themes()
    assert {"dark", "light", "high-contrast"} <= set(theme_set.names())
    assert theme_set.css_paths[0].name == "base.tcss"
    assert {p.stem for p in theme_set.css_paths[1:]} == set(theme_set.names())


def test_css_uses_theme_variables_only() -> None:
    colour = re.compile(r"#[0-9a-fA-F]{3,8}\b|\brgba?\(|\bhsla?\(|"
                        r"\b(?:red|green|blue|white|black|yellow|orange|grey|gray)\b")
    for path in themes_dir().glob("*.tcss"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("/*")[0]
            if code.strip().startswith("#") or ":" not in code:
                continue  # selectors (#id) are not colours
            value = code.split(":", 1)[1]
            assert not colour.search(value), f"{path.name}:{number} hard-codes a colour: {line}"


def copy_themes(tmp_path: Path, toml: str) -> Path:
    folder = tmp_path / "themes"
    shutil.copytree(themes_dir(), folder)
    (folder / "themes.toml").write_text(toml, encoding="utf-8")
    return folder


@pytest.mark.parametrize("toml, message", [
    ('[mine]\nprimary = "not-a-colour"\n',
     "theme 'mine': primary = 'not-a-colour' is not a colour"),
    ('[mine]\nsecondary = "#123456"\n', "theme 'mine' has no 'primary' colour"),
    ('[mine]\nprimary = "#123456"\nsparkle = "#fff"\n', "unknown field 'sparkle'"),
    ('[mine]\nprimary = "#123456"\ndark = "yes"\n', "'dark' must be a bool"),
    ('[mine\n', "not valid TOML"),
    ("", "defines no themes"),
])
def test_bad_theme_files_are_explained(tmp_path: Path, toml: str, message: str) -> None:
    folder = copy_themes(tmp_path, toml)
    with pytest.raises(ThemeError) as err:
        load_themes(folder)
    assert message in str(err.value)
    assert str(folder / "themes.toml") in str(err.value)


def test_a_themes_file_that_is_not_utf8_is_explained(tmp_path: Path) -> None:
    folder = copy_themes(tmp_path, "")
    (folder / "themes.toml").write_bytes(b'[mine]\nprimary = "\xff"\n')
    with pytest.raises(ThemeError, match=r"themes\.toml:2: not UTF-8 text"):
        load_themes(folder)


def test_installed_layout_finds_themes_under_the_package(tmp_path: Path) -> None:
    """A wheel ships `themes/` as `cockpit/_themes` (pyproject force-include)."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "cockpit", site / "cockpit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "themes", site / "cockpit" / "_themes")
    code = ("from cockpit.ui.themes import load_themes; s = load_themes(); "
            "print(s.directory); print(len(s.css_paths))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site)}, check=True).stdout.split()
    assert out[0] == str(site / "cockpit" / "_themes")
    assert int(out[1]) == len(load_themes().css_paths)


def test_unknown_theme_name_is_refused_before_start() -> None:
    from cockpit.ui.app_factory import make_app
    from cockpit.ui.demo_static import demo_source

    with pytest.raises(ThemeError, match=r"unknown theme 'neon'.*dark"):
        make_app(demo_source(), theme="neon")
