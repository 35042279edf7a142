"""Two layouts of one model side by side (``two_layouts``), for ``harness compare A B``.

Fusion names change with every compile (``ynn_fusion.3`` of one layout is another matmul than
``ynn_fusion.3`` of the next), so the ops of two different programs are matched by what they
compute: their source operation (``schema.SOURCE_OP``, the HLO metadata op_name, without its
outermost ``jit(fn)/``) and category; a collective also by its kind and group size (its cost is
set by the group it runs over, `sharding.md`). Several ops with one key are summed per side and
counted. The same compiled program (equal HLO fingerprints) keeps the exact join by name
(``changes.ops``), and so does a run saved before source ops were kept.

The step difference is attributed (``attribute``): the measured step is compute + exposed
communication + idle (the step object, ``harness.step``), so its change is the sum of theirs;
the exposed part is apportioned over the collectives by each one's exposed time per step
(``schema.STEP_COLLECTIVES``, medians over devices, where the step's figure is its slowest
device's), what they do not cover left as "other exposed communication".
Contributions are of the slower layout over the faster, largest first, and add up to the step
difference, negative ones included (a part the slower layout spends less on); the line that
says them is ``harness.regress.headline``. Each run is compared by its step program
(``pairs.step_program``): what set-up programs ran beside it is no part of its step.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import schema
from harness.record import Run
from harness.regress import changes, headline, pairs
from harness.units import fmt_seconds

SOURCE, NAME = "source op", "name"  # how the ops were matched (schema.MATCHED_BY)
NO_SOURCE = "(no source op)"        # the key of ops whose HLO names no operation
ONLY_A, ONLY_B, BOTH = "only in A", "only in B", "both"  # schema.SIDE
KEYS = (schema.PROGRAM, schema.OP, schema.CATEGORY, schema.COLLECTIVE, schema.GROUP_SIZE)
EXTRA = (schema.OPS_MATCHED, schema.COMM_BYTES, schema.COMM_S, schema.EXPOSED_COMM_S,
         schema.MESH_AXES, schema.SOURCE_LINE)
WHERE = (schema.MESH_AXES, schema.SOURCE_LINE)  # an op group's axes (harness.explain) and line
_OUTER_JIT = re.compile(r"^jit\([^/]*\)/(?=.)")


def same_program(a: Run, b: Run) -> bool:
    """Both runs name their programs' HLO fingerprints, and they are the same."""
    fa, fb = (r.meta.get(schema.HLO_FINGERPRINTS) or {} for r in (a, b))
    return bool(fa) and fa == fb


def matched_by(a: Run, b: Run) -> str:
    """``NAME`` for the same program, or a run that keeps no source ops; else ``SOURCE``."""
    if same_program(a, b) or any(schema.SOURCE_OP not in r.ops.columns for r in (a, b)):
        return NAME
    return SOURCE


def source_key(op_name) -> str:
    """The source operation an op is matched by: its op_name without the outermost jit(fn)/,
    so two layouts jitted under different names still match (``NO_SOURCE`` for none)."""
    text = op_name if isinstance(op_name, str) else ""
    return _OUTER_JIT.sub("", text) or NO_SOURCE


def exposed(run: Run) -> pd.DataFrame:
    """Per communication op of the step object: its time per step and its share of the step's
    exposed communication. The step object's exposed time is the slowest device's median step's,
    each op's the median over steps and devices; the step's is apportioned over the ops by
    theirs, so that the ops' shares add up to it."""
    rows = run.step.get(schema.STEP_COLLECTIVES) or []
    df = pd.DataFrame(rows, columns=[schema.OP, schema.COMM_S, schema.EXPOSED_COMM_S])
    total, step = df[schema.EXPOSED_COMM_S].sum(), step_of(run, schema.EXPOSED_COMM_S)
    if total > 0 and math.isfinite(step):
        df[schema.EXPOSED_COMM_S] = df[schema.EXPOSED_COMM_S] * (step / total)
    return df


