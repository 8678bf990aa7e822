"""`cockpit launch|pause|resume|stop JOB.toml` for a job spec whose launcher is Slurm.

The same commands as for SSH hosts, so a Slurm user learns no second tool; what each
does on Slurm is in docs/slurm.md. Every event goes into the recording (`--store`, or a
new one per command) under the pseudo host `slurm:NAME`, numbered on from what the
recording already holds. The job's current Slurm id is kept on the cluster
(`RUN_DIR/slurm/current-job`), so a later command finds the job wherever it runs.
"""

from __future__ import annotations

from pathlib import Path

from cockpit.control.jobspec import JobSpecError, load_jobspec
from cockpit.control.slurm import (
    PENDING,
    SlurmError,
    SlurmJob,
    commands_for,
    is_slurm,
    launcher_of,
)
from cockpit.errors import CockpitError
from cockpit.store.database import Store
from cockpit.transport.inventory import InventoryError, load_inventory
from cockpit.transport.link import LinkOptions
from cockpit.transport.run_command import SshCommands

ACTIONS = ("launch", "pause", "resume", "stop")


def slurm_operation(action: str, spec_path: Path, inventory_path: Path | None,
                    store_path: Path | None, options: LinkOptions,
                    timeout: float = 300.0) -> int | None:
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
        from cockpit.app.watch import default_recording_path

        store_path = default_recording_path(f"job-{spec.name}")
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(store_path)
    try:
        job = SlurmJob(spec, commands, emit=store.ingest)
        job.next_seq = store.high_water(job.host) + 1
        print(_run(job, action, timeout))
        return 0
    except SlurmError as exc:
        raise CockpitError(f"{action} {spec.name}: {exc}") from None
    finally:
        store.close()
        if isinstance(commands, SshCommands):
            commands.close()


def _run(job: SlurmJob, action: str, timeout: float) -> str:
    if action in ("launch", "resume"):
        job_id = job.resume() if action == "resume" else job.submit()
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
        return f"{job.spec.name}: Slurm job {job_id} {state.state}{extra}"
    job.attach()
    if action == "pause":
        ended = job.pause(timeout)
        return (f"{job.spec.name}: Slurm job {job.job_id} checkpointed and ended "
                f"({ended.state}); its allocation is released")
    ended = job.stop(timeout)
    return f"{job.spec.name}: Slurm job {job.job_id} cancelled ({ended.state})"
