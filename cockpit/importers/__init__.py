"""Runs recorded elsewhere, brought into a recording: TensorBoard event files, JSONL
metric logs and the cockpit's own wire recordings (`cockpit import`).

Every importer turns what it reads into wire records (the protocol of docs/protocol.md)
and feeds them to `Store.ingest`, the path a live stream takes: an imported run is
stored, validated, replayed and reported exactly as a watched one.
"""
