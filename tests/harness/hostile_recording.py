"""The recorded real run, with hostile text where hosts and trainers put text.

The run of tests/data/charlm-run.ndjson.gz, changed as a hostile or careless host and
trainer would send it: escape sequences that set the window title (OSC 0) and the
clipboard (OSC 52), colour codes and a C1 CSI in log lines, Textual markup with
`@click` actions and a `link`, and brackets that merely look like markup
(`tensor([[0.1, 0.2`, `driver [/b] mismatch`), in the GPU state, the run's data
version and tags, log lines, an event's message and an agent alert's where/what/hint.
It is ingested through the real `Store.ingest`, as a live session would store it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from cockpit.store.database import Store
from tests.harness.recording import RECORDED_HOST, RECORDING

OSC_TITLE = "\x1b]0;PWNED-TITLE\x07"
OSC_TITLE_ST = "\x1b]2;PWNED-TITLE-2\x1b\\"
OSC_52 = "\x1b]52;c;cHduZWQ=\x07"  # "pwned" onto the clipboard
ANSI = "\x1b[31mred\x1b[0m"
C1_CSI = "\x9b2J"
CLICK = "[@click=app.quit]quit[/]"
CLICK_SPACED = "[ @click=app.quit]stop[/]"
LINK = "[link='https://evil.example']here[/link]"
TENSOR = "tensor([[0.1, 0.2"
SHAPE = "shape [3, 4"
CLOSE = "driver [/b] mismatch"

GPU_STATE = f"{CLOSE} {OSC_TITLE}"
DATA_VERSION = f"{CLICK_SPACED} {OSC_52}"
TAG = f"{SHAPE} {ANSI}"
LOG_LINES = (f"{ANSI} loss {TENSOR}", f"title {OSC_TITLE}", f"clip {OSC_52}",
             f"{CLICK} {LINK}", f"{SHAPE} {C1_CSI}", f"st {OSC_TITLE_ST}")
EVENT_MSG = f"{TENSOR} {OSC_TITLE} {CLICK}"
ALERT = {"code": "hostile_probe", "kind": "data", "severity": "warning",
         "where": {"file": f"{CLOSE}"}, "what": f"{TENSOR} {CLICK_SPACED} {OSC_TITLE}",
         "hint": f"{SHAPE} {LINK} {OSC_52}"}
# Every hostile string the recording holds, as sent.
SENT = (GPU_STATE, DATA_VERSION, TAG, *LOG_LINES, EVENT_MSG, ALERT["what"], ALERT["hint"])


def hostile_lines() -> list[bytes]:
    """The recording's journal lines with the hostile text put in."""
    with gzip.open(RECORDING, "rb") as fh:
        records = [json.loads(line) for line in fh.read().splitlines()]
    logs = [r for r in records if r["t"] == "log"]
    for record, text in zip(logs[-len(LOG_LINES):], LOG_LINES, strict=True):
        record["line"] = text  # the newest lines: the ones the log screen shows first
    for record in records:
        if record["t"] == "hello":
            record["gpu_state"] = GPU_STATE
        elif record["t"] == "run":
            record["data_version"] = DATA_VERSION
            record["tags"] = [TAG, "plain"]
    last = records[-1]
    seq, ts = max(r["seq"] for r in records), last["ts"]
    records.append({"t": "event", "seq": seq + 1, "ts": ts, "kind": "sampler_error",
                    "job": "demo", "rank": None, "step": None, "msg": EVENT_MSG,
                    "data": {}})
    records.append({"t": "alert", "seq": seq + 2, "ts": ts, "job": "demo", "rank": None,
                    **ALERT})
    return [json.dumps(r).encode() + b"\n" for r in records]


def load_hostile_recording(dest: Path, chunk_lines: int = 500) -> Path:
    lines = hostile_lines()
    with Store(dest) as store:
        for start in range(0, len(lines), chunk_lines):
            store.ingest(RECORDED_HOST, b"".join(lines[start : start + chunk_lines]))
    return dest
