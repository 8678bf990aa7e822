"""`cockpit watch`: the live session over SSH, with the job spec's controller when one
is given. Wiring of the layers below (sessions, control, transport); the session itself
knows nothing of job files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cockpit.analysis.text import printable
from cockpit.app.paths import default_recording_path
from cockpit.control.controller import Controller, Send
from cockpit.control.jobspec import (
    JobFile,
    JobSpec,
    JobSpecError,
    load_jobspec,
    with_inventory_spares,
)
from cockpit.errors import CockpitError
from cockpit.sessions.live import LiveSession
from cockpit.store.retention import RetentionPolicy
from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.inventory import Inventory, InventoryError, load_inventory, parse_targets
from cockpit.transport.link import LinkOptions


def _inventory_from(targets: Sequence[str]) -> Inventory:
    """One target that is a file (whatever its name) or names a TOML file is an
    inventory; anything else is `[user@]host[:port]` targets."""
    if len(targets) == 1:
        path = Path(targets[0])
        if path.is_file():
            return load_inventory(path)
        if path.suffix.lower() == ".toml":
            what = "a directory, not an inventory file" if path.is_dir() else \
                "no such inventory file"
            raise CockpitError(f"{path}: {what}")
    return parse_targets(targets)


def watched_job(job_path: Path, inventory: Inventory) -> JobSpec:
    """The job `cockpit watch --job` controls, checked against the inventory, with the
    inventory's spares when it is elastic and names none (as the CLI operations do)."""
    try:
        return _read_job(job_path, inventory)
    except JobSpecError as exc:
        raise CockpitError(printable(exc, multiline=True)) from None


def _read_job(job_path: Path, inventory: Inventory) -> JobSpec:
    spec = load_jobspec(job_path, known_hosts=[h.name for h in inventory.hosts])
    return with_inventory_spares(spec, [h.name for h in inventory.spares])


def watch_controller(job_path: Path, inventory: Inventory, send: Send) -> Controller:
    """The controller of `cockpit watch --job`: it reads the job file again when it
    changed, so the screen's relaunch and fork start what `cockpit relaunch JOB.toml`
    would, not the file as it was when the cockpit opened."""
    spec = watched_job(job_path, inventory)
    job_file = JobFile(job_path, lambda path: _read_job(path, inventory))
    return Controller(spec, send, reload=job_file.changed)


@contextmanager
def open_watch(
    targets: Sequence[str],
    *,
    store_path: Path | None,
    known_hosts: Path | None,
    accept_new_host_keys: bool,
    job_path: Path | None = None,
    raw_window: float | None = None,
    options: LinkOptions | None = None,
) -> Iterator[LiveSession]:
    """A started live session over SSH for `cockpit watch` (controllable with a job spec);
    `options`, when given, replace the ones built from the two host-key arguments. A
    Slurm job spec (`--job`, or the only target) is watched through Slurm instead:
    its queue state polled, each allocated node's agent streamed (docs/slurm.md)."""
    from cockpit.app.slurm_cli import slurm_spec_at

    if job_path is None and len(targets) == 1 and slurm_spec_at(Path(targets[0])):
        job_path, targets = Path(targets[0]), []
    slurm = slurm_spec_at(job_path) if job_path is not None else None
    if slurm is not None:
        yield from _slurm_watch(slurm, targets, store_path, known_hosts,
                                accept_new_host_keys, raw_window, options)
        return
    try:
        inventory = _inventory_from(targets)
    except InventoryError as exc:  # it quotes the file: shown as text
        raise CockpitError(printable(exc, multiline=True)) from None
    # Checked before the session opens the store; the ops go out once it has a fleet.
    controller = None if job_path is None else watch_controller(
        job_path, inventory, lambda host, op: session.fleet.send(host, op))
    if store_path is None:
        store_path = default_recording_path("watch")
    extra = [known_hosts] if known_hosts else []
    options = options or LinkOptions(known_hosts=KnownHosts(extra_files=extra,
                                                            accept_new=accept_new_host_keys))
    retention = RetentionPolicy(raw_window=raw_window) if raw_window else None
    session = LiveSession(inventory, store_path, options, retention=retention)
    if controller is not None:
        session.source.controller = controller
    with session:
        yield session


def _slurm_watch(spec: JobSpec, targets: Sequence[str], store_path: Path | None,
                 known_hosts: Path | None, accept_new_host_keys: bool,
                 raw_window: float | None, options: LinkOptions | None,
                 every: float = 2.0) -> Iterator[LiveSession]:
    """`cockpit watch` of a Slurm job: the hosts of `targets` (an inventory with the
    login node, and any compute node reached directly) streamed from the start, the
    allocated nodes added as their job starts, Slurm's view recorded as it changes. The
    screen's controls go through Slurm (`SlurmController`), as `cockpit pause|resume|
    stop|relaunch JOB.toml` do."""
    from cockpit.app.slurm_cli import slurm_watch

    try:
        inventory = _inventory_from(targets) if targets else None
    except InventoryError as exc:
        raise CockpitError(printable(exc, multiline=True)) from None
    extra = [known_hosts] if known_hosts else []
    options = options or LinkOptions(known_hosts=KnownHosts(extra_files=extra,
                                                            accept_new=accept_new_host_keys))
    watch = slurm_watch(spec, inventory, options)
    if store_path is None:
        store_path = default_recording_path("watch")
    retention = RetentionPolicy(raw_window=raw_window) if raw_window else None
    try:
        session = LiveSession(watch.inventory, store_path, options, retention=retention)
    except BaseException:
        watch.stop()
        raise
    with session:
        watch.start(session.writer, session.fleet, every)
        spec_path = Path(spec.source) if Path(spec.source).is_file() else None
        session.source.controller = watch.controller(spec_path)
        try:
            yield session
        finally:
            watch.stop()
