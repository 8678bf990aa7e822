"""Facts about this host for the `hello` record: who, what hardware, which software.

The environment fingerprint reads installed package metadata only; it never imports
torch (the agent must stay light and must not touch the GPU).
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sys
from typing import Any, Dict, Optional


def boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def mem_total(psutil_module: Any = None) -> Optional[int]:
    if psutil_module is not None:
        return int(psutil_module.virtual_memory().total)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def _version(name: str) -> Optional[str]:
    """The installed version, None when the package is not installed here."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def env_fingerprint() -> Dict[str, Any]:
    """Versions that decide whether two hosts run "the same" software."""
    torch = _version("torch")
    cuda = None
    if torch and "+cu" in torch:
        tag = torch.split("+cu", 1)[1]
        cuda = "%s.%s" % (tag[:-1], tag[-1:]) if tag.isdigit() and len(tag) > 1 else tag
    packages = []
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            # typeshed's PackageMetadata omits get(), which the real email.message.Message
            # has (`metadata["Name"]` would be typed, but warns or raises when missing)
            name = (dist.metadata.get("Name") or "").lower()  # type: ignore[attr-defined]  # typeshed's PackageMetadata
            if name:
                packages.append("%s==%s" % (name, dist.version))
    except Exception:
        packages = []
    packages.sort()
    nccl = None
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        nccl = nccl or _version(name)
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch,
        "cuda": cuda,
        "nccl": nccl,
        "packages": len(packages),
        "packages_hash": hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16]
        if packages else None,
    }


def hostname() -> str:
    return socket.gethostname()
