"""Sweep figures as PNG bytes: collective bus bandwidth vs message size against the book's
curve, and matmul roofline efficiency vs size. Input: the sweep summary (``harness.sweep.report``).
"""
from __future__ import annotations

import math

import pandas as pd

from harness import schema
from harness.report.plots import _png

# matplotlib is imported inside the plotting functions, on purpose: it is slow to import and
# only a figure needs it.


def _subplots(n: int, size=(4.2, 3.6)):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


BINARY = (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))  # message sizes: 4K = 4096 bytes
DECIMAL = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))   # FLOPs


def _label(x: float, units) -> str:
    """4096 -> "4K" (BINARY), 2.1e9 -> "2.1G" (DECIMAL)."""
    for unit, scale in units:
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _log_axes(ax, xs, units) -> None:
    """Log-log axes with ticks at the data's x values and plain 1-2-5 ticks on y."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted({float(x) for x in xs})
    ax.set_xticks(ticks, [_label(x, units) for x in ticks], fontsize=7)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _done(df: pd.DataFrame, column: str) -> pd.DataFrame:
    d = df[(df[schema.STATUS] == "done") & df[column].notna()]
    return d[pd.to_numeric(d[column], errors="coerce") > 0]


def collective_bandwidth(df: pd.DataFrame) -> bytes | None:
    """Per collective kind, log-log: measured bus bandwidth (solid) and the book's prediction
    for the same bytes (dashed) against the message size per device. None without data."""
    d = _done(df, schema.MEASURED_BUS_GBPS)
    if d.empty:
        return None
    kinds = list(dict.fromkeys(d[schema.COLLECTIVE]))
    fig, axes = _subplots(len(kinds))
    for ax, kind in zip(axes, kinds):
        for i, (series, g) in enumerate(d[d[schema.COLLECTIVE] == kind].groupby(
                schema.SERIES, sort=False)):
            g = g.sort_values(schema.MESSAGE_BYTES)
            color = f"C{i % 10}"
            ax.plot(g[schema.MESSAGE_BYTES], g[schema.MEASURED_BUS_GBPS], "o-", color=color,
                    label=series)
            pred = g[g[schema.PREDICTED_BUS_GBPS] > 0]
            if not pred.empty:
                ax.plot(pred[schema.MESSAGE_BYTES], pred[schema.PREDICTED_BUS_GBPS], "--",
                        color=color, alpha=0.8)
        _log_axes(ax, d.loc[d[schema.COLLECTIVE] == kind, schema.MESSAGE_BYTES], BINARY)
        ax.set_title(f"{kind}: measured (solid) vs book (dashed)", fontsize=9)
        ax.set_xlabel("message size per device (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    return _png(fig)


def matmul_efficiency(df: pd.DataFrame) -> bytes | None:
    """Roofline efficiency (predicted / measured) of the matmul ops against the matmul's size
    2BDF, one curve per case and mesh; 1.0 is the roofline. None without data."""
    d = _done(df, schema.MATMUL_EFFICIENCY)
    d = d[pd.to_numeric(d[schema.MODEL_FLOPS], errors="coerce") > 0]
    if d.empty:
        return None
    fig, (ax,) = _subplots(1, size=(7, 4.5))
    for i, (series, g) in enumerate(d.groupby(schema.SERIES, sort=False)):
        g = g.sort_values(schema.MODEL_FLOPS)
        ax.plot(g[schema.MODEL_FLOPS], g[schema.MATMUL_EFFICIENCY], "o-", color=f"C{i % 10}",
                label=series)
    ax.axhline(1.0, color="k", lw=1, ls=":", label="roofline")
    _log_axes(ax, d[schema.MODEL_FLOPS], DECIMAL)
    ax.set_xlabel("matmul size 2·B·D·F (FLOPs over all devices)")
    ax.set_ylabel("efficiency (predicted / measured)")
    ax.set_title("Matmul roofline efficiency vs size")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="best")
    return _png(fig)
