"""Report figures as PNG bytes (matplotlib, Agg backend): roofline and per-category bars.

Every figure reads without its page: labelled ticks on each axis, legends outside the data, the
roof's peak figures written on it, and labels only for the top ops, never overlapping. Drawing
functions are ``@timed``: ``drawing_time()`` measures what they cost (a sweep reports it).
"""
from __future__ import annotations

import functools
import io
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.gaps import ROOFLINE_MARGIN, beats_roofline, peak_dtype
from harness.units import fmt_si

# matplotlib is imported inside the plotting functions, on purpose: it is slow to import and
# only a figure needs it.

_COLORS = dict(zip(schema.CATEGORIES, ("tab:blue", "tab:purple", "tab:red", "tab:green",
                                         "tab:olive", "tab:gray", "tab:brown")))
DPI = 100
FONT = 9          # tick labels, legends, op labels: readable at 100% zoom
TOP_OPS = 5       # ops the roofline names
LABEL_CHARS = 36  # longest op name it writes (longer ones are cut, with an ellipsis)


@dataclass
class Stopwatch:
    seconds: float = 0.0


_RUNNING: list[Stopwatch] = []


@contextmanager
def drawing_time() -> Iterator[Stopwatch]:
    """A stopwatch of the seconds ``@timed`` drawing functions take while the block runs."""
    watch = Stopwatch()
    _RUNNING.append(watch)
    try:
        yield watch
    finally:
        _RUNNING.remove(watch)


def timed(draw):
    """Mark a drawing function: its time counts on every running ``drawing_time``."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return draw(*args, **kwargs)
        finally:
            for watch in _RUNNING:
                watch.seconds += time.perf_counter() - t0
    return wrapper


def _png(fig, tight: bool = False) -> bytes:
    """The figure as PNG bytes. ``tight``: cropped to what it draws (a second layout pass,
    about a third more time: for a figure drawn once per sweep, not once per run)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight" if tight else None)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _figure(size=(7, 4.5), margins=(0.9, 0.3, 0.7, 0.45)):
    """A figure ``size`` inches with its axes ``margins`` inches in from its left, right,
    bottom and top edges: a fixed layout, so that it is laid out once."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    (w, h), (left, right, bottom, top) = size, margins
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)
    ax.tick_params(labelsize=FONT)
    return fig, ax


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(x: float) -> str:
    """1e-08 -> "10⁻⁸" (plain text: no mathtext to lay out), other values as ``fmt_si``."""
    e = math.log10(x) if x > 0 else math.nan
    return f"10{str(round(e)).translate(_SUPERSCRIPT)}" if abs(e - round(e)) < 1e-9 else fmt_si(x)


def log_axes(ax, x_fmt=power_of_ten, y_fmt=power_of_ten) -> None:
    """Log-log axes over their limits (set them first), labelled at each decade, or at 1, 2 and
    5 of each where an axis spans under four decades; no minor ticks (each costs a label's
    layout; plain-text labels draw several times faster than mathtext)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis, (lo, hi), fmt in ((ax.xaxis, ax.get_xlim(), x_fmt), (ax.yaxis, ax.get_ylim(), y_fmt)):
        wide = math.log10(hi / lo) >= 4
        axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0),
                                          numticks=12))
        axis.set_minor_locator(NullLocator())
        axis.set_major_formatter(FuncFormatter(lambda v, _, f=fmt if wide else fmt_si: f(v)))


def spread(ys: list[float], gap: float, lo: float = 0.02, hi: float = 0.98) -> list[float]:
    """Positions for labels wanted at ``ys`` (axes fractions, any order), in the same order,
    each at least ``gap`` from the next and all within [lo, hi] (the gap shrinks to fit as many
    labels as there are): no two labels overlap."""
    if len(ys) > 1:
        gap = min(gap, (hi - lo) / (len(ys) - 1))
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out = [0.0] * len(ys)
    prev = lo - gap
    for i in order:  # up from the bottom: each at least a gap above the one below
        out[i] = prev = max(min(max(ys[i], lo), hi), prev + gap)
    nxt = hi + gap
    for i in reversed(order):  # down from the top: each at least a gap below the one above
        out[i] = nxt = min(out[i], nxt - gap)
    return out


