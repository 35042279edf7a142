"""One small trend plot per point for ``harness history``'s page (asv's dashboard draws one per
benchmark over commits): its nights' deciding figure, each segment's median as a level, each
change point a dashed vertical line labelled with its commit range, the newest night coloured by
its verdict."""
from __future__ import annotations

import math

import numpy as np

from harness.regress import judge
from harness.regress.trend import Trend
from harness.report.plots import FONT, _png, timed
from harness.units import fmt_seconds

SIZE = (3.3, 2.0)  # inches at the report's DPI: three plots a row at 1024 px
COLOURS = {judge.REGRESSION: "#c0392b", judge.INCONCLUSIVE: "#d68910",
           judge.UNSTABLE: "#7f8c8d", judge.IMPROVEMENT: "#1e8449", judge.OK: "#2471a3"}


def _short(commits: str) -> str:
    """``1a2b3c4..5d6e7f8`` from a range of long commits (7 characters each)."""
    a, sep, b = commits.partition("..")
    return f"{a[:7]}..{b[:7]}" if sep else commits.split(" ")[0][:7]


@timed
def trend_plot(t: Trend) -> bytes | None:
    """The point's trend plot as PNG (None without a night to draw)."""
    s = t.series
    y = np.exp(s.values)
    if not np.isfinite(y).any():
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=SIZE)
    fig.subplots_adjust(left=0.2, right=0.97, bottom=0.2, top=0.86)
    x = np.arange(1, len(y) + 1)
    ax.plot(x, y, "o-", ms=3, lw=0.8, color="#555")
    ax.plot(x[-1:], y[-1:], "o", ms=6, color=COLOURS.get(t.verdict, "#555"))
    cuts = [0, *(c.index for c in t.changes), len(y)]
    for a, b in zip(cuts, cuts[1:]):
        level = np.nanmedian(y[a:b]) if b > a else math.nan
        ax.hlines(level, a + 0.6, b + 0.4, color="#2471a3", lw=1.2, alpha=0.7)
    top = np.nanmax(y)
    for c in t.changes:
        ax.axvline(c.index + 0.5, color="#c0392b", ls="--", lw=0.9)
        ax.text(c.index + 0.6, top, _short(c.commits), fontsize=FONT - 2, color="#c0392b",
                va="top", ha="left", rotation=90)
    ax.set_title(f"{t.verdict}: {t.change:+.0%}" if math.isfinite(t.change) else t.verdict,
                 fontsize=FONT, color=COLOURS.get(t.verdict, "#222"))
    ax.set_xlabel("night", fontsize=FONT)
    ax.set_ylabel(s.figure, fontsize=FONT - 1)
    ax.tick_params(labelsize=FONT - 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_seconds(v)))
    ax.set_ylim(0, top * 1.15)
    ax.set_xlim(0.5, len(y) + 0.5)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, nbins=6))
    return _png(fig)
