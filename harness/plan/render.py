"""What ``predict-hlo`` and ``harness plan`` print: text or Markdown (``*_text``) and the JSON
object (``*_json``) of a ``WorkloadPrediction`` and of a ``LayoutPlan``."""
from __future__ import annotations

import json

from harness import schema
from harness.plan.compiles import CPU, compile_line
from harness.plan.fit import fit_line
from harness.plan.predict import STEP
from harness.plan.request import LayoutPlan
from harness.plan.workload import CPU_NOT_A_BOUND, WorkloadPrediction
from harness.report import tables
from harness.step.simulate import critical_ops
from harness.units import fmt_seconds
from predictions.step import OVERLAP

OP_COLUMNS = (schema.OP, schema.OPCODE, schema.CATEGORY, schema.BOUND, schema.COUNT,
              schema.PREDICTED_S, schema.T_COMPUTE_S, schema.T_MEMORY_S, schema.T_COMM_S,
              schema.COLLECTIVE, schema.GROUP_SIZE)


def _records(df) -> list[dict]:
    return json.loads(df.to_json(orient="records"))


def prediction_json(p: WorkloadPrediction, top: int) -> dict:
    """``predict-hlo --format json``: every compile and every chip's figures (``top`` ops)."""
    ok = p.compiled
    return {
        "header": p.header, "notes": p.notes,
        "cross_check": next(iter(ok.values()))[2] if ok else None,
        "fit_settings": None if p.fit_table is None else _records(p.fit_table),
        "refused": {name: js for name, (_, js) in p.refusals.items()},
        "compiles": {k: {"compiler": a.compiler, "topology": a.topology,
                         "devices": a.devices, "lower_s": a.lower_s,
                         "compile_s": a.compile_s, "cached": a.cached, "memory": a.memory,
                         "cross_check": c}
                     for k, (a, _, c) in ok.items()},
        "chips": [{"chip": r.chip, "compile": r.compile, "totals": r.totals,
                   "memory_fit": r.fit,
                   "priced_program": CPU_NOT_A_BOUND if r.chip in p.refusals else r.compile,
                   "critical_path": _records(critical_ops(r.prediction.step, top)),
                   "links": r.prediction.step.lanes,
                   "categories": _records(r.prediction.categories),
                   "book_gap": None if r.gap is None else _records(r.gap),
                   "top_ops": _records(r.prediction.ops.head(top))}
                  for r in p.chips]}


def prediction_text(p: WorkloadPrediction, fmt: str, top: int) -> str:
    """``predict-hlo``'s report (``fmt``: ``text`` or ``md`` tables): refusals and notes
    first, then per chip its compile, memory, step, totals, categories, the gap to the book
    and the ``top`` ops."""
    out = [p.header]
    out += ["\n".join(lines) for lines, _ in p.refusals.values()]
    out += p.notes
    out = [f"{line}\n" for line in out]
    for r in p.chips:
        aot, _, check = p.compiles[r.compile]
        if r.chip in p.refusals:
            out.append(f"\n{r.chip}: {CPU_NOT_A_BOUND}\n")
        out.append(f"\n{r.chip}: {compile_line(aot, check, p.mesh_shape)}\n")
        if r.fit is not None and "refused" not in r.fit:
            out.append(fit_line(r.fit, r.chip) + "\n")
        out += [f"{line}\n" for line in step_lines(r.prediction.step, r.totals)]
        out.append("  ".join(f"{k}={tables.fmt_figure(k, v)}" for k, v in r.totals.items())
                   + "\n")
        out.append(tables.render(r.prediction.categories, fmt))
        if r.gap is not None:
            out.append(f"the simulated step vs the book, part by part "
                       f"({', '.join(r.gap.columns[3::3])}: HLO seconds, the overlap row what "
                       f"the schedule hides; work_x: HLO FLOPs or bytes / the book's; excess: "
                       f"seconds beyond that work at the book's rate)\n")
            out.append(tables.render(r.gap, fmt))
            out.append(gap_line(r.gap, "tpu" if r.compile != CPU else CPU) + "\n")
        out.append(tables.render(r.prediction.ops.head(top), fmt, OP_COLUMNS))
    if p.fit_table is not None:
        out.append(f"\n{FIT_TITLE}\n")
        out.append(tables.render(p.fit_table, fmt))
    return "".join(out)


FIT_TITLE = ("the settings the fit search weighed (no remat given), those the memory model keeps "
             "first, ranked by predicted step time (max of the FLOPs at the chip's peak, the "
             "offloads over PCIe and the weights' and gradients' collectives over ICI; a smaller "
             "batch's for the steps that carry the batch asked for); hbm, host: the model's "
             "bytes a device (in GiB; the note's HBM budget is in GB); ici: the bytes those "
             "collectives move a device a step (an all-reduce twice its array); added_flops: "
             "FLOPs a device beyond the setting doing the fewest; libtpu: its verdict on those "
             "compiled (modelled only: never compiled); simulated: a placed one's compiled "
             "schedule played at the roofline, which picks among those placed")


