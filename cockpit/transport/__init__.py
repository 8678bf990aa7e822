"""Reaching the agents: inventory, SSH config and host keys, one link per host.

The transport delivers raw NDJSON chunks (whole lines) and link states; it never parses
records. Decoding belongs to `cockpit.ingest`, storage to `cockpit.store`.
"""

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
