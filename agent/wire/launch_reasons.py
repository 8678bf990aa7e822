"""Why a host's part of a job started, and why the agent ended it: the words a
`job_started` event carries as `data.reason` and a `job_exited` event as
`data.ended_for` (agent.wire.events), spelt here once for the agent that writes them and
the cockpit that reads them.
"""

# -- `job_started`'s `reason`: what launched this attempt (agent.job.managed.launch) --
LAUNCH = "launch"  # the job's first start on this host (a fork's start too)
RECOVERY = "recovery"  # the agent's restart after a failure
RELAUNCH = "relaunch"  # the operator's relaunch (new spec, new host set)
RESUME = "resume"  # the operator's resume of a paused job
SCALE = "scale"  # the operator's scale op: this host joins the elastic job
TAKEOVER = "takeover"  # a spare takes over a failed host's place (agent.job.membership)
LAUNCH_REASONS = (LAUNCH, RECOVERY, RELAUNCH, RESUME, SCALE, TAKEOVER)

# -- `job_exited`'s `ended_for`: why the agent ended the attempt itself (absent when the
# processes ended on their own) -----------------------------------------------------------
FOR_PAUSE = "pause"  # a pause: its checkpoint taken, or rank 0's host stopped for it
FOR_STOP = "stop"  # the operator's stop
FOR_RELAUNCH = RELAUNCH  # the operator's relaunch, which starts it again
FOR_SCALE = SCALE  # a scale-down took this host out of the job
FOR_SHUTDOWN = "shutdown"  # the agent shut down
FOR_PEER = "peer"  # another host of the job gave up (agent.job.peer_end)
ENDED_FOR = (FOR_PAUSE, FOR_STOP, FOR_RELAUNCH, FOR_SCALE, FOR_SHUTDOWN, FOR_PEER)

# -- named groups ---------------------------------------------------------------------
# The starts by which the operator (not the agent's recovery, nor a spare) starts a job,
# or a host's part of it, again: they end an outage the agent did not recover, and a
# pause. A scale's join is one: a failed or stopped host may join (agent.job.membership).
OPERATOR_STARTS = (LAUNCH, RESUME, RELAUNCH, SCALE)
# The starts that begin a new run of a job (its launch, a fork's launch, a relaunch); a
# restart after a failure, a resume after a pause, a join or a takeover go on with the
# same run.
RUN_STARTS = (LAUNCH, RELAUNCH)
# The agent's ends of an attempt that end an outage too (the operator's pause, stop or
# relaunch; another host's part that ended).
OUTAGE_ENDS = (FOR_PAUSE, FOR_STOP, FOR_RELAUNCH, FOR_PEER)
