"""The step timeline picture: one measured step (the slowest device's median one) as lanes of
compute, communication, exposed communication and idle time, and the step the compiled
schedule predicts at the roofline below it on the same time axis."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.report.plots import _figure, _png, timed
from harness.step.timeline import merged
from harness.units import fmt_seconds

STEP_PNG = "step.png"
_COLOR = {"compute": "tab:blue", "comm": "tab:orange", "exposed": "tab:red", "idle": "0.75"}


def _union(spans: pd.DataFrame, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    rows = spans if kind is None else spans[spans[schema.KIND] == kind]
    return merged(rows[schema.START_S].to_numpy(float), rows[schema.END_S].to_numpy(float))


def _covered(x: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Which points ``x`` the disjoint sorted intervals (s, e) cover."""
    i = np.searchsorted(s, x, side="right") - 1
    return (i >= 0) & (x < e[np.maximum(i, 0)]) if len(s) else np.zeros(len(x), bool)


def _minus(s: np.ndarray, e: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> list[tuple]:
    """The parts of the disjoint intervals (s, e) that the disjoint (cs, ce) leave uncovered."""
    cuts = np.unique(np.concatenate([s, e, cs, ce]))
    if len(cuts) < 2:
        return []
    mid = (cuts[:-1] + cuts[1:]) / 2
    keep = _covered(mid, s, e) & ~_covered(mid, cs, ce)
    a, b = merged(cuts[:-1][keep], cuts[1:][keep])
    return list(zip(a, b))


def lanes(spans: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """Lane name -> intervals (start, end) in seconds: compute, comm, the exposed part of comm
    (no compute under it) and idle (nothing running between the step's first and last op)."""
    cs, ce = _union(spans, schema.KIND_COMPUTE)
    ks, ke = _union(spans, schema.KIND_COMM)
    al, ae = _union(spans)
    return {"compute": list(zip(cs, ce)), "comm": list(zip(ks, ke)),
            "exposed": _minus(ks, ke, cs, ce), "idle": list(zip(ae[:-1], al[1:]))}


def _draw(ax, y: float, intervals, color: str, scale: float) -> None:
    if intervals:
        ax.broken_barh([(a * scale, (b - a) * scale) for a, b in intervals], (y - 0.35, 0.7),
                       color=color, linewidth=0)


@timed
def step_timeline(spans: pd.DataFrame, step: dict,
                  predicted: pd.DataFrame | None = None) -> bytes | None:
    """The picture as PNG bytes (None without a measured step). ``spans`` and ``predicted``
    are ``schema.STEP_SPANS`` of the measured step and of the simulated roofline step."""
    if spans is None or spans.empty or not step.get(schema.STEP_S):
        return None
    end = max(step[schema.STEP_S], float(predicted[schema.END_S].max())
              if predicted is not None and len(predicted) else 0.0)
    scale, unit = (1e3, "ms") if end >= 1e-3 else (1e6, "us")
    rows = [("measured " + k, v, _COLOR[k]) for k, v in lanes(spans).items()]
    if predicted is not None and len(predicted):
        sim = lanes(predicted)
        rows += [("predicted compute", sim["compute"], _COLOR["compute"]),
                 ("predicted comm", sim["comm"], _COLOR["comm"]),
                 ("predicted exposed", sim["exposed"], _COLOR["exposed"])]
    # a lane with nothing on it (communication in a program that has none) is left out
    rows = [r for r in rows if r[1] or r[0].endswith("compute")]
    fig, ax = _figure((9, 0.45 * len(rows) + 1.3), margins=(1.5, 0.3, 0.65, 0.4))
    for i, (_, intervals, color) in enumerate(rows):
        _draw(ax, len(rows) - 1 - i, intervals, color, scale)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([name for name, _, _ in reversed(rows)])
    ax.set_xlim(0, end * scale)
    ax.set_xlabel(f"time from the step's first op ({unit})")
    ax.grid(axis="x", alpha=0.3)
    title = f"step {fmt_seconds(step[schema.STEP_S])}"
    if step.get(schema.PREDICTED_STEP_S):
        title += f", predicted {fmt_seconds(step[schema.PREDICTED_STEP_S])} at the roofline"
    where = f"device {step.get(schema.DEVICE, 0)}, median step"
    ax.set_title(f"{title} ({where}); red: communication no compute hides", fontsize=10)
    return _png(fig)
