"""What differs between two runs: code, data, config, environment, seed.

Pure functions over what a job declared (`StoreReader.run_info`: its merged `run`
records and every host's environment fingerprint from `hello`) and how it was forked
(the agent's `fork` event: parent, step, overrides). `provenance(...)` gathers one
side; `diff(a, b)` says what changed, section by section.

Data is compared by `data_version` and, where the trainer lists its shards or manifest
entries in its config (docs/kpis-and-diff.md: any config key whose last part is
`shards`, `manifest` or `files`), entry by entry: then the diff names the shard. Those
keys are compared as data, not as config. Dirty files of the working tree are read the
same way from a config key named `dirty` or `dirty_files`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SECTIONS = ("code", "data", "config", "environment", "seed")
MANIFEST_KEYS = ("shards", "manifest", "files")
DIRTY_KEYS = ("dirty", "dirty_files")
# Fields of a manifest entry that name it; the rest of the entry is its fingerprint.
ENTRY_NAMES = ("file", "name", "path", "uri", "id", "shard")
MAX_DEPTH = 32  # a config nested deeper is kept whole at that depth (it came from a trainer)
MISSING = "(absent)"
ROWS_PER_SECTION = 200  # changes a table lists per section (JSON lists them all)
SUMMARY_KEYS = 6  # keys a one-line summary names per section (the table lists them all)


@dataclass(frozen=True)
class Provenance:
    label: str  # how the diff names this side: REC:JOB
    job: str | None
    git_commit: str | None = None
    dirty: tuple[str, ...] | None = None  # None: not reported
    data_version: str | None = None
    manifest: dict[str, str] | None = None  # entry -> fingerprint; None: not reported
    config: dict[str, Any] = field(default_factory=dict)  # flattened dotted keys
    env: dict[str, Any] = field(default_factory=dict)  # key -> value (or host -> value)
    seed: int | None = None
    forked_from: dict[str, Any] | None = None  # {job, step, overrides}


@dataclass(frozen=True)
class Change:
    section: str
    key: str
    old: Any
    new: Any
    note: str | None = None


@dataclass(frozen=True)
class Diff:
    a: str
    b: str
    changes: tuple[Change, ...]
    relation: str | None = None  # "B is a fork of A at step N" and the like

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(s for s in SECTIONS if any(c.section == s for c in self.changes))

    def summary(self) -> str:
        """One line: `data changed (shard train-00003.bin); config changed (optim.lr)`."""
        if not self.changes:
            return "no difference in code, data, config, environment or seed"
        parts = []
        for section in self.changed:
            keys = [c.key for c in self.changes if c.section == section]
            more = f", {len(keys) - SUMMARY_KEYS} more" if len(keys) > SUMMARY_KEYS else ""
            parts.append(f"{section} changed ({', '.join(keys[:SUMMARY_KEYS])}{more})")
        return "; ".join(parts)


# --- one side ---------------------------------------------------------------------------


def flatten(value: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """A nested config as dotted keys (`optim.lr`); lists, scalars and manifests (a
    mapping of shard names is one value, compared entry by entry) are leaves."""
    if not isinstance(value, Mapping) or depth >= MAX_DEPTH:
        return {prefix: value} if prefix else {}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(inner, Mapping) and inner and _last(name) not in MANIFEST_KEYS:
            out.update(flatten(inner, name, depth + 1))
        else:
            out[name] = inner
    return out


def _last(key: str) -> str:
    return key.rsplit(".", 1)[-1].lower()


def _fingerprint(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def manifest_entries(value: Any) -> dict[str, str] | None:
    """A manifest's entries as name -> fingerprint: a mapping of name to digest (or to
    an object), a list of objects naming themselves (`file`, `name`, `path`…), or a
    list of names. None when the value is none of these."""
    if isinstance(value, Mapping):
        return {str(k): _fingerprint(v) for k, v in value.items()}
    if not isinstance(value, list):
        return None
    out: dict[str, str] = {}
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            out[entry] = ""
        elif isinstance(entry, Mapping):
            name = next((str(entry[k]) for k in ENTRY_NAMES if entry.get(k) is not None),
                        f"#{i}")
            out[name] = _fingerprint({k: v for k, v in entry.items()
                                      if k not in ENTRY_NAMES})
        else:
            return None
    return out


def split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str] | None,
                                                     tuple[str, ...] | None]:
    """The config flattened, less its manifest and dirty-file keys; the manifest's
    entries (of several manifest keys, each entry prefixed `KEY:`) and the dirty files."""
    flat: dict[str, Any] = {}
    manifests: dict[str, dict[str, str]] = {}
    dirty: tuple[str, ...] | None = None
    for key, value in flatten(config).items():
        last = _last(key)
        entries = manifest_entries(value) if last in MANIFEST_KEYS else None
        if entries is not None:
            manifests[key] = entries
        elif last in DIRTY_KEYS and isinstance(value, list):
            dirty = tuple(str(x) for x in value)
        else:
            flat[key] = value
    if not manifests:
        return flat, None, dirty
    if len(manifests) == 1:
        return flat, next(iter(manifests.values())), dirty
    return flat, {f"{key}:{name}": fp for key, entries in manifests.items()
                  for name, fp in entries.items()}, dirty


def merged_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """Every host's environment fingerprint as one: a key the hosts agree on once, one
    they disagree on per host (`torch@node-b`)."""
    keys: dict[str, dict[str, Any]] = {}
    for host, facts in sorted(env.items()):
        if not isinstance(facts, Mapping):
            continue
        for key, value in facts.items():
            keys.setdefault(str(key), {})[str(host)] = value
    out: dict[str, Any] = {}
    for key, by_host in sorted(keys.items()):
        values = {_fingerprint(v) for v in by_host.values()}
        if len(values) == 1:
            out[key] = next(iter(by_host.values()))
        else:
            out.update({f"{key}@{host}": v for host, v in by_host.items()})
    return out


def provenance(label: str, info: Mapping[str, Any],
               fork: Mapping[str, Any] | None = None) -> Provenance:
    """One side of a diff from `run_info` (and the job's `fork` event data, if any)."""
    config = raw if isinstance(raw := info.get("config"), Mapping) else {}
    flat, manifest, dirty = split_config(config)
    forked = None
    parent = info.get("forked_from")
    if isinstance(parent, Mapping):
        overrides = (fork or {}).get("overrides")
        forked = {"job": parent.get("job"), "step": parent.get("step"),
                  "overrides": dict(overrides) if isinstance(overrides, Mapping) else {}}
    seed = info.get("seed")
    return Provenance(
        label=label, job=info.get("job"), git_commit=info.get("git_commit"), dirty=dirty,
        data_version=info.get("data_version"), manifest=manifest, config=flat,
        env=merged_env(env if isinstance(env := info.get("env"), Mapping) else {}),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        forked_from=forked,
    )


# --- the diff -----------------------------------------------------------------------------


def _keyed(section: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    out = []
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key, MISSING), b.get(key, MISSING)
        if _fingerprint(old) != _fingerprint(new):
            out.append(Change(section, key, old, new))
    return out


def _data(a: Provenance, b: Provenance) -> list[Change]:
    out = []
    if a.data_version != b.data_version:
        out.append(Change("data", "data_version", a.data_version, b.data_version))
    if a.manifest is not None and b.manifest is not None:
        for key in sorted(set(a.manifest) | set(b.manifest)):
            old, new = a.manifest.get(key), b.manifest.get(key)
            if old == new:
                continue
            note = "added" if old is None else "removed" if new is None else "changed"
            out.append(Change("data", f"shard {key}", MISSING if old is None else old,
                              MISSING if new is None else new, note))
    elif (a.manifest is None) != (b.manifest is None) and out:
        out[-1] = Change("data", "data_version", a.data_version, b.data_version,
                         "only one side lists its shards: which changed is not known")
    elif out:
        out[-1] = Change("data", "data_version", a.data_version, b.data_version,
                         "no shard list reported: see docs/kpis-and-diff.md")
    return out


def _code(a: Provenance, b: Provenance) -> list[Change]:
    out = []
    if a.git_commit != b.git_commit:
        out.append(Change("code", "git_commit", a.git_commit, b.git_commit))
    if a.dirty is not None or b.dirty is not None:
        old, new = set(a.dirty or ()), set(b.dirty or ())
        if old != new:
            out.append(Change("code", "dirty files", sorted(old), sorted(new),
                              f"only in A: {', '.join(sorted(old - new)) or 'none'}; "
                              f"only in B: {', '.join(sorted(new - old)) or 'none'}"))
    return out


def relation(a: Provenance, b: Provenance) -> str | None:
    for child, parent in ((b, a), (a, b)):
        fork = child.forked_from
        if fork and fork.get("job") == parent.job and parent.job is not None:
            step = fork.get("step")
            where = f" at step {step:,}" if isinstance(step, int) else ""
            overrides = fork.get("overrides") or {}
            given = (" with " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
                     if overrides else "")
            side = "B" if child is b else "A"
            return f"{side} ({child.job}) is a fork of {parent.job}{where}{given}"
    return None


def diff(a: Provenance, b: Provenance) -> Diff:
    """What changed from A to B, section by section (each key old -> new)."""
    changes = [*_code(a, b), *_data(a, b), *_keyed("config", a.config, b.config)]
    # A fork's overrides name the keys the operator changed even when the trainer's
    # declared config does not show them (a trainer that declares no config).
    fork = b.forked_from if b.forked_from and b.forked_from.get("job") == a.job else None
    shown = {c.key for c in changes if c.section == "config"}
    for key, value in sorted(((fork or {}).get("overrides") or {}).items()):
        if key not in shown:
            changes.append(Change("config", str(key), a.config.get(str(key), MISSING), value,
                                  "fork override"))
    changes += _keyed("environment", a.env, b.env)
    if a.seed != b.seed:
        changes.append(Change("seed", "seed", a.seed, b.seed))
    return Diff(a=a.label, b=b.label, changes=tuple(changes), relation=relation(a, b))


def as_json(d: Diff) -> dict[str, Any]:
    return {"a": d.a, "b": d.b, "relation": d.relation, "changed": list(d.changed),
            "summary": d.summary(), "changes": [asdict(c) for c in d.changes]}


def value_text(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def diff_rows(d: Diff, limit: int = ROWS_PER_SECTION) -> list[tuple[str, ...]]:
    """(section, key, old -> new, note) per change, for a table: at most `limit` per
    section, then one row saying how many more (a regenerated dataset of 100,000 shards
    is one line of JSON each, not a table to scroll)."""
    rows: list[tuple[str, ...]] = []  # four cells each
    for section in d.changed:
        changes = [c for c in d.changes if c.section == section]
        rows += [(c.section, c.key, f"{value_text(c.old)} → {value_text(c.new)}",
                  c.note or "") for c in changes[:limit]]
        if len(changes) > limit:
            rows.append((section, f"… {len(changes) - limit:,} more", "", "see --format json"))
    return rows


__all__ = ["SECTIONS", "Change", "Diff", "Provenance", "as_json", "diff", "diff_rows",
           "flatten", "manifest_entries", "merged_env", "provenance", "relation"]
