"""The names of a job's states: one vocabulary for the agent, the cockpit and the docs.

The agent's words come first: the state of its part of a job on one host
(`agent.job.managed.ManagedJob.state`), as its `status` op answers, as it saves it for
adoption (`agent.wire.jobstate`) and as its events carry it. The cockpit reads a job's
state from the lifecycle events of all its hosts (`cockpit.read.progress`): mostly these
same words, and four of its own, which no agent says, after them. A word is compared,
stored and shown as it is, so each is spelt here once and imported everywhere.
"""

# -- the agent's: one host's part of a job ------------------------------------------
STARTING = "starting"  # torchrun launched, no step yet
RUNNING = "running"
BACKOFF = "backoff"  # waiting out the back-off before a restart
PAUSING = "pausing"  # a pause asked the ranks for a checkpoint
PAUSED = "paused"  # checkpointed and ended; a resume starts it again
FROZEN = "frozen"  # the processes stopped (SIGSTOP), kept in memory
FINISHED = "finished"  # ran to its end
FAILED = "failed"  # the agent gave up restarting it
STOPPED = "stopped"  # the operator stopped it
STANDBY = "standby"  # a spare of an elastic job, waiting to be claimed
EXCLUDED = "excluded"  # taken out of an elastic job (a scale-in, a relaunch --exclude)

# The agent's states in which its part's processes are gone for good: it takes a new
# launch of the job there.
ENDED = (FINISHED, FAILED, STOPPED, EXCLUDED)
# The agent's states of a host that is not (or no longer) one of the job's members.
OUTSIDE = (STANDBY, EXCLUDED)

# -- the cockpit's: the whole job, read from its hosts' lifecycle events ----------------
EXITED = "exited"  # its processes ended early or badly and no agent restarts them
RECOVERING = "recovering"  # an interruption, its restart under way
STALLED = "stalled"  # running, but no step for longer than its pace explains
UNKNOWN = "unknown"  # no lifecycle event (or no job) to read a state from

# The cockpit's states of a whole job that runs no process and will not start one by
# itself: its processes are gone until an operator acts.
IDLE = (FINISHED, STOPPED, FAILED, EXITED, PAUSED)
# The cockpit's states of a job whose processes run, or will run again without the
# operator (a recovery under way), or whose state is not known (it may be either).
LIVE = (RUNNING, STALLED, RECOVERING, UNKNOWN)
# The cockpit's states of a job coming back on its own: a recovery under way, or a
# restart that has not trained its first step yet.
RESTARTING = (RECOVERING, STARTING)

# -- a host's GPU sampler, as its `host` record's `gpu_state` says -----------------------
GPU_OK = "ok"
GPU_NO_DRIVER = "no NVIDIA driver"
GPU_NO_PYNVML = "pynvml not installed"
GPU_NO_GPUS = "no GPUs found"
GPU_SIMULATED = "simulated"  # `agent.samplers.sim`: the GPUs are made up (SIM)
