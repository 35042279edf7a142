"""What changed between two runs, for ``harness compare``: the program (its fingerprint, its work
per device, its collectives), the step figures, each op, and what ran where; an op's change put
in the book's roofline terms (`roofline.md`: efficiency is the roofline time T_lower over the
measured time; ``bound`` names the dominating term; a collective is named by its group, the
mesh axis it runs over, `sharding.md`).
"""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd

from harness import schema
from harness.record import Run
from harness.units import fmt_seconds

SAME_WORK = 0.01  # work per device that moves less than this is the same work
WORK = {schema.FLOPS: "FLOPs", schema.HBM_BYTES: "HBM bytes",
        schema.COMM_BYTES: "communication bytes"}
# The step figures whose change compare shows: the summary's wall step, the step object's.
STEP_FIGURES = (schema.WALL_STEP_S, schema.STEP_S, schema.COMPUTE_S, schema.EXPOSED_COMM_S,
                schema.IDLE_S, schema.PREDICTED_STEP_S, schema.REPLAY_STEP_S,
                # why the devices wait (harness.step.waits): the period and each cause's change
                schema.PERIOD_S, schema.WAITING_S, *schema.WAIT_CAUSES)
# What ran on which host: a difference is listed beside the verdict.
MET = (schema.GIT_SHA, schema.GIT_DIRTY, *schema.VERSIONS, schema.XLA_FLAGS, schema.DEVICE_KIND,
       schema.DEVICE_COUNT, schema.MESH, schema.CONFIG, schema.CHIP, schema.OP_TIMING, "host")
BOUND_TERMS = {"compute": "compute-bound", "memory": "memory-bound",
               "comm": "communication-bound", schema.OVERHEAD: "bound by the per-op overhead",
               schema.UNMODELED: "no roofline model"}


def finite(x) -> bool:
    """A real number, neither NaN nor infinite (bools are not numbers here)."""
    return (isinstance(x, (int, float, np.number)) and not isinstance(x, bool)
            and math.isfinite(x))


def work(run: Run) -> dict:
    """Per device and step: the HLO's FLOPs, and the measured ops' HBM and communication bytes
    (``WORK``); the executions of each kind of collective (``collectives``)."""
    ops = run.ops
    n = ops[schema.COUNT] if schema.COUNT in ops.columns else pd.Series(1, ops.index)
    out = {c: float((ops[c] * n).sum()) if c in ops.columns else math.nan for c in WORK}
    out[schema.FLOPS] = float(run.summary.get(schema.HLO_FLOPS_PER_DEVICE) or out[schema.FLOPS])
    coll = ops[schema.COLLECTIVE].fillna("").astype(str) if schema.COLLECTIVE in ops else None
    out["collectives"] = {} if coll is None else {
        str(k): int(v) for k, v in n[coll != ""].groupby(coll[coll != ""]).sum().items()}
    return out


def program(a: Run, b: Run) -> dict:
    """Did the program change (its fingerprint, work or collectives), does it do more work (a
    work figure up, or a new kind of collective), each figure's ratio (``flops_x``...), and
    ``what``: one line saying it."""
    fa, fb = (r.meta.get(schema.HLO_FINGERPRINTS) or {} for r in (a, b))
    refit = bool(fa) and bool(fb) and any(fa.get(p) != fb.get(p) for p in {*fa, *fb})
    wa, wb = work(a), work(b)
    ratio = {c: wb[c] / wa[c] for c in WORK if wa[c] > 0 and wb[c] >= 0}
    moved = {c: x for c, x in ratio.items() if abs(x - 1) > SAME_WORK}
    ca, cb = wa["collectives"], wb["collectives"]
    what = [", ".join(f"{x:.2g}x the {WORK[c]}" if x > 0 else f"no {WORK[c]}"
                      for c, x in moved.items()) + " per device"] if moved else []
    if ca != cb:
        what.append("collectives " + ", ".join(f"{k} {ca.get(k, 0)} -> {cb.get(k, 0)}"
                                               for k in sorted({*ca, *cb})
                                               if ca.get(k, 0) != cb.get(k, 0)))
    if set(cb) - set(ca):  # a new kind of collective is the more work: said first
        what.reverse()
    if refit and not what:
        what = ["a different compiled program (fingerprint), the same work per device"]
    return {"changed": bool(what), "more_work": any(x > 1 for x in moved.values())
            or bool(set(cb) - set(ca)), "fingerprints": [fa, fb],
            "same_program": bool(fa) and fa == fb,
            **{f"{c}_x": x for c, x in ratio.items()}, "collectives": [ca, cb],
            "what": "; ".join(what)}


