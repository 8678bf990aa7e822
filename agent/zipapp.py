"""A single-file agent (`agent.pyz`) that the cockpit can copy to a host that lacks it.

It holds the `agent` package and pynvml (pure Python, from nvidia-ml-py), and runs with
the host's own Python >= 3.8: `python3 agent.pyz stream --from 0`. psutil has compiled
parts, so it is not bundled; the host's copy is used when installed.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import zipapp
from pathlib import Path
from typing import List

_MAIN = """import sys

from agent.cli import main

sys.exit(main())
"""


def bundled_modules() -> List[Path]:
    """Top-level pure-Python modules shipped next to the package (pynvml when found)."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return []
    return [Path(spec.origin)]


def build_zipapp(dest: Path) -> Path:
    """Write the zipapp to `dest` (a file path, or a directory for `agent.pyz`)."""
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / "agent.pyz"
    package = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="cockpit-agent-pyz-") as tmp:
        stage = Path(tmp)
        shutil.copytree(str(package), str(stage / "agent"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyz"))
        for module in bundled_modules():
            shutil.copy2(str(module), str(stage / module.name))
        (stage / "__main__.py").write_text(_MAIN, encoding="utf-8")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_name(".%s.tmp" % dest.name)
        zipapp.create_archive(str(stage), str(tmp_dest), interpreter="/usr/bin/env python3",
                              compressed=True)
        tmp_dest.replace(dest)
    return dest
