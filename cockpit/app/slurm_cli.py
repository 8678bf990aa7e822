"""`cockpit launch|pause|resume|stop|relaunch JOB.toml` for a job spec whose launcher is
Slurm, and the Slurm side of `cockpit watch` (`slurm_watch`: the queue polled, the
allocated nodes streamed directly or through the login node).

The same commands as for SSH hosts, so a Slurm user learns no second tool; what each
does on Slurm is in docs/slurm.md. Every event goes into the recording (`--store`, or a
new one per command) under the pseudo host `slurm:NAME`, numbered on from what the
recording already holds. The job's current Slurm id is kept on the cluster
(`RUN_DIR/slurm/current-job`), so a later command finds the job wherever it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.wire import ops
from cockpit.control.jobspec import JobSpec, JobSpecError, load_jobspec
from cockpit.control.slurm import (
    PENDING,
    SlurmError,
    SlurmJob,
    commands_for,
    is_slurm,
    launcher_of,
)
from cockpit.control.slurm_controller import SlurmController
from cockpit.control.slurm_watch import SlurmWatcher
from cockpit.errors import CockpitError
from cockpit.printable import printable
from cockpit.store.database import Store
from cockpit.transport.inventory import (
    LOCAL_ADDRESS,
    HostSpec,
    Inventory,
    InventoryError,
    load_inventory,
)
from cockpit.transport.link import LinkOptions
from cockpit.transport.run_command import Commands, SshCommands

ACTIONS = ops.SLURM_OPERATIONS


def slurm_operation(action: str, spec_path: Path, inventory_path: Path | None,
                    store_path: Path | None, options: LinkOptions,
                    timeout: float = 300.0, exclude: tuple[str, ...] = ()) -> int | None:
    """Run `action` through Slurm when the spec's launcher is Slurm; None otherwise (the
    caller goes on with the agents over SSH)."""
    try:
        spec = load_jobspec(spec_path)
    except (JobSpecError, OSError):
        return None  # the SSH path reports it, with its own wording
    if not is_slurm(spec):
        return None
    if action not in ACTIONS:
        raise CockpitError(f"{action} is not offered for a Slurm job; on Slurm: "
                           f"{', '.join(ACTIONS)} (docs/slurm.md)")
    try:
        launcher = launcher_of(spec)
        inventory = load_inventory(inventory_path) if inventory_path else None
        commands = commands_for(launcher, inventory, options)
    except (JobSpecError, InventoryError, OSError) as exc:
        raise CockpitError(str(exc)) from None
    if store_path is None:
        from cockpit.app.paths import default_recording_path

        store_path = default_recording_path(f"job-{spec.name}")
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(store_path)
    try:
        job = SlurmJob(spec, commands, emit=store.ingest)
        job.next_seq = store.high_water(job.host) + 1
        text, ok = _run(job, action, timeout, exclude)
        print(printable(text, multiline=True))  # Slurm's words: its reasons, states
        return 0 if ok else 1
    except SlurmError as exc:
        raise CockpitError(f"{action} {spec.name}: {exc}") from None
    finally:
        store.close()
        if isinstance(commands, SshCommands):
            commands.close()


def _run(job: SlurmJob, action: str, timeout: float,
         exclude: tuple[str, ...] = ()) -> tuple[str, bool]:
    """What `action` did, in words, and whether it did what it is for: a pause whose
    USR1 brought no checkpoint is not (the command exits 1, as an SSH job's pause that
    did not take effect does); a pending job cancelled by a pause is (nothing ran)."""
    if action in (ops.LAUNCH, ops.RESUME, ops.RELAUNCH):
        if action == ops.RELAUNCH:
            job.attach()
            job_id = job.relaunch(exclude, timeout)
        else:
            job_id = job.resume() if action == ops.RESUME else job.submit()
        # Watched until it starts (its queue wait recorded) or `timeout` runs out: a
        # long queue is not an error, the job stays submitted.
        try:
            state = job.wait(lambda s: s.state != PENDING, timeout, every=1.0)
        except SlurmError:
            state = job.look()
        extra = ""
        if state.state == PENDING:
            extra = f": {state.reason}" + (f", expected start {state.estimate}"
                                           if state.estimate else "")
        return f"{job.spec.name}: Slurm job {job_id} {state.state}{extra}", True
    job.attach()
    if action == ops.PAUSE:
        outcome = job.pause(timeout)
        return f"{job.spec.name}: {outcome.describe()}", outcome.ok or outcome.how == "scancel"
    ended = job.stop(timeout)
    return f"{job.spec.name}: Slurm job {job.job_id} cancelled ({ended.state})", True


def slurm_spec_at(path: Path) -> JobSpec | None:
    """The job spec at `path` when it is a Slurm job, else None (not a spec, or another
    launcher: the caller reads it its own way)."""
    try:
        spec = load_jobspec(path)
    except (JobSpecError, OSError, ValueError):
        return None
    return spec if is_slurm(spec) else None


def node_host(node: str, spec: JobSpec, login: HostSpec | None,
              direct: HostSpec | None) -> HostSpec:
    """How the cockpit streams one allocated node's agent: directly, when the inventory
    lists the node (its own address; its state dir the job's RUN_DIR/agents/NODE), or
    through the login node (its address, user and key; the agent there reads the node's
    journal from shared storage), or on this machine when the cockpit runs on the login
    node."""
    state_dir = f"{spec.run_dir}/agents/{node}"
    if direct is not None:
        return replace(direct, state_dir=state_dir, spare=False)
    if login is not None:
        return replace(login, name=node, state_dir=state_dir, spare=False)
    return HostSpec(name=node, address=LOCAL_ADDRESS, state_dir=state_dir)


@dataclass
class SlurmWatch:
    """What `cockpit watch` adds for a Slurm job: the queue watcher and the node links."""

    spec: JobSpec
    inventory: Inventory  # the hosts streamed from the start (the login node left out)
    commands: Commands
    login: HostSpec | None
    known: dict[str, HostSpec]  # the inventory's hosts by name: nodes reached directly
    watcher: SlurmWatcher | None = None

    def start(self, writer: Any, fleet: Any, every: float) -> None:
        """Poll Slurm into `writer` (a store writer: `put`, `high_water`) and add each
        allocated node to `fleet` once its job runs."""
        job = SlurmJob(self.spec, self.commands, emit=writer.put)
        job.next_seq = writer.high_water(job.host) + 1

        def on_nodes(nodes: tuple[str, ...]) -> None:
            for node in nodes:
                fleet.add(node_host(node, self.spec, self.login, self.known.get(node)))

        self.watcher = SlurmWatcher(job, on_nodes, every=every).start()

    def controller(self, spec_path: Path | None = None) -> SlurmController:
        """The screen's controller of this job, through Slurm (docs/slurm.md,
        "Controls"): it shares the watcher's job, so its events go on the same record;
        `spec_path` is read again before a resume or relaunch, as the commands do."""
        if self.watcher is None:
            raise CockpitError("the Slurm watch is not started: no job to control yet")
        return SlurmController(self.watcher.job, spec_path=spec_path)

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if isinstance(self.commands, SshCommands):
            self.commands.close()


def slurm_watch(spec: JobSpec, inventory: Inventory | None,
                options: LinkOptions) -> SlurmWatch:
    """The Slurm side of `cockpit watch` for `spec`; `inventory` names the login node
    (when the spec's `login` is set) and any compute node reachable directly."""
    try:
        launcher = launcher_of(spec)
        inventory = inventory or Inventory(())
        commands = commands_for(launcher, inventory, options)
    except JobSpecError as exc:
        raise CockpitError(str(exc)) from None
    hosts = inventory.by_name()
    login = hosts.get(launcher.login) if launcher.login else None
    streamed = Inventory(tuple(h for h in inventory.hosts if h.name != launcher.login),
                         inventory.source)
    return SlurmWatch(spec, streamed, commands, login, hosts)