def step_lines(sim, totals: dict) -> list[str]:
    """The simulated step in words: its split, its critical path, the sum of ops and the
    book's step beside it, and what the overlap hides."""
    f = fmt_seconds
    order = "XLA's schedule" if sim.scheduled else "a topological order (unscheduled HLO)"
    lines = [f"step {f(sim.step_s)} ({order} played at the roofline) = compute "
             f"{f(sim.compute_s)} + exposed communication {f(sim.exposed_comm_s)}; critical "
             f"path: compute {f(sim.critical_compute_s)}, communication "
             f"{f(sim.critical_comm_s)}; sum of ops {f(totals[schema.PREDICTED_OPS_S])}"
             + (f"; the book {f(totals[schema.ANALYTIC_S])}" if schema.ANALYTIC_S in totals
                else "")]
    if sim.comm_s > 0:
        lines.append(f"overlap hides {f(sim.overlapped_comm_s)} of the {f(sim.comm_s)} of "
                     f"communication (collectives and async copies); of the "
                     f"{f(sim.exposed_comm_s)} exposed, the core runs synchronous collectives "
                     f"for {f(sim.sync_comm_s)} and waits on async transfers for the rest")
    if sim.missing:
        lines.append(f"{len(sim.missing)} executed op(s) have no roofline time and take 0 s in "
                     f"the simulation (unmodeled), e.g. {', '.join(sim.missing[:3])}")
    return lines


def gap_line(gap, compile_: str) -> str:
    """One line: the simulated step minus the book's, part by part (each part's seconds minus
    the book's, which add up to it), with the work ratio and the excess behind each."""
    f = fmt_seconds

    def signed(v: float) -> str:
        return f"{'+' if v >= 0 else '-'}{f(abs(v))}"

    rows = gap.set_index(schema.PART)
    hlo, ratio, excess = (rows[c.format(compile=compile_)]
                          for c in (schema.HLO_S, schema.WORK_X, schema.EXCESS_S))
    diff = hlo - rows[schema.BOOK_S]
    said = []
    for part in diff.index.drop(STEP):
        if abs(diff[part]) <= 1e-3 * abs(diff[STEP]):
            continue
        why = ""
        if part == OVERLAP:
            why = (f" (the book hides {f(-rows.loc[OVERLAP, schema.BOOK_S])} of communication, "
                   f"the schedule {f(-hlo[OVERLAP])})")
        elif ratio[part] == ratio[part]:  # NaN where the book gives no work
            more = (ratio[part] - 1) * rows.loc[part, schema.BOOK_S]
            why = (f" (work {ratio[part]:.3g}x the book's: {signed(more)}; "
                   f"{signed(excess[part])} beyond the book's rate)")
        said.append(f"{part} {signed(diff[part])}{why}")
    return (f"the simulated step is {f(abs(diff[STEP]))} "
            f"{'above' if diff[STEP] >= 0 else 'below'} the book's "
            f"{f(rows.loc[STEP, schema.BOOK_S])}: {', '.join(said) or 'no part differs'}")


def plan_json(p: LayoutPlan) -> dict:
    """``harness plan --format json``: the header, both orders and every layout's row."""
    r = p.plan
    return {"header": p.header, "notes": p.notes, "tokens": p.tokens, "alpha": p.alpha,
            "book_order": r.book_order, "predicted_order": r.predicted_order,
            "orders_agree": p.agree, "layouts": _records(r.table)}


def plan_text(p: LayoutPlan, fmt: str) -> str:
    """``harness plan``'s report: the header, notes, the ranked table (``fmt``: ``text`` or
    ``md``) and the book's order beside the prediction's."""
    from harness.plan.pipeline import BUBBLE

    r = p.plan
    book = " < ".join(" = ".join(group) for group in r.book_order)
    # the levels column says something only on several nodes or slices
    columns = [c for c in r.table.columns if c != schema.LEVELS or r.table[c].notna().any()]
    table = r.table.copy()
    if BUBBLE in table:  # a share of the stage-time: shown as a percentage
        table[BUBBLE] = table[BUBBLE].map(lambda v: "" if v != v else f"{v:.1%}")
    return "".join(f"{line}\n" for line in [p.header, *p.notes]) \
        + tables.render(table, fmt, columns) \
        + (f"the book's order: {book or '-'}; the prediction's: "
           f"{' < '.join(r.predicted_order) or '-'} ("
           f"{'nothing compiled' if not r.predicted_order else 'agree' if p.agree else 'differ'}"
           f")\n")
