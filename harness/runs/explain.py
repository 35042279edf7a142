"""One line per regression or improvement, in the book's roofline terms (`roofline.md`).

Efficiency is the roofline time (T_lower, the max of the compute, memory and comm terms) over
the measured time; ``bound`` names the dominating term; a collective is described by its group
(the mesh axis it runs over, `sharding.md`).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness import schema
from harness.report.tables import fmt_seconds

# How a bound reads in the book's terms (`roofline.md`).
BOUND_TERMS = {"compute": "compute-bound", "memory": "memory-bound",
               "comm": "communication-bound", schema.OVERHEAD: "bound by the per-op overhead",
               schema.UNMODELED: "no roofline model"}


def _over(size, mesh: dict | None) -> str:
    """``over axis X (4 devices)`` when one mesh axis has the group's size, else without."""
    axes = [a for a, n in (mesh or {}).items() if n == size]
    return f"over axis {axes[0]} ({int(size)} devices)" if len(axes) == 1 else \
        f"over {int(size)} devices"


def _describe(row: pd.Series, mesh: dict | None = None) -> str:
    """``(matmul, compute-bound)``, ``(all-reduce over axis X (4 devices), comm...-bound)``."""
    what = str(row.get(schema.CATEGORY) or schema.CAT_OTHER)
    kind = row.get(schema.COLLECTIVE)
    size = row.get(schema.GROUP_SIZE)
    if (isinstance(kind, str) and kind) or what == schema.CAT_COLLECTIVE:
        kind = kind or what
        # sharding.md: a collective's cost is set by its group (mesh axis) size.
        what = f"{kind} {_over(size, mesh)}" if finite(size) and size > 1 else kind
    bound = BOUND_TERMS.get(str(row.get(schema.BOUND)), "")
    return f"({what}, {bound})" if bound else f"({what})"


def finite(x) -> bool:
    """A real number, neither NaN nor infinite (bools are not numbers here)."""
    return (isinstance(x, (int, float, np.number)) and not isinstance(x, bool)
            and math.isfinite(x))


# (slower?, efficiency moved against the time?) -> phrase; "against" = the usual case: the op
# got slower at the same work, so its share of the roofline (`roofline.md`) fell.
_PHRASES = {
    (True, True): "fell from {be:.0%} to {ce:.0%} of its roofline ({stats})",
    (False, True): "rose from {be:.0%} to {ce:.0%} of its roofline ({stats})",
    (True, False): "slowed ({stats}) but its roofline time grew too ({be:.0%} -> {ce:.0%} of "
                   "roofline): it does more work (shapes or count changed)",
    (False, False): "sped up ({stats}) but its roofline time shrank too ({be:.0%} -> {ce:.0%} of "
                    "roofline): it does less work (shapes or count changed)",
}


def explain(row: pd.Series, mesh: dict | None = None) -> str:
    """One line in the book's terms for a regression or improvement row (``mesh``: axis sizes)."""
    b, c, q = row[schema.BASELINE_S], row[schema.CANDIDATE_S], row[schema.Q_VALUE]
    stats = f"{fmt_seconds(b)} -> {fmt_seconds(c)}, {row[schema.CHANGE]:+.0%}, " + (
        f"q={q:.2g}" if finite(q) else "untested")
    be, ce = row[schema.BASELINE_EFFICIENCY], row[schema.CANDIDATE_EFFICIENCY]
    head = f"{row[schema.OP]} {_describe(row, mesh)}"
    slower = c > b
    if finite(be) and finite(ce):
        against = (ce < be) if slower else (ce > be)
        return f"{head} " + _PHRASES[slower, against].format(be=be, ce=ce, stats=stats)
    return f"{head} {'slowed' if slower else 'sped up'} ({stats})"
