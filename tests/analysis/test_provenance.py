"""What differs between two runs (`cockpit.analysis.provenance`), from run-info dicts as
`StoreReader.run_info` returns them."""

from __future__ import annotations

from typing import Any

from cockpit.analysis.provenance import (
    diff,
    flatten,
    manifest_entries,
    merged_env,
    provenance,
)

SHARDS = [{"file": f"train-{i:05d}.bin", "sha256": f"h{i}", "bytes": 4096} for i in range(4)]


def info(job: str = "a", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job": job, "git_commit": "c1", "data_version": "v1", "seed": 7,
        "config": {"optim": {"lr": 0.003, "betas": [0.9, 0.95]},
                   "data": {"dir": "/d", "shards": SHARDS}},
        "env": {"h1": {"torch": "2.4.0", "cuda": "12.4", "driver": "550"},
                "h2": {"torch": "2.4.0", "cuda": "12.4", "driver": "550"}},
        "forked_from": None,
    }
    base.update(over)
    return base


def test_identical_runs_differ_in_nothing() -> None:
    d = diff(provenance("A", info()), provenance("B", info("b")))
    assert d.changes == () and d.changed == ()
    assert d.summary().startswith("no difference")


def test_one_shard_changed_is_named_as_data_not_config() -> None:
    shards = [dict(s) for s in SHARDS]
    shards[2]["sha256"] = "other"
    b = info("b", data_version="v2", config={**info()["config"],
                                              "data": {"dir": "/d", "shards": shards}})
    d = diff(provenance("A", info()), provenance("B", b))
    assert d.changed == ("data",)
    keys = [c.key for c in d.changes]
    assert keys == ["data_version", "shard train-00002.bin"]
    assert d.changes[1].note == "changed"
    assert d.summary() == "data changed (data_version, shard train-00002.bin)"


def test_shards_added_removed_and_a_mapping_manifest() -> None:
    a = info(config={"data": {"manifest": {"x.bin": "1", "y.bin": "2"}}})
    b = info(config={"data": {"manifest": {"y.bin": "2", "z.bin": "3"}}})
    d = diff(provenance("A", a), provenance("B", b))
    assert [(c.key, c.note) for c in d.changes] == [("shard x.bin", "removed"),
                                                     ("shard z.bin", "added")]


def test_data_version_alone_says_no_shard_list() -> None:
    a, b = info(config={}), info(config={}, data_version="v2")
    (change,) = diff(provenance("A", a), provenance("B", b)).changes
    assert change.key == "data_version" and "no shard list" in (change.note or "")


def test_config_keys_flattened_old_to_new() -> None:
    b = info(config={"optim": {"lr": 0.001, "betas": [0.9, 0.99], "wd": 0.1},
                     "data": {"dir": "/d", "shards": SHARDS}})
    d = diff(provenance("A", info()), provenance("B", b))
    assert [(c.key, c.old, c.new) for c in d.changes] == [
        ("optim.betas", [0.9, 0.95], [0.9, 0.99]), ("optim.lr", 0.003, 0.001),
        ("optim.wd", "(absent)", 0.1)]


def test_code_environment_and_seed() -> None:
    env = {"h1": {"torch": "2.5.0", "cuda": "12.4", "driver": "550"},
           "h2": {"torch": "2.4.0", "cuda": "12.4", "driver": "550"}}
    b = info(git_commit="c2", seed=8, env=env,
             config={**info()["config"], "git": {"dirty": ["model.py"]}})
    d = diff(provenance("A", info()), provenance("B", b))
    assert d.changed == ("code", "environment", "seed")
    by_key = {c.key: c for c in d.changes}
    assert (by_key["git_commit"].old, by_key["git_commit"].new) == ("c1", "c2")
    assert "only in B: model.py" in (by_key["dirty files"].note or "")
    # The hosts now disagree on torch: named per host.
    assert by_key["torch@h1"].new == "2.5.0" and by_key["torch"].new == "(absent)"
    assert (by_key["seed"].old, by_key["seed"].new) == (7, 8)


def test_fork_with_one_override_names_the_key() -> None:
    fork = {"ok": True, "parent": "a", "parent_step": 200, "overrides": {"optim.lr": 0.001}}
    child = info("a-lr", forked_from={"job": "a", "step": 200},
                 config={**info()["config"], "optim": {"lr": 0.001, "betas": [0.9, 0.95]}})
    d = diff(provenance("R:a", info()), provenance("R:a-lr", child, fork))
    assert d.relation == "B (a-lr) is a fork of a at step 200 with optim.lr=0.001"
    assert [(c.section, c.key, c.old, c.new) for c in d.changes] == [
        ("config", "optim.lr", 0.003, 0.001)]
    # A trainer that declares no config: the fork's override still names the key.
    bare = diff(provenance("R:a", info(config={})),
                provenance("R:a-lr", info("a-lr", config={},
                                          forked_from={"job": "a", "step": 200}), fork))
    assert [(c.key, c.new, c.note) for c in bare.changes] == [
        ("optim.lr", 0.001, "fork override")]


def test_helpers() -> None:
    assert flatten({"a": {"b": {"c": 1}}, "d": [1], "e": {}}) == {"a.b.c": 1, "d": [1],
                                                                   "e": {}}
    assert manifest_entries(["x", "y"]) == {"x": "", "y": ""}
    assert manifest_entries([1, 2]) is None
    assert merged_env({"h1": {"t": 1}, "h2": {"t": 1}}) == {"t": 1}


def test_a_table_lists_a_bounded_number_of_changes_per_section() -> None:
    from cockpit.analysis.provenance import diff_rows

    a = info(config={"data": {"shards": {f"s{i}": "x" for i in range(500)}}})
    b = info(config={"data": {"shards": {f"s{i}": "y" for i in range(500)}}})
    d = diff(provenance("A", a), provenance("B", b))
    assert len(d.changes) == 500
    rows = diff_rows(d, limit=10)
    assert len(rows) == 11 and rows[-1][1] == "… 490 more"
    assert d.summary() == "data changed (shard s0, shard s1, shard s10, shard s100, " \
        "shard s101, shard s102, 494 more)"
