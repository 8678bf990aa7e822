"""The names of the control ops: the words the cockpit writes as a control op's `"op"`
(`{"op": "pause", "id": …, "job": …}`, sent down a host's link to its agent's inbox) and
the agent dispatches on (agent.daemon's handler table, agent.journal.control_inbox), spelt
here once for both.

An op name retyped as a literal on either side compiles and passes its tests until one
side's spelling changes, and then that op is refused as unknown, or silently taken for
another; so each name is spelt here and imported everywhere (tests/test_op_vocabulary.py
holds the code to it). A managed job's queued operations are named by the op that asked
for them (agent.job.managed `request(action, …)`, agent.wire.jobstate's pending ones),
and the cockpit's job commands (`cockpit pause JOB.toml`) by the op they send.

Some of these words are also event kinds (agent.wire.events: the `pause` event says how
a pause went) and launch reasons (agent.wire.launch_reasons): equal strings, other
vocabularies, each with its own owner.
"""

# -- the operator's operations on a job: each asks an agent to act on its part of one job -
LAUNCH = "launch"  # start a job's part from its spec (a spare's standby too)
PAUSE = "pause"  # checkpoint, then stop the part (or, with `freeze`, SIGSTOP it)
RESUME = "resume"  # start a paused or stopped part again from its newest checkpoint
THAW = "thaw"  # SIGCONT a frozen part (the cockpit sends a resume, which thaws it too)
RELAUNCH = "relaunch"  # stop now, start again from the newest checkpoint (or be excluded)
FORK = "fork"  # copy a checkpoint into a new run dir and start a new job from it
STOP = "stop"  # SIGTERM, then SIGKILL: no automatic restart
SCALE = "scale"  # an elastic job's host joins or leaves
ADJUST = "adjust"  # a knob (LR scale, checkpoint now, eval now) for the trainer's control file

# -- questions and rehearsals ---------------------------------------------------------
PING = "ping"  # the agent's version and journal head
JOBS = "jobs"  # the agent's managed jobs as it sees them (membership, state)
SIM_XID = "sim_xid"  # a simulated GPU raises an XID (agents run with --simulate-gpus)

# Every op an agent carries out (agent.daemon's handler table names each one).
OPS = (LAUNCH, PAUSE, RESUME, THAW, RELAUNCH, FORK, STOP, SCALE, ADJUST, PING, JOBS, SIM_XID)

# -- named groups ---------------------------------------------------------------------
# Ops a job's own thread carries out after the ack (agent.journal.control_inbox): the ack
# says they were accepted, and the job's events (`pause`, `job_started`, `job_exited`,
# `fork`, `scale`) say when they were done. "done" would have an operator read a pause as
# complete before its checkpoint.
ACCEPTED_OPS = frozenset({LAUNCH, PAUSE, RESUME, THAW, RELAUNCH, FORK, STOP, SCALE})
# The job operations the `cockpit` command line offers (`cockpit pause JOB.toml`), in the
# order its help and its errors list them.
JOB_OPERATIONS = (LAUNCH, PAUSE, RESUME, RELAUNCH, FORK, ADJUST, STOP, SCALE)
# Those it offers for a job whose launcher is Slurm (cockpit.app.slurm_cli, docs/slurm.md).
SLURM_OPERATIONS = (LAUNCH, PAUSE, RESUME, STOP, RELAUNCH)
