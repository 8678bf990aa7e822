"""Finding, validating and registering the cockpit's themes.

A theme is a palette in `themes.toml` plus an optional `NAME.tcss` of extra rules that
apply only while that theme is active; `base.tcss` holds the layout shared by all. The
CSS uses theme variables only, so any Textual theme (built-in ones included) renders the
whole cockpit. In a source checkout the files live in the top-level `themes/`; an
installed wheel ships them as `cockpit/_themes`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from cockpit.toml_lines import TomlLines

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

DEFAULT_THEME = "dark"
BASE_CSS = "base.tcss"
THEMES_FILE = "themes.toml"

_COLOUR_FIELDS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)
_OTHER_FIELDS = {"dark": bool, "luminosity_spread": float, "text_alpha": float}
# What Textual means by each number (textual.design.ColorSystem): the shades step the
# luminosity by fractions of the spread (1: the whole range), and an alpha is a fraction.
# Outside them a theme is meaningless, and nan or a huge spread crashes the app when its
# colours are generated.
_RANGES = {"luminosity_spread": (0.0, 1.0), "text_alpha": (0.0, 1.0)}


class ThemeError(ValueError):
    """A theme definition that cannot be used; the message names file, theme and field."""


@dataclass(frozen=True)
class ThemeSet:
    """What the app needs from the themes folder: palettes and the CSS files to load."""

    directory: Path
    themes: tuple[Theme, ...]
    css_paths: tuple[Path, ...]

    def names(self) -> list[str]:
        return [theme.name for theme in self.themes]


def themes_dir() -> Path:
    """The shipped themes folder: `cockpit/_themes` when installed, else `<repo>/themes`."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_themes", package.parent / "themes"):
        if (candidate / THEMES_FILE).is_file():
            return candidate
    raise ThemeError(
        f"no {THEMES_FILE} found in {package / '_themes'} or {package.parent / 'themes'}: "
        "the installation is incomplete"
    )


def parse_theme(name: str, table: object, source: str, lines: TomlLines | None = None
                ) -> Theme:
    """Build a Textual `Theme` from one TOML table, refusing anything it cannot honour;
    `lines` (the file's) gives each error its line."""

    def at(*key: str) -> str:
        line = lines.line(name, *key) if lines is not None else None
        return f"{source}:{line}: theme {name!r}" if line else f"{source}: theme {name!r}"

    where = at()
    if not isinstance(table, dict):
        raise ThemeError(f"{where} must be a table of colours")
    if "primary" not in table:
        raise ThemeError(f"{where} has no 'primary' colour")
    kwargs: dict[str, Any] = {}  # Theme's fields, each checked above to be of its type
    for field_name, value in table.items():
        where = at(field_name)
        if field_name in _COLOUR_FIELDS:
            if not isinstance(value, str):
                raise ThemeError(f"{where}: {field_name!r} must be a colour string")
            try:
                Color.parse(value)
            except ColorParseError as exc:
                raise ThemeError(f"{where}: {field_name} = {value!r} is not a colour") from exc
            kwargs[field_name] = value
        elif field_name in _OTHER_FIELDS:
            expected = _OTHER_FIELDS[field_name]
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected):
                raise ThemeError(f"{where}: {field_name!r} must be a {expected.__name__}")
            if field_name in _RANGES:
                low, high = _RANGES[field_name]
                if not (math.isfinite(value) and low <= value <= high):
                    raise ThemeError(f"{where}: {field_name} = {value!r} must be a finite "
                                     f"number from {low:g} to {high:g}")
            kwargs[field_name] = value
        else:
            allowed = ", ".join([*_COLOUR_FIELDS, *_OTHER_FIELDS])
            raise ThemeError(f"{where}: unknown field {field_name!r} (allowed: {allowed})")
    return Theme(name=name, **kwargs)


def load_themes(directory: Path | None = None) -> ThemeSet:
    """Read `themes.toml` and the matching `.tcss` files from `directory`."""
    directory = directory or themes_dir()
    source = directory / THEMES_FILE
    try:
        raw = source.read_bytes()
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise ThemeError(f"{source}: cannot read themes: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ThemeError(f"{source}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                         ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ThemeError(f"{source}: not valid TOML: {exc}") from exc
    if not data:
        raise ThemeError(f"{source}: defines no themes")
    lines = TomlLines(text)
    themes = tuple(parse_theme(name, table, str(source), lines)
                   for name, table in data.items())
    base = directory / BASE_CSS
    if not base.is_file():
        raise ThemeError(f"{base}: missing; it holds the layout every theme needs")
    css = [base] + [directory / f"{t.name}.tcss" for t in themes]
    return ThemeSet(directory, themes, tuple(path for path in css if path.is_file()))


def rgb(app_variables: dict[str, str], name: str, fallback: str = "#888888"
        ) -> tuple[int, int, int]:
    """A theme variable as an (r, g, b) tuple, the colour form the charts take."""
    try:
        return Color.parse(app_variables.get(name, fallback)).rgb
    except ColorParseError:
        return Color.parse(fallback).rgb
