"""Report figures as PNG bytes (matplotlib, Agg backend): roofline and per-category bars."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd

from harness import schema
from harness.compare import peak_dtype

# matplotlib is imported inside the plotting functions, on purpose: it is slow to import and
# only a figure needs it.

_COLORS = dict(zip(schema.CATEGORIES, ("tab:blue", "tab:purple", "tab:red", "tab:green",
                                         "tab:olive", "tab:gray", "tab:brown")))


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _figure(size=(7, 4.5)):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def roofline(ops: pd.DataFrame, *, peak_flops_per_s: float, hbm_bytes_per_s: float,
             chip_name: str) -> bytes | None:
    """Ops placed by arithmetic intensity (FLOPs/byte) and achieved FLOP/s under the roofs.

    The roof is min(C, I·W_hbm) (`roofline.md`); the ridge sits at the critical intensity C/W.
    Returns None when no op has both FLOPs and bytes.
    """
    d = ops[(ops[schema.FLOPS].fillna(0) > 0) & (ops[schema.HBM_BYTES].fillna(0) > 0)
            & (ops[schema.MEASURED_S] > 0)]
    if d.empty:
        return None
    intensity = d[schema.FLOPS] / d[schema.HBM_BYTES]
    achieved = d[schema.FLOPS] * d[schema.COUNT] / d[schema.MEASURED_S]
    fig, ax = _figure()
    lo = min(intensity.min(), 1.0) / 2
    hi = max(intensity.max(), peak_flops_per_s / hbm_bytes_per_s) * 4
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(xs, np.minimum(peak_flops_per_s, xs * hbm_bytes_per_s), "k-", lw=1.5,
            label=f"roof: min(C, I·W_hbm), ridge at {peak_flops_per_s / hbm_bytes_per_s:.3g}")
    for cat, grp in d.groupby(schema.CATEGORY):
        idx = grp.index
        size = 20 + 400 * grp[schema.SHARE].fillna(0).clip(0, 1)
        ax.scatter(intensity[idx], achieved[idx], s=size, alpha=0.7, label=cat,
                   color=_COLORS.get(cat, "black"), edgecolors="none")
    top = d.nlargest(5, schema.MEASURED_S)
    for i, row in top.iterrows():
        ax.annotate(row[schema.OP], (intensity[i], achieved[i]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / HBM byte)")
    ax.set_ylabel("achieved FLOP/s per device")
    ax.set_title(f"Roofline on {chip_name} (marker area = share of step time)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    return _png(fig)


def category_bars(categories: pd.DataFrame) -> bytes | None:
    """Measured vs predicted time per category (unmodeled time stacked on the measured bar)."""
    if categories.empty:
        return None
    fig, ax = _figure((7, 3.5))
    x = np.arange(len(categories))
    ms = 1e3
    modeled = (categories[schema.MEASURED_S] - categories[schema.UNMODELED_S]) * ms
    ax.bar(x - 0.2, modeled, 0.4, label="measured", color="tab:blue")
    ax.bar(x - 0.2, categories[schema.UNMODELED_S] * ms, 0.4, bottom=modeled,
           label="measured, unmodeled", color="tab:gray")
    ax.bar(x + 0.2, categories[schema.PREDICTED_S] * ms, 0.4, label="predicted (roofline)",
           color="tab:orange")
    ax.set_xticks(x, categories[schema.CATEGORY])
    ax.set_ylabel("time per step (ms)")
    ax.set_title("Measured vs predicted time per category")
    ax.legend(fontsize=8)
    return _png(fig)


ROOFLINE_PNG = "roofline.png"
CATEGORIES_PNG = "categories.png"


def report_plots(ops: pd.DataFrame, categories: pd.DataFrame, chip) -> dict[str, bytes]:
    """A run report's plots, file name -> PNG: its roofline on ``chip`` (a
    ``predictions.hardware.Chip``) and its categories; a plot with nothing to show is left out."""
    pngs = {ROOFLINE_PNG: roofline(ops, peak_flops_per_s=chip.flops_per_s(peak_dtype(chip)),
                                   hbm_bytes_per_s=chip.hbm_bytes_per_s, chip_name=chip.name),
            CATEGORIES_PNG: category_bars(categories)}
    return {name: png for name, png in pngs.items() if png}