@timed
def roofline(ops: pd.DataFrame, *, peak_flops_per_s: float, hbm_bytes_per_s: float,
             chip_name: str, tiers: tuple = ()) -> bytes | None:
    """Ops placed by arithmetic intensity (FLOPs/byte) and achieved FLOP/s under the roofs.

    The roof is min(C, I·W_hbm) (`roofline.md`); the ridge sits at the critical intensity C/W.
    ``tiers``: the chip's cache tiers, (capacity, bytes/s), each drawn dashed: the roof of an op
    whose bytes fit in it (``predictions.roofline.memory_bandwidth``).
    The ``TOP_OPS`` ops with the most measured time are named beside the plot, each joined to
    its point. Returns None when no op has both FLOPs and bytes.
    """
    d = ops[(ops[schema.FLOPS].fillna(0) > 0) & (ops[schema.HBM_BYTES].fillna(0) > 0)
            & (ops[schema.MEASURED_S] > 0)]
    if d.empty:
        return None
    intensity = d[schema.FLOPS] / d[schema.HBM_BYTES]
    achieved = d[schema.FLOPS] * d[schema.COUNT] / d[schema.MEASURED_S]
    fig, ax = _figure((9.5, 5.2), margins=(0.9, 2.7, 1.15, 0.4))
    ridge = peak_flops_per_s / hbm_bytes_per_s
    # room around the ops and the ridge: the sloped roof and its figures are always in view
    lo = min(float(intensity.min()), ridge) / 30
    hi = max(float(intensity.max()), ridge) * 30
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(xs, np.minimum(peak_flops_per_s, xs * hbm_bytes_per_s), "k-", lw=1.5,
            label=f"roof min(C, I·W_hbm); ridge at {ridge:.3g} FLOPs/B")
    for capacity, w in tiers:
        ax.plot(xs, np.minimum(peak_flops_per_s, xs * w), "k--", lw=1,
                label=f"ops moving <= {fmt_si(capacity, 'B')}: {fmt_si(w, 'B/s')}")
    for cat, grp in d.groupby(schema.CATEGORY):
        idx = grp.index
        size = 20 + 400 * grp[schema.SHARE].fillna(0).clip(0, 1)
        ax.scatter(intensity[idx], achieved[idx], s=size, alpha=0.7, label=cat,
                   color=_COLORS.get(cat, "black"), edgecolors="none")
    over = d[d[schema.EFFICIENCY].map(beats_roofline)] if schema.EFFICIENCY in d else d[:0]
    if len(over):  # above what the roof allows: ringed
        ax.scatter(intensity[over.index], achieved[over.index], s=160, facecolors="none",
                   edgecolors="tab:red", linewidths=1.5,
                   label=f"efficiency over {ROOFLINE_MARGIN:.0%}: above the roof")
    y_lo = min(float(achieved.min()), lo * hbm_bytes_per_s) / 3
    ax.set_xlim(lo, hi)
    ax.set_ylim(y_lo, max(peak_flops_per_s, float(achieved.max())) * 4)
    log_axes(ax, y_fmt=fmt_si)
    ax.plot([ridge, ridge], [y_lo, peak_flops_per_s], color="0.5", ls=":", lw=1)
    # the roof's figures, written on it
    ax.text(hi / 1.3, peak_flops_per_s * 1.25, f"peak {fmt_si(peak_flops_per_s, 'FLOP/s')}",
            ha="right", va="bottom", fontsize=FONT)
    # along the sloped roof, a quarter of the way in (ops sit below a roof, and crowd near the
    # ridge), just above it, at the slope's angle on screen (a fixed layout)
    x_mem = min(lo * (hi / lo) ** 0.25, math.sqrt(lo * ridge))
    (x0, y0), (x1, y1) = ax.transData.transform([(x_mem, x_mem * hbm_bytes_per_s),
                                                 (ridge, peak_flops_per_s)])
    ax.annotate(f"HBM {fmt_si(hbm_bytes_per_s, 'B/s')}", (x_mem, x_mem * hbm_bytes_per_s),
                xytext=(-3, 5), textcoords="offset points", ha="center", va="bottom",
                fontsize=FONT, rotation_mode="anchor",
                rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)))
    _name_top_ops(ax, d, intensity, achieved)
    ax.set_xlabel("arithmetic intensity (FLOPs / HBM byte)", fontsize=FONT + 1)
    ax.set_ylabel("achieved FLOP/s per device", fontsize=FONT + 1)
    ax.set_title(f"Roofline on {chip_name} (marker area = share of step time)", fontsize=FONT + 2)
    legend = ax.legend(fontsize=FONT, loc="upper left", bbox_to_anchor=(-0.02, -0.12),
                       ncol=3, frameon=False)
    first = 1 + len(tiers)  # after the roofs
    for handle in legend.legend_handles[first:first + d[schema.CATEGORY].nunique()]:
        handle.set_sizes([40])
    ax.grid(True, which="major", alpha=0.25)
    return _png(fig)


