"""The kinds of `event` records: one vocabulary for the agent, the hook and the cockpit.

An event's `kind` is written by one side (the agent's journal, a rank's `Reporter`
through its spool, the cockpit's Slurm watcher) and compared by the other (the cockpit's
read model, its SQL, the agent reading back its own journal). A kind retyped as a literal
on either side compiles and passes its tests until the writer's spelling changes, and
then silently never matches, so each kind is spelt here once and imported everywhere
(tests/test_event_vocabulary.py holds the code to it). Which kinds a spool may not
forge is decided from the same constants (`AGENT_EVENT_KINDS`).
"""

# -- the agent's: a job's lifecycle on one host ------------------------------------------
JOB_STARTED = "job_started"  # agent.job.supervisor: torchrun launched (data.reason says why)
JOB_ADOPTED = "job_adopted"  # agent.daemon / agent.job.managed: a new agent took over a job
JOB_EXITED = "job_exited"  # agent.job.supervisor: the part's processes ended (data.ended_for)
PEER_ENDED = "peer_ended"  # agent.job.peer_end: another host's part of the job ended
INTERRUPTION = "interruption"  # agent.job.managed (and the Slurm watcher): a failure seen
RECOVERY = "recovery"  # agent.job.managed: the first step after a restart, its outage's length
MEMBERSHIP = "membership"  # agent.job.membership: torchrun admitted a node to an elastic job
TAKEOVER = "takeover"  # agent.job.membership: a spare begins (or trains) in a lost host's place
CHECKPOINTS_SET_ASIDE = "checkpoints_set_aside"  # agent.job.managed: a fresh launch moved them
CHECKPOINT_SKIPPED = "checkpoint_skipped"  # agent.job.managed, trainers: one passed over

# -- the agent's: the operator's operations, as it carried them out ----------------------
PAUSE = "pause"  # agent.job.managed (and the Slurm watcher): a pause or freeze, done or not
RESUME = "resume"  # agent.job.managed (and the Slurm watcher): a resume or thaw
RELAUNCH = "relaunch"  # agent.job.managed (and the Slurm watcher): a relaunch, or an exclusion
FORK = "fork"  # agent.job.managed: a fork started from its parent's checkpoint, or failed
SCALE = "scale"  # agent.job.membership: a host added or removed, done or not

# -- the agent's: faults it saw ----------------------------------------------------------
XID = "xid"  # agent.samplers.nvml: a GPU raised an XID (NVIDIA's error code)
SAMPLER_ERROR = "sampler_error"  # agent.daemon / agent.job: a sampler or watcher of its own failed
SPOOL_ERROR = "spool_error"  # agent.journal.spool: a spool line or file it refused
STARTUP_FAULT = "startup_fault"  # agent.job.output: a known fault read from the job's output

# -- written by both the agent and the hook (`agent.wire.record_check` tells them apart) ---
CONTROL_ACK = "control_ack"  # agent.journal.control_inbox per op; agent.hook.Reporter per adjust
DROPPED = "dropped"  # agent.journal: records lost (seq range); agent.hook.Reporter: unwritten

# -- the hook's own (`agent.hook.Reporter`, from a rank through its spool) ----------------
CHECKPOINT_SAVED = "checkpoint_saved"  # a rank's checkpoint written (path, seconds, bytes)
RESUMED = "resumed"  # a rank started from a checkpoint (its name and step)
STAGE = "stage"  # a rank's training stage began (`Reporter.stage`)

# -- the cockpit's Slurm watcher (`cockpit.control.slurm`), as its own stream -------------
SLURM_SUBMITTED = "slurm_submitted"  # sbatch took the job
SLURM_PENDING = "slurm_pending"  # the job waits in the queue (data.reason)
SLURM_RUNNING = "slurm_running"  # the job runs on its nodes
SLURM_FINISHED = "slurm_finished"  # the job ended (data.state, exit code)
SLURM_NODE_UNAVAILABLE = "slurm_node_unavailable"  # one of its nodes went down or drained
SLURM_UNREACHABLE = "slurm_unreachable"  # `cockpit.control.slurm_watch`: Slurm did not answer

# Event kinds that only the agent journals (job lifecycle, operator ops, its own faults).
# A trainer's `Reporter.event(kind)` may name any other kind; one of these from a spool
# would forge the agent's account of a job (a `job_started` renames its history), so it
# is refused there. `control_ack` and `dropped` are both the agent's and the hook's: the
# spool reader accepts only the hook's shapes of them (an adjust's ack; a count of spool
# records the Reporter could not write). `checkpoint_skipped` is a trainer's to say too.
AGENT_EVENT_KINDS = frozenset({
    JOB_STARTED, JOB_ADOPTED, JOB_EXITED, PEER_ENDED, PAUSE, RESUME,
    RELAUNCH, FORK, SCALE, TAKEOVER, MEMBERSHIP, INTERRUPTION, RECOVERY,
    CHECKPOINTS_SET_ASIDE, XID, SPOOL_ERROR, SAMPLER_ERROR, STARTUP_FAULT,
})