def explained(run: Run) -> pd.DataFrame:
    """Per collective the run's COLLECTIVES table explains: the mesh axes it ran over (empty
    for a run saved without the table)."""
    table = run.collectives
    if table is None or not len(table) or schema.MESH_AXES not in table.columns:
        return pd.DataFrame(columns=[schema.OP, schema.MESH_AXES])
    return table[[schema.OP, schema.MESH_AXES]].astype(str).drop_duplicates(schema.OP)


def grouped(run: Run) -> pd.DataFrame:
    """The run's ops summed per (source op, category, collective kind, group size): time,
    roofline time, work per step, how many ops, and communication and exposed time (NaN for a
    collective the step object does not list)."""
    o = run.ops.assign(**{c: np.nan for c in (*changes.OP_COLUMNS, schema.SOURCE_LINE)
                          if c not in run.ops})
    o = o.drop(columns=[schema.MESH_AXES], errors="ignore")
    o = o.merge(exposed(run), on=schema.OP, how="left").merge(explained(run), on=schema.OP,
                                                               how="left")
    n = o[schema.COUNT].astype(float) if schema.COUNT in o else 1.0
    o = o.assign(**{schema.PROGRAM: "", schema.OP: o[schema.SOURCE_OP].map(source_key),
                    schema.CATEGORY: o[schema.CATEGORY].fillna(schema.CAT_OTHER).astype(str),
                    schema.COLLECTIVE: o[schema.COLLECTIVE].fillna("").astype(str),
                    schema.GROUP_SIZE: o[schema.GROUP_SIZE].fillna(1).astype(float),
                    schema.OPS_MATCHED: 1},
                 **{c: o[c].astype(float) * n for c in changes.WORK})  # per step
    g = o.groupby(list(KEYS), sort=False)
    out = g[[schema.MEASURED_S, schema.PREDICTED_S, *changes.WORK, schema.OPS_MATCHED]].sum()
    for c in (schema.COMM_S, schema.EXPOSED_COMM_S):
        out[c] = g[c].sum(min_count=1)
    out[schema.PREDICTED_S] = g[schema.PREDICTED_S].sum(min_count=1)
    for c in WHERE:  # the group's axes and line: its ops' own, where they agree
        out[c] = g[c].agg(lambda v: v.dropna().iloc[0] if v.dropna().nunique() == 1 else "")
    out[schema.EFFICIENCY] = out[schema.PREDICTED_S] / out[schema.MEASURED_S].where(
        out[schema.MEASURED_S] > 0)
    bound = g[schema.BOUND].agg(lambda s: s.iloc[0] if s.nunique() == 1 else "")
    return out.assign(**{schema.BOUND: bound}).reset_index()


def ops(a: Run, b: Run) -> pd.DataFrame:
    """``schema.OP_CHANGES`` of the two runs matched by source op (``OP`` holds it, ``PROGRAM``
    is ""), then ``EXTRA`` of each side (_a, _b) and ``schema.SIDE``."""
    out = changes.join(grouped(a), grouped(b), KEYS, EXTRA)
    na, nb = (out[schema.OPS_MATCHED + s].fillna(0).astype(int) for s in ("_a", "_b"))
    out[schema.OPS_MATCHED + "_a"], out[schema.OPS_MATCHED + "_b"] = na, nb
    out[schema.SIDE] = np.where(na == 0, ONLY_B, np.where(nb == 0, ONLY_A, BOTH))
    return out


