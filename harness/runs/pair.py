"""The two runs ``harness.runs.regress`` compares, read for the comparison: each run's op times
and shares, per-step samples per op, per-step totals, and the meta fields they differ in."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schema
from harness.errors import HarnessError
from harness.runs.run import Run
from harness.shares import DEVICE_MEDIAN

# Meta fields that make two runs different experiments; a difference is warned about.
META_KEYS = (schema.WORKLOAD, schema.PRESET, schema.OVERRIDES, schema.MESH, schema.DEVICE_KIND,
             schema.DEVICE_COUNT, schema.CHIP)
# A run stored before the op_timing key timed every op as the median over devices.
META_DEFAULTS = {schema.OP_TIMING: DEVICE_MEDIAN}
KEYS = [schema.PROGRAM, schema.OP]
_NEEDED = (schema.PROGRAM, schema.OP, schema.MEASURED_S)
_STEP_COLUMNS = (schema.PROGRAM, schema.OP, schema.STEP, schema.MEASURED_S)
DESCRIPTIVE = (schema.CATEGORY, schema.BOUND, schema.COLLECTIVE, schema.GROUP_SIZE)


def samples(run: Run, which: str) -> dict[tuple[str, str], np.ndarray]:
    """(program, op) -> per-step times; {} when the run has no per-step table."""
    steps = run.steps
    if steps is None or steps.empty:
        return {}
    schema.validate(steps, _STEP_COLUMNS, where=f"{which} run {run.path} steps")
    steps = steps.dropna(subset=[schema.MEASURED_S])
    values = steps[schema.MEASURED_S].to_numpy(float)
    return {(str(k[0]), str(k[1])): values[i]
            for k, i in steps.groupby(KEYS, sort=False).indices.items()}


def step_totals(run: Run, ops: pd.DataFrame) -> np.ndarray:
    """Per step, the summed time of the ops in the run's ops table (other programs left out)."""
    if run.steps is None or run.steps.empty:
        return np.array([])
    steps = run.steps.astype({schema.PROGRAM: str, schema.OP: str})
    steps = steps.merge(ops[KEYS], on=KEYS, how="inner")
    return steps.groupby(schema.STEP)[schema.MEASURED_S].sum().to_numpy(float)


def prepare(run: Run, which: str) -> pd.DataFrame:
    ops = schema.validate(run.ops, _NEEDED, where=f"{which} run {run.path} ops")
    dup = ops.duplicated(KEYS)
    if dup.any():
        first = ops.loc[dup, KEYS].iloc[0].tolist()
        raise HarnessError(f"{which} run {run.path}: ops table repeats (program, op) {first}")
    ops = ops.assign(**{schema.PROGRAM: ops[schema.PROGRAM].astype(str),
                        schema.OP: ops[schema.OP].astype(str)})
    m = ops[schema.MEASURED_S].astype(float)
    total = m.sum()
    out = pd.DataFrame({schema.PROGRAM: ops[schema.PROGRAM], schema.OP: ops[schema.OP],
                        "t": m, "share": m / total if total > 0 else np.nan,
                        "eff": ops.get(schema.EFFICIENCY, pd.Series(np.nan, index=ops.index)),
                        "pred": ops.get(schema.PREDICTED_S, pd.Series(np.nan, index=ops.index))})
    for col in DESCRIPTIVE:
        out[col] = ops[col] if col in ops.columns else None
    return out


def meta_warnings(baseline: Run, candidate: Run) -> list[str]:
    """One line per meta field (``META_KEYS``) on which the two runs differ; first, whether
    their op times are defined differently (``op_timing``, ``harness.shares``)."""
    timing = [run.meta.get(schema.OP_TIMING, META_DEFAULTS[schema.OP_TIMING])
              for run in (baseline, candidate)]
    out = []
    if timing[0] != timing[1]:
        out.append(f"op times are defined differently: baseline {timing[0]}, candidate "
                   f"{timing[1]} (harness.shares); verdicts mix the two, so take a baseline "
                   "with this version")
    for key in META_KEYS:
        vb, vc = baseline.meta.get(key), candidate.meta.get(key)
        if (vb is not None or vc is not None) and vb != vc:
            out.append(f"runs differ in {key}: baseline {vb!r}, candidate {vc!r}; "
                       "comparing anyway")
    return out
