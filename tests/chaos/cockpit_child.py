"""The cockpit side of a chaos run, as a process of its own so the run can SIGKILL it.

Reads its configuration (host specs, known_hosts file, store path, status path) from the
JSON file named by argv[1], streams every host into the store with a `LiveSession`, and
every half second replaces the status file with each host's stored high-water seq. It
ends cleanly (flushes, closes the store) on SIGTERM; a SIGKILL is one of the faults.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from cockpit.sessions.live import LiveSession
from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_config import SshConfig


def _write_status(path: Path, marks: dict[str, int]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(marks))
    os.replace(tmp, path)


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    specs = [HostSpec(**fields) for fields in config["specs"]]
    known = KnownHosts(extra_files=[Path(config["known_hosts"])], use_system=False,
                       use_user=False, record_file=Path(config["record_file"]))
    options = LinkOptions(known_hosts=known, ssh_config=SshConfig(None), stale_after=5.0,
                          backoff_base=0.1, backoff_cap=1.0, keepalive=5.0)
    status = Path(config["status"])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    session = LiveSession(specs, Path(config["store"]), options)
    with session:
        while not done.wait(0.5):
            _write_status(status, {s.name: session.writer.high_water(s.name) for s in specs})
    _write_status(status, {s.name: session.writer.high_water(s.name) for s in specs})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
