"""The book beside the measured step (chapter 1, "Rooflines"): with T_math the step's compute
and T_comms its communication, each at the roofline, a step takes at least max(T_math, T_comms)
(perfect overlap) and at most their sum (none); the larger term names the regime."""
from __future__ import annotations

import pandas as pd

from harness import schema
from predictions.step import COLLECTIVE, MATMUL


def regime(t_math_s: float, t_comms_s: float) -> str:
    """Chapter 1: compute-bound when T_math >= T_comms, communication-bound otherwise."""
    return "compute-bound" if t_math_s >= t_comms_s else "communication-bound"


def bounds(t_math_s: float, t_comms_s: float, source: str) -> dict:
    """T_math, T_comms, the overlap bound max(...) and the serial bound sum(...), the regime."""
    return {schema.T_MATH_S: t_math_s, schema.T_COMMS_S: t_comms_s,
            schema.OVERLAP_BOUND_S: max(t_math_s, t_comms_s),   # perfect overlap (chapter 1)
            schema.SERIAL_BOUND_S: t_math_s + t_comms_s,        # no overlap
            schema.REGIME: regime(t_math_s, t_comms_s), schema.BOUNDS_FROM: source}


def step_bounds(book, ops: pd.DataFrame, comm_ops) -> dict:
    """The bounds from the book's estimate of the workload (its matmul and collective parts,
    ``predictions.step.Analytic.parts``) where there is one, else from the compiled program's
    ops at their roofline (communication ops against the rest); {} with neither."""
    parts = getattr(book, "parts", None) or {}
    if MATMUL in parts and COLLECTIVE in parts:
        return bounds(float(parts[MATMUL].seconds), float(parts[COLLECTIVE].seconds), "book")
    predicted = ops[schema.PREDICTED_S]
    if predicted.isna().all():
        return {}
    comm = ops[schema.OP].astype(str).isin(set(comm_ops))
    return bounds(float(predicted[~comm].fillna(0).sum()), float(predicted[comm].fillna(0).sum()),
                  "hlo")
