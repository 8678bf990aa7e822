"""The use cases that wire the layers below: the CLI, watch, operations, the demo and the
local run.
"""
