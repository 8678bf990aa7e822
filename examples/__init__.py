"""Example trainers that report to the cockpit through `agent.hook`."""