def said(prog: dict) -> str:
    """What a verdict's line opens with when the program (``program``) changed: "" when not."""
    if not prog["changed"]:
        return ""
    if prog["same_program"]:
        return f"the same program did other work ({prog['what']}); "
    return f"the program changed ({prog['what']}); "


def figures(a: Run, b: Run) -> pd.DataFrame:
    """Each step figure either run has (``STEP_FIGURES``) and its change."""
    rows = []
    for name in STEP_FIGURES:
        va, vb = (r.step.get(name, r.summary.get(name)) for r in (a, b))
        if va is not None or vb is not None:
            va, vb = (math.nan if v is None else float(v) for v in (va, vb))
            rows.append((name, va, vb, vb - va, vb / va - 1 if va > 0 else math.nan))
    return pd.DataFrame(rows, columns=list(schema.STEP_CHANGES))


def ops(a: Run, b: Run) -> pd.DataFrame:
    """Per op of either run, joined by name (program, op): exact for the same compiled program;
    its measured and roofline (predicted) time and efficiency in each, most time lost first
    (``schema.OP_CHANGES``). Two different programs are joined by source op instead
    (``harness.regress.side_by_side``)."""
    def side(run):
        o = run.ops.astype({c: str for c in OP_KEYS})
        return o.assign(**{c: np.nan for c in OP_COLUMNS if c not in o}).drop_duplicates(OP_KEYS)

    return join(side(a), side(b))


OP_KEYS = [schema.PROGRAM, schema.OP]
OP_COLUMNS = [schema.MEASURED_S, schema.PREDICTED_S, schema.EFFICIENCY, *WORK, schema.CATEGORY,
              schema.BOUND, schema.COLLECTIVE, schema.GROUP_SIZE]


