"""The host side of the training cockpit.

Runs on GPU hosts with the host's own Python (>= 3.8): standard library only, with psutil
and pynvml used when present. Importing this package must stay cheap and must never pull
in torch, duckdb, textual or anything from `cockpit`.
"""

__version__ = "0.1.0"
