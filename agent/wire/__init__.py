"""The contract that the hook, the agent and the cockpit share: the protocol, record
validation and job-state vocabulary.
"""
