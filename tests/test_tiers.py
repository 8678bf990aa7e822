"""The test tiers are decided from a module's source and a test's code: a module of the
slower tiers is not imported for `make check`, and a test that runs a subprocess is
marked as starting one, whatever its fixtures."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness import tiers


def test_module_marks_and_framework_imports_are_read_without_importing() -> None:
    facts = tiers.module_facts(
        "import pytest\nimport torch\n"
        "pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]\n"
        "async def test_x():\n    pass\n")
    assert facts.markers == {"slow", "timeout"}
    assert facts.frameworks and facts.coroutines
    lazy = tiers.module_facts("import pytest\ndef test_x():\n    import torch\n")
    assert not lazy.frameworks and not lazy.markers and not lazy.coroutines
    skipped = tiers.module_facts("import pytest\nlightning = pytest.importorskip('lightning')\n")
    assert skipped.frameworks


def test_a_module_is_left_out_only_when_none_of_its_tests_can_be_in_the_tier(
        tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "ui").mkdir(parents=True)
    e2e = root / "test_e2e.py"
    e2e.write_text("import pytest\npytestmark = pytest.mark.e2e\n")
    plain = root / "test_plain.py"
    plain.write_text("def test_x():\n    pass\n")
    ui = root / "ui" / "test_screen.py"
    ui.write_text("def test_x():\n    pass\n")
    broken = root / "test_broken.py"
    broken.write_text("def test_x(:\n")
    assert tiers.module_is_outside("pure", e2e, root)
    assert tiers.module_is_outside("app", e2e, root)
    assert not tiers.module_is_outside("pure", plain, root)
    assert tiers.module_is_outside("app", plain, root)
    assert tiers.module_is_outside("pure", ui, root)
    assert not tiers.module_is_outside("app", ui, root)
    assert not tiers.module_is_outside("pure", broken, root)  # imported, and it fails there
    assert not any(tiers.module_is_outside("all", p, root) for p in (e2e, plain, ui))


def _runs_a_command() -> str:
    return subprocess.run(["true"], check=True).args[0]


def _calls_a_helper_that_runs_one() -> str:
    return _runs_a_command()


def _pure() -> int:
    return len("abc")


def test_a_test_that_runs_a_subprocess_through_a_helper_is_seen_to() -> None:
    # Looked up by name, so that this test itself, which runs none, is not seen to.
    helpers = globals()
    assert tiers.starts_a_process(helpers["_runs_a_command"])
    assert tiers.starts_a_process(helpers["_calls_a_helper_that_runs_one"])
    assert not tiers.starts_a_process(helpers["_pure"])
    assert not tiers.starts_a_process(None)


def test_each_tier_takes_its_own_tests() -> None:
    assert tiers.item_is_inside("pure", set(), drives_the_app=False, needs_framework=False)
    assert not tiers.item_is_inside("pure", {"starts"}, False, False)
    assert not tiers.item_is_inside("pure", set(), True, False)
    assert not tiers.item_is_inside("pure", set(), False, True)
    assert tiers.item_is_inside("app", set(), True, False)
    assert not tiers.item_is_inside("app", {"slow"}, True, False)
    assert tiers.item_is_inside("all", {"e2e"}, True, True)
