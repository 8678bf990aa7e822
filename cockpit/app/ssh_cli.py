"""The SSH side of the command line: `cockpit check`, `cockpit hosts trust`, and the
options every command that dials hosts shares (`--ssh-config`, host-key trust).

Kept apart from `cockpit.app.cli` (which many hands edit) so that these commands read as one
piece; `cockpit.app.cli` only registers them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cockpit.analysis.text import printable
from cockpit.errors import CockpitError


def add_ssh_options(p: argparse.ArgumentParser, *, known_hosts: bool = True) -> None:
    """`--ssh-config` and `--allow-unchecked-host-keys` (plus the two host-key options
    unless the parser has them already)."""
    if known_hosts:
        p.add_argument("--known-hosts", type=Path, default=None)
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust unknown host keys and remember them (changed keys are "
                            "still refused)")
    p.add_argument("--ssh-config", type=Path, default=None, metavar="FILE",
                   help="the SSH config to read (default ~/.ssh/config)")
    p.add_argument("--allow-unchecked-host-keys", action="store_true",
                   help="let `StrictHostKeyChecking no` in the SSH config take effect "
                        "(unknown keys used unrecorded; changed keys still refused)")


def link_options(args: argparse.Namespace) -> Any:
    """LinkOptions from the command's SSH options."""
    from cockpit.transport.host_keys import KnownHosts
    from cockpit.transport.link import LinkOptions
    from cockpit.transport.ssh_config import SshConfig, SshConfigError

    known_hosts = getattr(args, "known_hosts", None)
    known = KnownHosts(extra_files=[known_hosts] if known_hosts else [],
                       accept_new=bool(getattr(args, "accept_new_host_keys", False)),
                       allow_unchecked=bool(getattr(args, "allow_unchecked_host_keys", False)))
    config_path = getattr(args, "ssh_config", None)
    options = LinkOptions(known_hosts=known)
    if config_path is not None:
        if not Path(config_path).is_file():
            raise CockpitError(f"{config_path}: no such SSH config file")
        try:
            options.ssh_config = SshConfig(config_path)
        except SshConfigError as exc:  # it quotes the file: shown as text
            raise CockpitError(printable(exc, multiline=True)) from None
    return options


def add_commands(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="pre-flight: can every host be watched, and the "
                           "job launched? (reach, keys, Python, agent, dirs, torch, "
                           "rendezvous)")
    check.add_argument("inventory", type=Path, metavar="INVENTORY.toml")
    check.add_argument("job", type=Path, nargs="?", default=None, metavar="JOB.toml")
    add_ssh_options(check)
    hosts = sub.add_parser("hosts", help="host keys: `cockpit hosts trust HOST`")
    verbs = hosts.add_subparsers(dest="hosts_command", required=True)
    trust = verbs.add_parser("trust", help="fetch a host's key (through its jump host), "
                             "show its fingerprint and record it when you say so")
    trust.add_argument("host", help="an inventory host name (with --inventory), an ssh "
                       "alias or user@host[:port]")
    trust.add_argument("--inventory", type=Path, default=None)
    trust.add_argument("--yes", action="store_true", help="record without asking")
    add_ssh_options(trust)


def _inventory(path: Path) -> Any:
    from cockpit.transport.inventory import InventoryError, load_inventory

    if not path.is_file():
        raise CockpitError(f"{path}: no such inventory file")
    try:
        return load_inventory(path)
    except InventoryError as exc:  # it quotes the file: shown as text
        raise CockpitError(printable(exc, multiline=True)) from None


def run_check(hosts: list[Any], options: Any, spec: Any = None, echo: Any = print) -> Any:
    from cockpit.control.preflight import check

    names = printable(", ".join(h.name for h in hosts))
    job = f" for job {printable(spec.name)}" if spec is not None else ""
    echo(f"checking {names}{job} …")
    report = check(hosts, options, spec)
    echo(printable(report.text(), multiline=True))  # it quotes what the hosts said
    return report


def cmd_check(args: argparse.Namespace) -> int:
    options = link_options(args)
    spec = None
    if args.job is not None:
        from cockpit.app.operations import job_hosts

        spec, hosts = job_hosts(args.job, args.inventory)
    else:
        hosts = list(_inventory(args.inventory).hosts)
    return 0 if run_check(hosts, options, spec).ok else 1


def preflight_launch(args: argparse.Namespace, options: Any) -> None:
    """`cockpit launch` checks first: a launch that would hang is refused."""
    from cockpit.app.operations import job_hosts

    spec, hosts = job_hosts(args.job, args.inventory)
    report = run_check(hosts, options, spec, echo=lambda t: print(t, file=sys.stderr))
    if not report.ok:
        raise CockpitError("the pre-flight check failed (above): nothing was started. "
                           "Fix it, or launch with --no-check to skip the check")


def cmd_hosts(args: argparse.Namespace) -> int:
    from cockpit.transport.inventory import InventoryError, parse_targets
    from cockpit.transport.ssh_config import SshConfigError
    from cockpit.transport.ssh_link import ConnectFailed
    from cockpit.transport.trust import fetch_host_key

    options = link_options(args)
    if args.inventory is not None:
        by_name = _inventory(args.inventory).by_name()
        if args.host not in by_name:
            raise CockpitError(f"{printable(args.host)}: not in {args.inventory} "
                               f"(known: {printable(', '.join(by_name) or 'none')})")
        spec = by_name[args.host]
    else:
        try:
            spec = parse_targets([args.host]).hosts[0]
        except InventoryError as exc:
            raise CockpitError(printable(exc, multiline=True)) from None
    try:
        fetched = fetch_host_key(spec, options)
    except (ConnectFailed, SshConfigError) as exc:
        # paramiko quotes the server's banner: shown as text, as every word of the host.
        raise CockpitError(f"cannot fetch the host key of {printable(spec.name)}: "
                           f"{printable(exc, multiline=True)}") from None
    print(f"{printable(spec.name)} ({printable(fetched.name)}) presents "
          f"{printable(fetched.key.get_name())} {printable(fetched.fingerprint)}")
    if fetched.known:
        print("already trusted: nothing recorded")
        return 0
    if not args.yes:
        print("Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub "
              "on the host).")
        try:
            answer = input(f"record it in {fetched.record_in}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("not recorded")
            return 1
    print(f"recorded in {fetched.record()}")
    return 0
