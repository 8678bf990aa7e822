"""Reaching the agents: inventory, SSH config and host keys, one link per host.

The transport delivers raw NDJSON chunks (whole lines) and link states; it never parses
records. Decoding belongs to `cockpit.ingest`, storage to `cockpit.store`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cockpit.transport.fleet import Fleet, HostStatus, UnknownHost
    from cockpit.transport.host_keys import KnownHosts, fingerprint
    from cockpit.transport.inventory import (
        HostSpec,
        Inventory,
        InventoryError,
        load_inventory,
        parse_inventory,
        parse_targets,
    )
    from cockpit.transport.link import LinkNotStreaming, LinkOptions
    from cockpit.transport.local_link import LocalLink
    from cockpit.transport.ssh_config import SshConfig, SshConfigError
    from cockpit.transport.ssh_link import HostLink

# Where each name lives: imported on first use (PEP 562), so that a replay or a report,
# which only read `cockpit.transport.states`, do not load paramiko and the SSH stack.
_HOME = {
    "Fleet": "fleet", "HostStatus": "fleet", "UnknownHost": "fleet",
    "KnownHosts": "host_keys", "fingerprint": "host_keys",
    "HostSpec": "inventory", "Inventory": "inventory", "InventoryError": "inventory",
    "load_inventory": "inventory", "parse_inventory": "inventory",
    "parse_targets": "inventory",
    "LinkNotStreaming": "link", "LinkOptions": "link",
    "LocalLink": "local_link",
    "SshConfig": "ssh_config", "SshConfigError": "ssh_config",
    "HostLink": "ssh_link",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Fleet",
    "HostLink",
    "HostSpec",
    "HostStatus",
    "Inventory",
    "InventoryError",
    "KnownHosts",
    "LinkNotStreaming",
    "LinkOptions",
    "LocalLink",
    "SshConfig",
    "SshConfigError",
    "UnknownHost",
    "fingerprint",
    "load_inventory",
    "parse_inventory",
    "parse_targets",
]
