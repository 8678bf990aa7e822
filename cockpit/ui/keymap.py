"""Every key the cockpit answers to, and user remapping from a TOML file.

The table below is the single source of the bindings: the app and the screens build
their `BINDINGS` from it, the help screen lists it, and a user keymap is validated
against it. A keymap file maps action ids to keys (`pause_job = "P"`); any mistake is
reported with the file, the line and the offending entry, because a typo in a keymap
must not silently leave a destructive action on an unexpected key.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding, BindingType
from textual.keys import KEY_TO_UNICODE_NAME, Keys, _character_to_key, format_key

from cockpit.toml_lines import TomlLines

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

MODIFIERS = frozenset({"ctrl", "alt", "shift", "meta", "super", "hyper"})


@dataclass(frozen=True)
class KeySpec:
    """One bindable action: its id (what keymap files name), default key and where it applies."""

    id: str
    key: str
    action: str
    description: str
    # "app", "main", "map" (the Health pane's GPU map), "host", "filter" (alerts / log),
    # "alerts", "compare", "replay"
    scope: str
    show: bool = True
    # Before the focused widget's own use of the key (a table or log scrolls sideways
    # with ←/→): in a replay the arrows seek on every screen, as the help says.
    priority: bool = False


KEYS: tuple[KeySpec, ...] = (
    KeySpec("focus_progress", "1", "focus_pane('progress')", "Progress", "main"),
    KeySpec("focus_effect", "2", "focus_pane('effect')", "Effect", "main"),
    KeySpec("focus_efficiency", "3", "focus_pane('efficiency')", "Efficiency", "main"),
    KeySpec("focus_health", "4", "focus_pane('health')", "Health", "main"),
    KeySpec("maximise", "m", "toggle_maximise", "Max/restore", "main"),
    KeySpec("toggle_log_y", "g", "toggle_log_y", "Log-y", "main"),
    KeySpec("toggle_timeline", "t", "toggle_timeline", "Chart events", "main"),
    KeySpec("host_detail", "h", "open_host_detail", "Host", "app"),
    KeySpec("alerts", "a", "open_alerts", "Alerts", "app"),
    KeySpec("run_info", "i", "open_run_info", "Run info", "app"),
    KeySpec("compare", "C", "open_compare", "Compare jobs", "app", show=False),
    KeySpec("log", "L", "open_log", "Log", "app"),
    KeySpec("next_job", "j", "next_job", "Next job", "app", show=False),
    KeySpec("pause_job", "p", "pause_job", "Pause job", "app"),
    KeySpec("resume_job", "r", "resume_job", "Resume job", "app"),
    KeySpec("relaunch_job", "R", "relaunch_job", "Relaunch", "app", show=False),
    KeySpec("fork_job", "f", "fork_job", "Fork", "app", show=False),
    KeySpec("checkpoint_now", "c", "checkpoint_now", "Checkpoint", "app", show=False),
    KeySpec("eval_now", "e", "eval_now", "Eval", "app", show=False),
    KeySpec("adjust_lr", "l", "adjust_lr", "LR scale", "app", show=False),
    KeySpec("scale_job", "s", "scale_job", "Scale", "app", show=False),
    KeySpec("stop_job", "S", "stop_job", "Stop job", "app", show=False),
    KeySpec("notices", "n", "open_notices", "Notifications", "app", show=False),
    KeySpec("help", "question_mark", "help", "Help", "app"),
    KeySpec("quit", "q", "quit", "Quit", "app"),
    KeySpec("replay_toggle", "space", "replay_toggle", "Play/pause", "replay"),
    KeySpec("replay_slower", "less_than_sign", "replay_speed(-1)", "Slower", "replay"),
    KeySpec("replay_faster", "greater_than_sign", "replay_speed(1)", "Faster", "replay"),
    KeySpec("seek_back", "left", "replay_seek(-1)", "Seek back", "replay", show=False,
            priority=True),
    KeySpec("seek_forward", "right", "replay_seek(1)", "Seek fwd", "replay", show=False,
            priority=True),
    KeySpec("prev_host", "left_square_bracket", "cycle_host(-1)", "Prev host", "host"),
    KeySpec("next_host", "right_square_bracket", "cycle_host(1)", "Next host", "host"),
    KeySpec("filter", "slash", "filter", "Filter", "filter"),
    KeySpec("acknowledge", "x", "acknowledge", "Acknowledge shown", "alerts"),
    KeySpec("filter_map", "slash", "filter_map", "Filter hosts", "map"),
    KeySpec("open_map_host", "enter", "open_map_host", "Open host", "map"),
    KeySpec("compare_axis", "x", "toggle_axis", "Step/time axis", "compare"),
)

SPECS = {spec.id: spec for spec in KEYS}

# Scopes that are active together: a key must be unique within each group.
_ACTIVE_TOGETHER = (
    {"app", "main", "map", "replay"},
    {"app", "host", "replay"},
    {"app", "filter", "alerts", "replay"},
    {"app", "compare", "replay"},
)


class KeymapError(ValueError):
    """A keymap file that cannot be applied; the message names file, line and entry."""


def bindings(scope: str) -> list[BindingType]:
    """Textual bindings for one scope, each carrying its id so keymaps can rebind it."""
    return [
        Binding(spec.key, spec.action, spec.description, show=spec.show, id=spec.id,
                priority=spec.priority)
        for spec in KEYS
        if spec.scope == scope
    ]


def _valid_base_keys() -> frozenset[str]:
    names = {key.value.rsplit("+", 1)[-1] for key in Keys}
    names.update(KEY_TO_UNICODE_NAME)
    names.update(_character_to_key(chr(code)) for code in range(33, 127))
    names.update({"space", "enter", "tab", "escape", "backspace", "delete"})
    return frozenset(names)


_BASE_KEYS = _valid_base_keys()


def check_key(key: str) -> str | None:
    """Why `key` is not a key Textual can bind, or None when it is."""
    if not key or key != key.strip():
        return "a key must be a non-empty string without surrounding spaces"
    for alternative in key.split(","):
        *mods, base = alternative.split("+")
        bad = [mod for mod in mods if mod not in MODIFIERS]
        if bad:
            return f"unknown modifier {bad[0]!r} in {alternative!r}"
        if not (len(base) == 1 and base.isprintable()) and base not in _BASE_KEYS:
            return f"unknown key {base!r} in {alternative!r}"
    return None


def _where(path: Path, lines: TomlLines, name: str) -> str:
    """`FILE:LINE` of a top-level entry (a table's header where it is one), or `FILE`
    alone where it is not found: no line rather than a wrong one."""
    line = lines.line(name)
    return f"{path}:{line}" if line else str(path)


def _canonical(key: str) -> str:
    """Compare keys by what the user presses: "?" and "question_mark" are one key."""
    parts = []
    for alternative in key.split(","):
        *mods, base = alternative.split("+")
        if len(base) == 1 and base in _CHAR_TO_NAME:
            base = _CHAR_TO_NAME[base]
        parts.append("+".join([*sorted(mods), base]))
    return ",".join(parts)


_CHAR_TO_NAME = {chr(code): _character_to_key(chr(code)) for code in range(33, 127)}
for _name in KEY_TO_UNICODE_NAME:
    _char = format_key(_name)
    if len(_char) == 1:
        _CHAR_TO_NAME.setdefault(_char, _name)


def load_keymap(path: str | Path) -> dict[str, str]:
    """Read and validate a keymap file; return {binding id: key} for `App.set_keymap`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KeymapError(f"{path}: cannot read keymap: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise KeymapError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}): "
                          "save the keymap as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeymapError(f"{path}: not valid TOML: {exc}") from exc
    lines = TomlLines(text)
    keymap: dict[str, str] = {}
    for name, key in data.items():
        where = f"{_where(path, lines, name)}: {name!r}"
        if name not in SPECS:
            known = ", ".join(sorted(SPECS))
            raise KeymapError(f"{where} is not an action; known actions: {known}")
        if not isinstance(key, str):
            raise KeymapError(f"{where} must map to a key string, got {type(key).__name__}")
        problem = check_key(key)
        if problem:
            raise KeymapError(f"{where}: {problem}")
        keymap[name] = key
    _check_clashes(path, lines, keymap)
    return keymap


def effective_keys(keymap: dict[str, str] | None = None) -> dict[str, str]:
    """Key of every action once `keymap` is applied over the defaults."""
    return {spec.id: (keymap or {}).get(spec.id, spec.key) for spec in KEYS}


def key_label(keymap: dict[str, str] | None, spec_id: str) -> str:
    """The key that runs `spec_id` as the operator reads it (the first, where several
    do): what a hint on screen names, so that a remapped key is named as remapped."""
    return format_key(effective_keys(keymap)[spec_id].split(",")[0])


def _check_clashes(path: Path, lines: TomlLines, keymap: dict[str, str]) -> None:
    keys = effective_keys(keymap)
    for group in _ACTIVE_TOGETHER:
        seen: dict[str, str] = {}
        for spec in KEYS:
            if spec.scope not in group:
                continue
            for alternative in _canonical(keys[spec.id]).split(","):
                other = seen.get(alternative)
                if other is not None:
                    culprit = spec.id if spec.id in keymap else other
                    raise KeymapError(
                        f"{_where(path, lines, culprit)}: {culprit!r}: key "
                        f"{keys[culprit]!r} is already bound to "
                        f"{(other if culprit == spec.id else spec.id)!r}"
                    )
                seen[alternative] = spec.id