def collectives(rows: pd.DataFrame, mesh: dict | None) -> pd.DataFrame:
    """The collectives of ``ops`` rows: where they ran, the axes they span, their time and
    exposed time, and their bytes per device and step, in A and B."""
    c = rows[rows[schema.COLLECTIVE].astype(str) != ""]
    return pd.DataFrame({
        schema.SIDE: c[schema.SIDE], schema.SOURCE_OP: c[schema.OP],
        schema.COLLECTIVE: c[schema.COLLECTIVE], schema.GROUP_SIZE: c[schema.GROUP_SIZE],
        schema.AXES: [_axes(r, mesh) for _, r in c.iterrows()],
        schema.SOURCE_LINE: [_line(r) for _, r in c.iterrows()],
        # a collective's time on the timeline (the step object's, what its exposed part is of),
        # else the OPS table's (on a CPU host, its share of the cores)
        schema.BASELINE_S: c[schema.COMM_S + "_a"].fillna(c[schema.BASELINE_S]),
        schema.CANDIDATE_S: c[schema.COMM_S + "_b"].fillna(c[schema.CANDIDATE_S]),
        **{f"{schema.EXPOSED_COMM_S}{s}": c[schema.EXPOSED_COMM_S + s] for s in ("_a", "_b")},
        **{schema.COMM_BYTES + s: c[schema.COMM_BYTES + s] for s in ("_a", "_b")}}
        ).reset_index(drop=True)


def step_of(run: Run, name: str) -> float:
    v = run.step.get(name)
    return float(v) if changes.finite(v) else math.nan


def _either(row: pd.Series, column: str) -> str:
    """A text figure of the op group in B, else in A ("" where neither has it)."""
    for side in ("_b", "_a"):
        v = row.get(column + side)
        if isinstance(v, str) and v and v != "nan":
            return v
    return ""


def _axes(row: pd.Series, mesh: dict | None) -> str:
    """The mesh axes the collective ran over: as explained from its device groups, else the
    axes its group size alone implies."""
    return _explained_axes(row) or changes.axes(row[schema.GROUP_SIZE], mesh)


def _explained_axes(row: pd.Series) -> str:
    """The axes explain found ("X,Y"), written as compare writes axes ("X+Y"); "" for device
    groups that are no whole axes ("{0,1} {2,3}")."""
    axes = _either(row, schema.MESH_AXES)
    return "" if "{" in axes else axes.replace(",", "+")


def _line(row: pd.Series) -> str:
    return _either(row, schema.SOURCE_LINE)


def _what(row: pd.Series, mesh: dict | None) -> str:
    """``all-reduce from bd,df->bf/dot_general (model.py:12) over axis Y (2 devices), only in
    B``."""
    where = {ONLY_A: ", only in A", ONLY_B: ", only in B"}.get(row[schema.SIDE], "")
    line = f" ({_line(row)})" if _line(row) else ""
    axes, size = _explained_axes(row), row[schema.GROUP_SIZE]
    over = (f" over {'axes' if '+' in axes else 'axis'} {axes} ({int(size)} devices)"
            if axes and changes.finite(size) else changes.over(size, mesh))
    return f"{row[schema.COLLECTIVE]} from {row[schema.OP]}{line}{over}{where}"


def attribute(a: Run, b: Run, rows: pd.DataFrame, mesh: dict | None, sign: float
              ) -> list[tuple[str, float]]:
    """(what, seconds) that add up to the slower layout's step over the faster's (``sign``
    +1: B is the slower, -1: A), largest first, negative ones last: each collective's exposed
    time, the rest of the exposed communication, compute (the op group that grew most named)
    and idle."""
    parts = {c: sign * (step_of(b, c) - step_of(a, c))
             for c in (schema.STEP_S, schema.COMPUTE_S, schema.EXPOSED_COMM_S, schema.IDLE_S)}
    if not all(math.isfinite(v) for v in parts.values()):
        return []
    out: list[tuple[str, float]] = []
    coll = rows[rows[schema.COLLECTIVE].astype(str) != ""]
    for _, r in coll.iterrows():
        d = sign * (np.nan_to_num(r[schema.EXPOSED_COMM_S + "_b"])
                    - np.nan_to_num(r[schema.EXPOSED_COMM_S + "_a"]))
        if d:
            out.append((f"exposed {_what(r, mesh)}", float(d)))
    rest = parts[schema.EXPOSED_COMM_S] - sum(d for _, d in out)
    if abs(rest) > headline.ROUNDING:
        out.append(("other exposed communication", rest))
    out += [(f"compute{_most(rows, sign) if parts[schema.COMPUTE_S] > 0 else ''}",
             parts[schema.COMPUTE_S]), ("idle", parts[schema.IDLE_S])]
    return sorted(out, key=lambda x: -x[1])


