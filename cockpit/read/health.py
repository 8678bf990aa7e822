"""The Health pane's part of a snapshot: is the hardware well? Every host's link, GPUs
(with their newest XID), CPU, memory, disk and network, and the interruptions.

Simulated GPUs are marked as such on every cell, so the screen can label them SIM."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from cockpit.analysis.jump_hosts import jump_host_down
from cockpit.analysis.lifecycle import dict_field
from cockpit.analysis.restart_budget import newest_budget
from cockpit.analysis.stalls import HostPressure
from cockpit.read.details import (
    link_state,
)
from cockpit.snapshot import (
    GpuCell,
    Health,
    HostHealth,
    Interruption,
)
from cockpit.store.queries import StoreReader

_HOST_UTIL = itemgetter("host", "util")


def host_pressure(hosts: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
              gpus: Sequence[Mapping[str, Any]],
              of_hosts: frozenset[str] = frozenset()) -> list[HostPressure]:
    """How loaded each host is, for the stall verdict (`analysis.stalls`); `of_hosts`:
    only those (the job's: on a shared fleet, another host's full memory is not why the
    job stalled), or every host when empty."""
    if of_hosts:
        samples = [s for s in samples if s["host"] in of_hosts]
        gpus = [g for g in gpus if g["host"] in of_hosts]
    cpus = {h["host"]: h.get("cpu_count") for h in hosts}
    # Grouped once: a per-sample pass over every GPU was hosts x GPUs (1,024 GPUs: a
    # tenth of a refresh).
    utils_of: dict[Any, list[Any]] = {}
    try:  # one C call per GPU where the rows have both (a store read's rows)
        pairs = list(map(_HOST_UTIL, gpus))
    except KeyError:
        pairs = [(g["host"], g.get("util")) for g in gpus]
    for host, util in pairs:
        if util is not None:
            utils_of.setdefault(host, []).append(util)
    out = []
    for s in samples:
        name = s["host"]
        utils = utils_of.get(name, ())
        cpu_count = cpus.get(name)
        out.append(HostPressure(
            host=name,
            cpu=s.get("cpu"),
            load_per_cpu=s["load1"] / cpu_count if s.get("load1") is not None and cpu_count
            else None,
            mem_frac=fraction(s.get("mem_used"), s.get("mem_total")),
            swap_frac=fraction(s.get("swap_used"), s.get("swap_total")),
            disk_frac=fraction(s.get("disk_used"), s.get("disk_total")),
            gpu_util=sum(utils) / len(utils) if utils else None,
        ))
    return out

_cell = tuple.__new__  # a GpuCell from its values in field order
# A sample's figures a cell shows, in one C call per GPU (the rows a store read gives
# have every column).
_SAMPLED = ("util", "temp", "power", "power_limit", "mem_used", "mem_total", "ecc_vol_unc",
            "throttle", "ecc_agg_unc", "sim")
_SAMPLE = itemgetter(*_SAMPLED)
_NO_SAMPLE = (None,) * len(_SAMPLED)
_NO_GPUS: Mapping[Any, Mapping[str, Any]] = {}


def _index_order(index: Any) -> tuple[bool, Any]:
    return (index is None, index)


def _in_order(indexes: Iterable[Any]) -> list[Any]:
    """GPU indexes in order, one without an index (None) last."""
    try:
        return sorted(indexes)  # whole numbers, as a store read gives: no key per index
    except TypeError:  # None among them
        return sorted(indexes, key=_index_order)


def fraction(used: Any, total: Any) -> float | None:
    return used / total if used is not None and total else None


# A GPU's facts from its host's `hello` (index, name, memory, simulated), by the hello's
# GPU list: a reader keeps the hellos until a new one comes (`HealthQueries.hosts`),
# so each refresh hands over the same lists, and a 1,024-GPU fleet's facts are read
# out of them once rather than on every refresh. The list itself is held with its
# facts, so an id reused by a newer list is never taken for it.
Inventory = dict[Any, tuple[int, Any, Any, bool, bool | None]]
_INVENTORIES: dict[int, tuple[Any, Inventory]] = {}
_INVENTORIES_KEPT = 4096


def _inventory(gpus: Any) -> Inventory:
    """index -> (index as a number, -1 without one; name; memory; simulated; whether its
    XIDs are watched, None where the hello does not say)."""
    inv = _INVENTORIES.get(id(gpus))
    if inv is not None and inv[0] is gpus:
        return inv[1]
    out: Inventory = {}
    for g in gpus or ():
        if isinstance(g, dict):
            index = g.get("index")
            watched = g.get("xid_events")
            out[index] = (int(index) if index is not None else -1, g.get("name"),
                          g.get("mem_total"), bool(g.get("simulated")),
                          watched if isinstance(watched, bool) else None)
    if len(_INVENTORIES) >= _INVENTORIES_KEPT:
        _INVENTORIES.clear()
    _INVENTORIES[id(gpus)] = (gpus, out)
    return out


def build_health(hosts: Sequence[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]],
            samples: Sequence[Mapping[str, Any]], xids: Sequence[Mapping[str, Any]],
            interruptions: Sequence[Mapping[str, Any]], host_states: Mapping[str, str] | None,
            now: float, replaying: bool, ended: bool = False,
            xid_history: Sequence[Mapping[str, Any]] | None = None) -> Health:
    """`xids`: recent XID events; `xid_history`: `StoreReader.xid_history`'s rows, every
    GPU's XIDs over the recording, which win where given (a GPU's XID in an earlier run
    stays shown in the next, whatever XIDs came since on other GPUs)."""
    # Over 80 lines: three constructors filled field by field (a GPU cell, a host, an
    # interruption), one for each row the Health pane draws.
    # Each host's newest sample per GPU index, grouped once (not a pass over the fleet
    # per host).
    sampled: dict[Any, dict[Any, Mapping[str, Any]]] = {}
    for g in gpus:
        sampled.setdefault(g["host"], {})[g["gpu"]] = g
    by_host = {s["host"]: s for s in samples}
    newest_xid: dict[tuple[str, Any], int] = {}
    for e in sorted(xids, key=lambda e: e["ts"]):
        data = dict_field(e, "data")
        if isinstance(data.get("xid"), int):
            newest_xid[(e["host"], data.get("gpu"))] = data["xid"]
    history = {(h["host"], h["gpu"]): h for h in xid_history or ()}
    for key, h in history.items():
        newest_xid[key] = h["newest"]
    out = []
    simulated = False
    # Hosts with an XID on some GPU: the others' cells look nothing up by (host, gpu).
    xid_hosts = {host for host, _ in newest_xid}
    for h in hosts:
        name = h["host"]
        inventory = _inventory(h.get("gpus"))
        by_index = sampled.get(name, _NO_GPUS)
        indexes = _in_order(by_index.keys() if inventory.keys() <= by_index.keys()
                            else inventory.keys() | by_index.keys())
        cells = []
        host_sim = h.get("gpu_source") == "sim"
        looked_up = name in xid_hosts
        for index in indexes:
            number, inv_name, inv_mem_total, inv_sim, xid_watched = inventory.get(index) or (
                int(index) if index is not None else -1, None, None, False, None)
            sample = by_index.get(index)
            if sample is None:
                online, values = False, _NO_SAMPLE
            else:
                online = bool(sample)
                try:
                    values = _SAMPLE(sample)
                except KeyError:  # a row without some column: each read on its own
                    values = tuple(sample.get(c) for c in _SAMPLED)
            (util, temp, power, power_limit, mem_used, mem_total, ecc_unc, throttle,
             ecc_lifetime, gsim) = values
            sim = bool(gsim or inv_sim or host_sim)
            simulated = simulated or sim
            if looked_up:
                key = (name, index)
                xid = newest_xid.get(key)
                past = history.get(key)
            else:
                xid = past = None
            # In GpuCell's field order, made in one C call (the named tuple's own
            # `__new__` is Python, a keyword per field); a test holds the order.
            cells.append(_cell(GpuCell, (
                number, online, sim, util, temp, power, power_limit, mem_used,
                mem_total or inv_mem_total, ecc_unc, xid, throttle, inv_name,
                int(past.get("count") or 0) if past else 0,
                int(past.get("earlier") or 0) if past else 0,
                tuple(past.get("codes") or ()) if past else (),
                past.get("earlier_last_ts") if past else None,
                ecc_lifetime, xid_watched)))
        s = by_host.get(name, {})
        out.append(HostHealth(
            host=name,
            state=link_state(h, host_states, now, replaying, ended=ended),
            gpu_state=h.get("gpu_state") or "unknown",
            gpus=tuple(cells),
            cpu=s.get("cpu"),
            mem_used=s.get("mem_used"),
            mem_total=s.get("mem_total") or h.get("mem_total"),
            disk_used=s.get("disk_used"),
            disk_total=s.get("disk_total"),
            net_rx=s.get("net_rx"),
            net_tx=s.get("net_tx"),
            last_seen=h.get("last_seen"),
            behind=jump_host_down(str(h.get("detail") or h.get("last_error") or "")),
        ))
    return Health(
        hosts=tuple(out),
        interruptions=tuple(
            Interruption(
                cause=str(i.get("cause") or "unknown"),
                detected_at=float(i["detected_at"]),
                recovered_in=i.get("recovered_in"),
                steps_lost=i.get("steps_lost"),
                restart_count=i.get("restart_count"),
                evidence=i.get("evidence"),
                hosts=tuple(i.get("hosts") or ((i["host"],) if i.get("host") else ())),
                failed_restarts=tuple(i.get("failed_restarts") or ()),
                ended_by=i.get("ended_by"),
                detection_latency=i.get("detection_latency"),
            )
            for i in interruptions if i.get("detected_at") is not None
        ),
        simulated=simulated,
        restart_budget=newest_budget(interruptions),
    )

def peak_memory(reader: StoreReader, host: str, until: float) -> tuple[float, float] | None:
    """The most GPU memory any GPU of `host` held up to `until`, and its total."""
    used, total = reader.series_columns("gpu", ("mem_used", "mem_total"), where={"host": host},
                                        x="ts", buckets=1, until_ts=until)
    peaks = [v for v in used.hi if v is not None]
    totals = [v for v in total.hi if v is not None]
    return (max(peaks), max(totals)) if peaks and totals else None

def first_wire_errors(reader: StoreReader, hosts: Sequence[Mapping[str, Any]],
                       until_ts: float | None) -> dict[str, tuple[float, int]]:
    """Read only when a host has had a record rejected or stored without some values:
    almost never."""
    bad = tuple(sorted((str(h["host"]), h.get("malformed"), h.get("last_error"))
                       for h in hosts if h.get("malformed") or h.get("last_error")))
    if not bad:
        return {}
    # Read again when a host's count or newest error changes: a new one arrived.
    names = [host for host, _, _ in bad]
    return reader.memo("wire_errors", (bad, until_ts),
                       lambda: reader.first_wire_errors(names, until_ts=until_ts))

def link_rows(hosts: Sequence[Mapping[str, Any]], health: Health) -> list[dict[str, Any]]:
    """Host rows with the state shown, and since when where the store knows it (the
    transport records each change of state)."""
    return [{**h, "state": s.state,
             "state_since": h.get("state_ts") if h.get("state") == s.state else None}
            for h, s in zip(hosts, health.hosts, strict=True)]