def _name_top_ops(ax, d: pd.DataFrame, intensity: pd.Series, achieved: pd.Series) -> None:
    """The top ops' names in a column right of the axes, in the order of their points' heights
    and spaced apart (``spread``), each with a thin line to its point."""
    top = d.nlargest(TOP_OPS, schema.MEASURED_S)
    if top.empty:
        return
    y0, y1 = (math.log10(v) for v in ax.get_ylim())
    want = [(math.log10(achieved[i]) - y0) / (y1 - y0) for i in top.index]
    for i, y in zip(top.index, spread(want, gap=0.07)):
        name = str(top.at[i, schema.OP])
        name = name if len(name) <= LABEL_CHARS else name[:LABEL_CHARS - 1] + "…"
        ax.annotate(name, (intensity[i], achieved[i]), xytext=(1.02, y),
                    textcoords="axes fraction", va="center", fontsize=FONT,
                    arrowprops=dict(arrowstyle="-", color="0.55", lw=0.6))


@timed
def category_bars(categories: pd.DataFrame) -> bytes | None:
    """Measured vs predicted time per category (unmodeled time stacked on the measured bar,
    where there is any); the legend sits below the bars. None for fewer than two categories:
    one pair of bars says no more than the table's one row."""
    if len(categories) < 2:
        return None
    fig, ax = _figure((7, 3.8), margins=(0.8, 0.25, 0.95, 0.4))
    x = np.arange(len(categories))
    ms = 1e3
    unmodeled = categories[schema.UNMODELED_S].fillna(0) * ms
    modeled = categories[schema.MEASURED_S] * ms - unmodeled
    ax.bar(x - 0.2, modeled, 0.4, label="measured", color="tab:blue")
    if (unmodeled > 0).any():
        ax.bar(x - 0.2, unmodeled, 0.4, bottom=modeled, label="measured, no rule predicts it",
               color="tab:gray")
    ax.bar(x + 0.2, categories[schema.PREDICTED_S] * ms, 0.4, label="predicted (roofline)",
           color="tab:orange")
    ax.set_xticks(x, categories[schema.CATEGORY], fontsize=FONT)
    ax.set_ylabel("time per step (ms)", fontsize=FONT + 1)
    ax.set_title("Measured vs predicted time per category", fontsize=FONT + 2)
    ax.grid(axis="y", alpha=0.25)
    ax.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
              frameon=False)
    return _png(fig)


ROOFLINE_PNG = "roofline.png"
CATEGORIES_PNG = "categories.png"


def report_plots(ops: pd.DataFrame, categories: pd.DataFrame, chip) -> dict[str, bytes]:
    """A run report's plots, file name -> PNG: its roofline on ``chip`` (a
    ``predictions.hardware.Chip``) and its categories; a plot with nothing to show is left out."""
    pngs = {ROOFLINE_PNG: roofline(ops, peak_flops_per_s=chip.flops_per_s(peak_dtype(chip)),
                                   hbm_bytes_per_s=chip.hbm_bytes_per_s, chip_name=chip.name,
                                   tiers=chip.memory_tiers),
            CATEGORIES_PNG: category_bars(categories)}
    return {name: png for name, png in pngs.items() if png}
