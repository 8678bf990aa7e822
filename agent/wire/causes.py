"""The causes an interruption is classified under (agent.job.recovery), as the agent
journals them in an `interruption` event's `cause` and a job spec names them in
`recovery.exclude_on`: one vocabulary for the agent, the cockpit and the docs."""

OOM = "oom"
GPU_FAULT = "gpu_fault"
NCCL = "nccl"
DATA = "data"
USER_CODE = "user_code"
HANG = "hang"
KILLED = "killed"
UNKNOWN = "unknown"
# A start that failed (the launch itself): the agent does not retry it, and a job spec
# cannot exclude a host for it, so it is not among `CAUSES`.
LAUNCH_FAILED = "launch_failed"
# Every cause, in the order the docs list them.
CAUSES = (OOM, GPU_FAULT, NCCL, DATA, USER_CODE, HANG, KILLED, UNKNOWN)
