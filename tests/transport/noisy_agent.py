"""A remote command that misbehaves on purpose: floods stderr, emits malformed lines.

Usage: noisy_agent.py stream --state-dir DIR --from SEQ  (the stream template's shape).
Writes STDERR_BYTES of diagnostics to stderr before each record so that a transport that
does not drain stderr stalls on the SSH channel window, and mixes malformed lines in.
"""

from __future__ import annotations

import json
import sys

STDERR_BYTES = 256 * 1024
RECORDS = 40


def main() -> int:
    start = int(sys.argv[sys.argv.index("--from") + 1])
    out, err = sys.stdout.buffer, sys.stderr.buffer
    out.write(b'{"t":"stream","seq":0,"ts":0,"protocol":1,"from":%d}\n' % start)
    noise = b"warning: something noisy happened on this host\n"
    for seq in range(start + 1, start + RECORDS + 1):
        err.write(noise * (STDERR_BYTES // len(noise)))
        err.flush()
        out.write(json.dumps({"t": "gpu", "seq": seq, "ts": seq}).encode() + b"\n")
        if seq % 10 == 0:
            out.write(b"this line is not json\n")
            out.write(b'{"t":"gpu","seq":"x"\n')
        out.flush()
    err.write(b"last words on stderr\n")
    err.flush()
    sys.stdin.read()  # like the real agent: exit when the cockpit closes stdin
    return 0


if __name__ == "__main__":
    sys.exit(main())
