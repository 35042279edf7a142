"""Hand-drawn timelines for the step's tests: EVENTS rows from (op, device, step, start_ns,
duration_ns)."""
from __future__ import annotations

import pandas as pd

from harness import schema

NS = 1e-9


def events(rows) -> pd.DataFrame:
    """EVENTS from (op, device, step, start_ns, duration_ns)."""
    return pd.DataFrame([{schema.PROGRAM: "p", schema.OP: op, schema.DEVICE: d, schema.STEP: k,
                          schema.START_NS: s, schema.DURATION_NS: t}
                         for op, d, k, s, t in rows])