def _most(rows: pd.DataFrame, sign: float) -> str:
    """`` (most in bd,df->bf/dot_general, matmul: 20 us -> 41 us)``: the op group (not a
    collective) whose time grew most from the faster layout to the slower one."""
    compute = rows[rows[schema.COLLECTIVE].astype(str) == ""]
    grew = sign * compute[schema.DELTA_S]
    if not len(grew) or grew.max() <= 0:
        return ""
    r = compute.loc[grew.idxmax()]
    fast, slow = (r[schema.BASELINE_S], r[schema.CANDIDATE_S])[::int(sign)]
    return (f" (most in {r[schema.OP]}, {r[schema.CATEGORY]}: "
            f"{fmt_seconds(fast) if changes.finite(fast) else 'none'} -> {fmt_seconds(slow)})")


@dataclass
class Layouts:
    """Two layouts compared: how their ops were matched, the op groups and collectives side by
    side, and the step difference attributed (``headline``)."""

    matched_by: str
    ops: pd.DataFrame          # ``ops``
    collectives: pd.DataFrame  # ``collectives``
    attribution: list          # ``attribute``: (what, seconds), largest first
    headline: str              # ``harness.regress.headline.line``, as the verdict qualifies it
    steps: tuple[float, float] = (math.nan, math.nan)  # each layout's measured step (A, B)
    sign: float = 1.0          # +1: B the slower, -1: A

    def line(self, within: str = "") -> str:
        """The headline, ``within`` saying why the slower layout is only measured so ("within
        the noise of one run a side": the verdict could not tell; "": it could)."""
        return headline.line(*self.steps, self.attribution, self.sign, within)

    def unmatched(self, side: str) -> pd.DataFrame:
        """The op groups that ran only in one layout (``ONLY_A`` or ``ONLY_B``)."""
        return self.ops[self.ops[schema.SIDE] == side]

    def to_dict(self) -> dict:
        def rows(df):
            return [{k: v if changes.finite(v) or not isinstance(v, float) else None
                     for k, v in r.items()} for r in df.to_dict("records")]

        return {schema.MATCHED_BY: self.matched_by, "headline": self.headline,
                "attribution": [{"what": w, schema.CONTRIBUTION_S: s}
                                for w, s in self.attribution],
                "collectives": rows(self.collectives),
                "unmatched": {k: rows(self.unmatched(v)[[schema.OP, schema.CATEGORY,
                                                           schema.COLLECTIVE]])
                              for k, v in (("A", ONLY_A), ("B", ONLY_B))}}


def two_layouts(a: Run, b: Run) -> Layouts | None:
    """The two layouts side by side, each of its step program; None for the same program
    (joined by name instead). Not a verdict: ``harness.compare`` (``judge.compare``) is."""
    a, b = pairs.step_program(a), pairs.step_program(b)
    how = matched_by(a, b)
    if how == NAME:
        return None
    mesh = next((r.meta[schema.MESH] for r in (b, a) if isinstance(r.meta.get(schema.MESH),
                                                                      dict)), None)
    rows = ops(a, b)
    sign = 1.0 if step_of(b, schema.STEP_S) >= step_of(a, schema.STEP_S) else -1.0
    said = attribute(a, b, rows, mesh, sign)
    steps = step_of(a, schema.STEP_S), step_of(b, schema.STEP_S)
    return Layouts(how, rows, collectives(rows, mesh), said,
                   headline.line(*steps, said, sign), steps, sign)

