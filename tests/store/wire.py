"""Wire lines for store tests, encoded by the agent's own encoder."""

from __future__ import annotations

from agent.wire.protocol import encode
from cockpit.store import Store

TS0 = 1_700_000_000.0


def header(journal_id: str = "J1", start: int = 0, first: int = 1, head: int = 0,
           protocol: int = 1) -> bytes:
    return encode("stream", 0, {"protocol": protocol, "agent_version": "test",
                                "journal_id": journal_id, "from": start, "first": first,
                                "head": head}, ts=TS0)


def train(seq: int, step: int, loss: float | None = 1.0, rank: int = 0, job: str = "j1",
          ts: float | None = None) -> bytes:
    return encode("train", seq, {"job": job, "rank": rank, "step": step, "loss": loss,
                                 "lr": 0.001, "step_time": 0.5, "extra": {"acc": 0.5}},
                  ts=TS0 + step if ts is None else ts)


def gpu(seq: int, index: int = 0, util: float = 50.0, ts: float | None = None) -> bytes:
    return encode("gpu", seq, {"gpu": index, "uuid": f"GPU-{index}", "sim": True,
                               "util": util, "temp": 40.0, "power": 100.0, "mem_used": 1 << 30,
                               "throttle": 1, "ecc_agg_unc": 0,
                               "procs": [{"pid": 1, "mem": 10, "rank": 0}]},
                  ts=TS0 + seq if ts is None else ts)


def trains(first_seq: int, last_seq: int) -> bytes:
    """Train lines with seq (and step) first_seq..last_seq."""
    return b"".join(train(s, s) for s in range(first_seq, last_seq + 1))


def count(store: Store, table: str, where: str = "TRUE") -> int:
    with store.cursor() as cur:
        return int(cur.execute(f'SELECT count(*) FROM "{table}" WHERE {where}').fetchall()[0][0])
