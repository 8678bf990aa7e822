"""A recording's charts as image files, for a ticket, a review or a paper:
`cockpit report REC --charts DIR`.

Drawn from the same `Snapshot` the panes and the report are made of (so the figures
agree with the screen), with matplotlib's Agg backend (no display needed), in the
Okabe–Ito palette, which reads for every common kind of colour blindness; markers carry
a shape as well as a colour. Each chart is written as SVG and PNG:

    loss.svg/png        train loss (raw and smoothed) and validation loss on one step
                        axis, with restarts, operator adjustments, loss spikes, NaN/Inf
                        steps and the divergence point marked
    lr.svg/png          the learning rate, with the operator's LR changes marked
    throughput.svg/png  samples/s (or steps/s) over steps, restarts marked
    gpus.svg/png        every GPU's utilization, temperature and memory now, with XID,
                        ECC and throttling flagged, grouped by host

Text that came from hosts (host names, marker texts) is drawn as text: matplotlib's
mathtext is switched off for it, so a `$` in a name is not parsed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.analysis.gpu_state import gpus_online
from cockpit.analysis.markers import RESTART
from cockpit.analysis.text import printable
from cockpit.snapshot import Series, Snapshot

# Okabe & Ito (2008): distinguishable in deuteranopia, protanopia and tritanopia.
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
PURPLE, SKY, YELLOW, GREY = "#CC79A7", "#56B4E9", "#F0E442", "#555555"
SIZE_IN = (10.0, 4.0)
DPI = 100  # PNGs of 1000 x 400 pixels
FORMATS = ("svg", "png")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        from cockpit.errors import CockpitError

        raise CockpitError("charts need matplotlib: pip install "
                           "'training-cockpit[charts]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"text.usetex": False, "svg.fonttype": "none",
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _xy(series: Series, which: str = "last") -> tuple[list[float], list[float]]:
    values = getattr(series, which)
    pairs = [(x, y) for x, y in zip(series.x, values, strict=False)
             if y is not None and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _text(value: object) -> str:
    return printable(value)


def _save(plt: Any, fig: Any, out_dir: Path, name: str) -> list[Path]:
    written = []
    for fmt in FORMATS:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, format=fmt, dpi=DPI)
        written.append(path)
    plt.close(fig)
    return written


def _title(snap: Snapshot, what: str) -> str:
    return _text(f"{what} - job {snap.job or 'n/a'}")


def _finish(fig: Any, ax: Any, snap: Snapshot, title: str, ylabel: str,
            legend: str = "upper right") -> Any:
    """Labels, title and legend of a chart over steps."""
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(_title(snap, title))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc=legend, fontsize="small")
    fig.tight_layout()
    return fig


def _loss(plt: Any, snap: Snapshot) -> Any:
    e = snap.effect
    fig, ax = plt.subplots(figsize=SIZE_IN)
    x, y = _xy(e.train_loss)
    if x:
        ax.plot(x, y, color=SKY, linewidth=0.8, label="train loss")
    x, y = _xy(e.train_loss_ema)
    if x:
        ax.plot(x, y, color=BLUE, linewidth=1.6, label="train loss (smoothed)")
    x, y = _xy(e.val_loss)
    if x:
        ax.plot(x, y, color=ORANGE, marker="o", markersize=4, linewidth=1.4,
                label="validation loss")
    labelled: set[str] = set()
    for m in e.markers:
        colour, style = (VERMILLION, "--") if m.kind == RESTART else (PURPLE, ":")
        label = "restart" if m.kind == RESTART else "operator adjustment"
        ax.axvline(m.step, color=colour, linestyle=style, linewidth=1,
                   label=None if label in labelled else label)
        labelled.add(label)
    if e.spike_steps:
        lx, ly = _xy(e.train_loss)
        lookup = dict(zip(lx, ly, strict=False))
        spikes = [(s, lookup[s]) for s in e.spike_steps if s in lookup]
        if spikes:
            ax.scatter([s for s, _ in spikes], [v for _, v in spikes], marker="^",
                       color=VERMILLION, zorder=3, label="loss spike")
    if e.nonfinite_steps:
        top = ax.get_ylim()[1]
        ax.scatter(list(e.nonfinite_steps), [top] * len(e.nonfinite_steps), marker="x",
                   color=VERMILLION, zorder=3, label=f"NaN/Inf ({e.nonfinite_count})")
    if e.divergence_step is not None:
        ax.axvline(e.divergence_step, color=GREY, linestyle="-.", linewidth=1.2,
                   label=f"divergence from step {e.divergence_step}")
    return _finish(fig, ax, snap, "Loss", "loss")


def _lr(plt: Any, snap: Snapshot) -> Any:
    e = snap.effect
    fig, ax = plt.subplots(figsize=SIZE_IN)
    x, y = _xy(e.lr)
    if x:
        ax.plot(x, y, color=GREEN, linewidth=1.4, label="learning rate")
    for i, change in enumerate(e.lr_changes):
        ax.axvline(change.step, color=PURPLE, linestyle=":", linewidth=1.2,
                   label="operator's LR change" if i == 0 else None)
        ax.annotate(_text(change.text), (change.step, ax.get_ylim()[1]), fontsize="x-small",
                    rotation=90, va="top", ha="right", color=PURPLE)
    return _finish(fig, ax, snap, "Learning rate", "LR")


def _throughput(plt: Any, snap: Snapshot) -> Any:
    f = snap.efficiency
    fig, ax = plt.subplots(figsize=SIZE_IN)
    x, y = _xy(f.throughput_history)
    unit = "samples/s" if snap.progress.samples is not None else "steps/s"
    if x:
        ax.plot(x, y, color=BLUE, linewidth=1.2, label=unit)
        lx, lo = _xy(f.throughput_history, "lo")
        hx, hi = _xy(f.throughput_history, "hi")
        if lx == hx and lx:
            ax.fill_between(lx, lo, hi, color=SKY, alpha=0.3, linewidth=0, label="range")
    first = True
    for m in snap.effect.markers:
        if m.kind == RESTART:
            ax.axvline(m.step, color=VERMILLION, linestyle="--", linewidth=1,
                       label="restart" if first else None)
            first = False
    return _finish(fig, ax, snap, "Throughput", unit, legend="lower right")


def _gpus(plt: Any, snap: Snapshot) -> Any:
    cells = [(h.host, g) for h in snap.health.hosts for g in h.gpus]
    online = [on for h in snap.health.hosts for on in gpus_online(h)]
    fig, axes = plt.subplots(3, 1, figsize=(SIZE_IN[0], SIZE_IN[1] * 1.5), sharex=True)
    labels = [_text(f"{host}:{g.index}") for host, g in cells]
    xs = list(range(len(cells)))

    def bars(ax: Any, values: Sequence[float | None], colour: str, ylabel: str,
             top: float | None = None) -> None:
        ax.bar(xs, [v if v is not None else 0.0 for v in values], color=colour)
        ax.set_ylabel(ylabel)
        if top is not None:
            ax.set_ylim(0, top)

    bars(axes[0], [g.util for _, g in cells], BLUE, "util %", 100.0)
    bars(axes[1], [g.temp for _, g in cells], ORANGE, "temp °C")
    bars(axes[2], [100.0 * g.mem_used / g.mem_total if g.mem_used is not None and g.mem_total
                   else None for _, g in cells], GREEN, "memory %", 100.0)
    for x, (_host, g), answers in zip(xs, cells, online, strict=True):
        flags = [f for f, on in (("OFF", not answers), (f"XID {g.xid}", bool(g.xid)),
                                 ("ECC", bool(g.ecc_unc)), ("THR", bool(g.throttle)))
                 if on]
        if flags:
            axes[0].annotate(" ".join(flags), (x, 0), rotation=90, fontsize="x-small",
                             color=VERMILLION, ha="center", va="bottom")
    axes[2].set_xticks(xs, labels, rotation=90 if len(xs) > 16 else 0, fontsize="x-small")
    sim = " (SIM: simulated GPUs)" if snap.health.simulated else ""
    axes[0].set_title(_title(snap, f"GPUs now{sim}"))
    fig.tight_layout()
    return fig


def write_charts(snap: Snapshot, out_dir: Path) -> list[Path]:
    """Every chart of `snap` into `out_dir` (created), as SVG and PNG; the paths."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with plt.rc_context({"text.parse_math": False}):
        for name, draw in (("loss", _loss), ("lr", _lr), ("throughput", _throughput),
                           ("gpus", _gpus)):
            written += _save(plt, draw(plt, snap), out_dir, name)
    return written


def charts_of(recording: Path, out_dir: Path, *, job: str | None = None,
              until_ts: float | None = None) -> list[Path]:
    """The charts of `recording` as `cockpit report` sees it (same job pick, same
    resolution), written to `out_dir`."""
    from cockpit.errors import CockpitError
    from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot
    from cockpit.store.database import Store, StoreError
    from cockpit.store.queries import StoreReader

    try:
        store = Store(recording, read_only=True)
    except StoreError as exc:
        raise CockpitError(str(exc)) from None
    try:
        snap = build_snapshot(StoreReader(store), until_ts=until_ts, label="REPORT",
                              buckets=SNAPSHOT_BUCKETS, job=job)
    finally:
        store.close()
    return write_charts(snap, out_dir)
