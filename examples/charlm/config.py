"""Hyper-parameters from TOML, with `--set section.key=value` overrides.

The shipped `config.toml` is both the defaults and the schema: a user's file may set any
subset of its keys, an override must name one of them and keep its type. Every value a
run uses therefore appears in one place and is recorded with the run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT_CONFIG = Path(__file__).with_name("config.toml")


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message says which and why."""


def _load(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _coerce(name: str, value: Any, like: Any, where: str) -> Any:
    if isinstance(like, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(like, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(like, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, type(like)):
        return value
    raise ConfigError(f"{where}: {name} must be a {type(like).__name__}, got {value!r}")


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


def _resolve_key(name: str, known: dict[str, Any], where: str) -> str:
    if name in known:
        return name
    matches = [k for k in known if k.rsplit(".", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(f"{where}: {name!r} is ambiguous, say one of {', '.join(matches)}")
    raise ConfigError(f"{where}: unknown setting {name!r}; known: {', '.join(sorted(known))}")


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string


def load_config(path: Path | None = None, overrides: list[str] = ()) -> dict[str, Any]:
    """Defaults, then the user's file, then `key=value` overrides, all type-checked."""
    config = _load(DEFAULT_CONFIG)
    known = _flatten(config)
    if path is not None and Path(path).resolve() != DEFAULT_CONFIG.resolve():
        for name, value in _flatten(_load(Path(path))).items():
            key = _resolve_key(name, known, f"config {path}")
            _set(config, key, _coerce(key, value, known[key], f"config {path}"))
    for item in overrides:
        name, sep, text = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optim.lr=3e-4")
        key = _resolve_key(name.strip(), known, f"--set {item}")
        _set(config, key, _coerce(key, _parse_value(text.strip()), known[key], f"--set {item}"))
    return copy.deepcopy(config)
