"""Pure functions over plain data read from the store.

Nothing here touches DuckDB, the network or the clock: every function takes numbers,
tuples or small dataclasses and returns the same, so each rule can be unit-tested on
hand-made inputs and reused by the live cockpit, replay and the headless report alike.
"""