def join(oa: pd.DataFrame, ob: pd.DataFrame, keys: tuple[str, ...] = tuple(OP_KEYS),
         extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Two sides' op rows (one per ``keys``, with ``OP_COLUMNS`` and ``extra``) joined into
    ``schema.OP_CHANGES`` (then each ``extra`` of each side, suffixed _a and _b), most time lost
    first."""
    keys = list(keys)
    cols = list(dict.fromkeys([c for c in OP_COLUMNS if c not in keys] + list(extra)))
    m = oa[keys + cols].merge(ob[keys + cols], on=keys, how="outer", suffixes=("_a", "_b"))
    out = m[keys].assign(**{c: m[c + "_b"].fillna(m[c + "_a"]) for c in OP_COLUMNS[6:]
                            if c not in keys})
    moved = pd.DataFrame({c: m[c + "_b"] / m[c + "_a"].where(m[c + "_a"] > 0) - 1 for c in WORK})
    out[schema.WORK_CHANGE] = [r[r.abs().idxmax()] if r.notna().any() else np.nan
                               for _, r in moved.iterrows()]
    for name, col in ((schema.BASELINE_S, schema.MEASURED_S + "_a"),
                      (schema.CANDIDATE_S, schema.MEASURED_S + "_b"),
                      (schema.BASELINE_PREDICTED_S, schema.PREDICTED_S + "_a"),
                      (schema.CANDIDATE_PREDICTED_S, schema.PREDICTED_S + "_b"),
                      (schema.BASELINE_EFFICIENCY, schema.EFFICIENCY + "_a"),
                      (schema.CANDIDATE_EFFICIENCY, schema.EFFICIENCY + "_b")):
        out[name] = m[col].astype(float)
    out[schema.DELTA_S] = out[schema.CANDIDATE_S].fillna(0) - out[schema.BASELINE_S].fillna(0)
    out[schema.CHANGE] = out[schema.CANDIDATE_S] / out[schema.BASELINE_S] - 1
    out[schema.PREDICTED_CHANGE] = (out[schema.CANDIDATE_PREDICTED_S]
                                    / out[schema.BASELINE_PREDICTED_S] - 1)
    for c in extra:
        out[c + "_a"], out[c + "_b"] = m[c + "_a"], m[c + "_b"]
    out = out.sort_values(schema.DELTA_S, ascending=False, kind="stable")
    return out[[*schema.OP_CHANGES, *(c + s for c in extra for s in ("_a", "_b"))]
               ].reset_index(drop=True)


def where(figs: pd.DataFrame, op_rows: pd.DataFrame, mesh: dict | None) -> str:
    """Where the time went: the step object's parts that grew, and the op that lost most."""
    d = figs.set_index(schema.FIGURE)[schema.DELTA_S]
    parts = [f"{name} +{fmt_seconds(d[c])}" for c, name in (
        (schema.COMPUTE_S, "compute"), (schema.EXPOSED_COMM_S, "exposed communication"),
        (schema.IDLE_S, "idle")) if c in d and d[c] > 0]
    lost = op_rows[op_rows[schema.DELTA_S] > 0].head(1)
    return "; ".join(parts + ["most in " + describe_op(r, mesh) for _, r in lost.iterrows()])


def axes(size, mesh: dict | None) -> str:
    """The mesh axes a replica group of ``size`` devices spans ("Y", "X+Y"), where only one set
    of axes has that many devices; "" where none or several do (sharding.md names a collective
    by the axes it runs over)."""
    if not finite(size) or size <= 1 or not mesh:
        return ""
    names = list(mesh)
    found = [c for r in range(1, len(names) + 1) for c in itertools.combinations(names, r)
             if math.prod(int(mesh[x]) for x in c) == size]
    return "+".join(found[0]) if len(found) == 1 else ""


def over(size, mesh: dict | None) -> str:
    """" over axis Y (2 devices)", " over 8 devices", or "" for no group."""
    named = axes(size, mesh)
    if named:
        return f" over {'axes' if '+' in named else 'axis'} {named} ({int(size)} devices)"
    return f" over {int(size)} devices" if finite(size) and size > 1 else ""


def describe_op(row: pd.Series, mesh: dict | None = None) -> str:
    """One line for an op's change: its time, and its share of its roofline before and after;
    when its roofline time moved too, that it does more (or less) work."""
    what, kind, size = row[schema.CATEGORY], row[schema.COLLECTIVE], row[schema.GROUP_SIZE]
    what = what if isinstance(what, str) and what else schema.CAT_OTHER
    if isinstance(kind, str) and kind:  # sharding.md: a collective's cost is set by its group
        what = kind + over(size, mesh)
    bound = BOUND_TERMS.get(str(row[schema.BOUND]), "")
    head = f"{row[schema.OP]} ({what}{', ' + bound if bound else ''})"
    b, c = row[schema.BASELINE_S], row[schema.CANDIDATE_S]
    if not (finite(b) and finite(c)):
        return f"{head}, {'new' if finite(c) else 'gone'}"
    stats = f"{fmt_seconds(b)} -> {fmt_seconds(c)}, {c / b - 1:+.0%}"
    be, ce, w = (row[k] for k in (schema.BASELINE_EFFICIENCY, schema.CANDIDATE_EFFICIENCY,
                                  schema.WORK_CHANGE))
    if finite(w) and abs(w) > SAME_WORK:
        return f"{head} {stats}: it does {'more' if w > 0 else 'less'} work ({w + 1:.2g}x)"
    if not (finite(be) and finite(ce)):
        return f"{head} {stats}"
    return (f"{head} {'fell' if ce < be else 'rose'} from {be:.0%} to {ce:.0%} of its roofline "
            f"({stats})")


def met(a: Run, b: Run) -> list[str]:
    """One line per fact of what ran on which host (``MET``) that differs between the runs."""
    def short(v) -> str:
        text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        return text if len(text) <= 60 else text[:57] + "..."

    return [f"{k}: {short(a.meta[k])} -> {short(b.meta[k])}" for k in MET
            if a.meta.get(k) is not None and b.meta.get(k) is not None
            and a.meta[k] != b.meta[k]]
