"""The refusal of an operation, shared by the agent (the message becomes the ack's
`error`) and the checks the cockpit runs with the agent's own rules before it sends one
(agent.wire.launch_spec)."""


class OpError(Exception):
    """An op that cannot be carried out; the message becomes the ack's `error`."""
