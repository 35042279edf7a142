"""A sweep's plots as PNG bytes: collective bus bandwidth vs message size against the book's
curve, and matmul roofline efficiency vs size. Input: the sweep summary (``harness.sweep.report``).

Each series has its own colour and marker; where two series' book curves coincide they are
drawn once and named together, so no line hides another. Legends sit below the panels, and a
figure above the roofline is marked where it stands.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from harness import schema
from harness.analysis.gaps import ROOFLINE_MARGIN
from harness.report.plots import FONT, _png, timed
from harness.units import fmt_binary, fmt_si

# matplotlib is imported inside the plotting functions, on purpose: it is slow to import and
# only a figure needs it.

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _subplots(n: int, size=(4.6, 3.6)):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes.flat[:n]:
        ax.tick_params(labelsize=FONT)
    return fig, list(axes.flat[:n])


def _x_ticks(ax, xs, label: Callable[[float], str]) -> None:
    """A log x axis with a labelled tick at each of the data's x values, each ``label(x)``."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log")
    ticks = sorted({float(x) for x in xs})
    ax.set_xticks(ticks, [label(x) for x in ticks], fontsize=FONT)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _y_ticks(ax, values, fmt=lambda v: f"{v:g}") -> None:
    """Labelled y ticks over the data's range: linear while it spans less than 10x, else log with
    ticks at 1, 2 and 5 of each decade, at least three of them labelled."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    v = [float(x) for x in values if x and x > 0 and math.isfinite(x)]
    if not v:
        return
    lo, hi = min(v), max(v)
    if hi / lo < 10:
        ax.set_ylim(0, hi * 1.15)
        ax.yaxis.set_major_locator(MaxNLocator(6))
    else:
        ax.set_yscale("log")
        decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        ticks = [m * 10.0 ** e for e in decades for m in (1, 2, 5)]
        shown = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5]
        ax.set_ylim(min(shown + [lo]) / 1.2, max(shown + [hi]) * 1.2)
        ax.yaxis.set_major_locator(FixedLocator(shown))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt(x)))


def _done(df: pd.DataFrame, column: str) -> pd.DataFrame:
    d = df[(df[schema.STATUS] == "done") & df[column].notna()]
    return d[pd.to_numeric(d[column], errors="coerce") > 0]


def _book_curves(groups) -> list[tuple[list[str], pd.DataFrame]]:
    """The book's curves of each series, those that coincide (same sizes, values within 0.1%)
    merged: (series names, points)."""
    out: list[tuple[list[str], pd.DataFrame]] = []
    for series, g in groups:
        pred = g.loc[g[schema.PREDICTED_BUS_GBPS] > 0,
                     [schema.MESSAGE_BYTES, schema.PREDICTED_BUS_GBPS]]
        if pred.empty:
            continue
        for names, other in out:
            if (len(other) == len(pred) and np.allclose(
                    other.to_numpy(float), pred.to_numpy(float), rtol=1e-3)):
                names.append(series)
                break
        else:
            out.append(([series], pred))
    return out


@timed
def collective_bandwidth(df: pd.DataFrame) -> bytes | None:
    """Per collective kind, log-log: measured bus bandwidth (solid, a marker per series) and the
    book's prediction for the same bytes (dashed) against the message size per device. None
    without data."""
    d = _done(df, schema.MEASURED_BUS_GBPS)
    if d.empty:
        return None
    series = list(dict.fromkeys(d[schema.SERIES]))
    style = {s: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, s in enumerate(series)}
    kinds = list(dict.fromkeys(d[schema.COLLECTIVE]))
    fig, axes = _subplots(len(kinds))
    for ax, kind in zip(axes, kinds):
        k = d[d[schema.COLLECTIVE] == kind].sort_values(schema.MESSAGE_BYTES)
        groups = list(k.groupby(schema.SERIES, sort=False))
        for name, g in groups:
            color, marker = style[name]
            ax.plot(g[schema.MESSAGE_BYTES], g[schema.MEASURED_BUS_GBPS], "-", color=color,
                    marker=marker, label=f"{name}: measured")
        for names, pred in _book_curves(groups):
            color, marker = style[names[0]] if len(names) == 1 else ("0.3", None)
            ax.plot(pred[schema.MESSAGE_BYTES], pred[schema.PREDICTED_BUS_GBPS], "--",
                    color=color, lw=1.6, label=f"book: {' and '.join(names)}"
                    + (" (one curve)" if len(names) > 1 else ""))
        _x_ticks(ax, k[schema.MESSAGE_BYTES], fmt_binary)  # message sizes: 4K = 4096 bytes
        _y_ticks(ax, pd.concat([k[schema.MEASURED_BUS_GBPS], k[schema.PREDICTED_BUS_GBPS]]))
        ax.set_title(f"{kind}: measured (solid) vs book (dashed)", fontsize=FONT + 1)
        ax.set_xlabel("message size per device (bytes)", fontsize=FONT)
        ax.set_ylabel("bus bandwidth (GB/s)", fontsize=FONT)
        ax.grid(True, which="major", alpha=0.25)
    handles: dict = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.tight_layout()
    fig.legend(list(handles.values()), list(handles.keys()), loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=1, fontsize=FONT,
               frameon=False)
    return _png(fig, tight=True)


@timed
def matmul_efficiency(df: pd.DataFrame) -> bytes | None:
    """Roofline efficiency (predicted / measured time) of the matmul ops, in percent, against
    the matmul's size 2BDF, one curve per case and mesh; 100% is the roofline, and a point
    above what it allows is marked with its value. None without data."""
    d = _done(df, schema.MATMUL_EFFICIENCY)
    d = d[pd.to_numeric(d[schema.MODEL_FLOPS], errors="coerce") > 0]
    if d.empty:
        return None
    fig, (ax,) = _subplots(1, size=(7.5, 4.5))
    pct = d[schema.MATMUL_EFFICIENCY].astype(float) * 100
    for i, (series, g) in enumerate(d.groupby(schema.SERIES, sort=False)):
        g = g.sort_values(schema.MODEL_FLOPS)
        ax.plot(g[schema.MODEL_FLOPS], pct[g.index], "-", marker=MARKERS[i % len(MARKERS)],
                color=f"C{i % 10}", label=series)
    ax.axhline(100, color="k", lw=1, ls=":", label="roofline (100%)")
    _x_ticks(ax, d[schema.MODEL_FLOPS], fmt_si)  # FLOPs: 2.1G = 2.1e9
    _y_ticks(ax, list(pct) + [100], fmt=lambda v: f"{v:g}%")
    over = d[d[schema.MATMUL_EFFICIENCY] > ROOFLINE_MARGIN]
    if not over.empty:
        ax.axhspan(100 * ROOFLINE_MARGIN, ax.get_ylim()[1], color="tab:red", alpha=0.07,
                   label=f"above {ROOFLINE_MARGIN:.0%}: impossible (see the notes)")
        for i in over.index:
            ax.annotate(f"{pct[i]:.0f}%", (over.at[i, schema.MODEL_FLOPS], pct[i]),
                        xytext=(6, 4), textcoords="offset points", color="tab:red",
                        fontsize=FONT)
    ax.set_xlabel("matmul size 2·B·D·F (FLOPs over all devices)", fontsize=FONT + 1)
    ax.set_ylabel("efficiency (roofline time / measured)", fontsize=FONT + 1)
    ax.set_title("Matmul roofline efficiency vs size", fontsize=FONT + 2)
    ax.grid(True, which="major", alpha=0.25)
    ax.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              frameon=False)
    return _png(fig, tight=True)
