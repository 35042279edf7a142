"""Rank layouts before running: compile each ahead of time, play its schedule at the roofline,
set it beside the book's verdict.

Each candidate (``harness.plan.layouts``) is compiled the way ``predict-hlo`` compiles
(``workloads.aot.start_compile``, cached; for a TPU chip with libtpu, the TPU compiler for its
slice, else XLA:CPU on virtual devices), priced by ``harness.plan.predict.predict_module`` (the
overlap-aware simulated step) and its ``memory_analysis()`` set against the chip's HBM
(``harness.capture.memory.memory_fit``).
Beside it stand training.md's compute-bound condition for the
layout (``predictions.training.verdict``) and the book's step for it
(``predictions.training.step_time`` with the layout's X, Y, M_X, M_Y). Compiles run one after
another: the host is shared, and libtpu uses every core it finds.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness import schema
from harness.capture.memory import memory_fit
from harness.errors import HarnessError
from harness.hlo import parse_module
from harness.plan.fit import RefusalUnreadable, parse_refusal
from harness.plan.layouts import PLANNABLE, Candidate, n_ckpt
from harness.plan.pipeline import BOOK_BYTES
from harness.plan.predict import predict_module
from harness.units import fmt_bytes, fmt_decimal_bytes
from predictions import layouts, training
from predictions.hardware import Chip
from predictions.network import System
from predictions.step import book_dtype

log = logging.getLogger(__name__)

YES, NO = "yes", "no"
BOOK_YES, BOOK_NO = "yes (book)", "no (book)"  # not compiled: the book's memory says
# what went wrong, in rank order after the layouts that fit (harness plan ranks them last)
DOES_NOT_FIT, NOT_BUILT = "does not fit", "cannot be built"
_ORDER = {YES: 0, BOOK_YES: 0, NO: 1, BOOK_NO: 1, NOT_BUILT: 2}
TIE = 1e-6  # book steps this close (relative) are one place in the book's order


@dataclass(frozen=True)
class Setting:
    """What is planned: a workload config (preset and overrides, B and T among them), the chip,
    the slice's physical topology and where to compile (``tpu_chip`` None: XLA:CPU)."""

    workload: str
    preset: str
    overrides: dict
    chip: Chip
    topology: tuple[int, ...]
    tpu_chip: str | None = None
    cache_dir: Path | None = None
    system: System | None = None  # several nodes or slices: the network (docs/networks.md)


@dataclass
class Plan:
    """The ranked table (``schema.PLAN``), fastest predicted first, and the book's order."""

    table: pd.DataFrame
    tokens: int
    book_order: list[list[str]] = field(default_factory=list)  # ties grouped
    predicted_order: list[str] = field(default_factory=list)


def check_workload(name: str) -> None:
    from harness.plan.serve_plan import PLANNED  # planned as serving (harness plan's PLANS)

    if name not in PLANNABLE:
        raise HarnessError(f"workload {name!r} has no layouts to plan; valid: "
                           f"{', '.join([*PLANNABLE, *PLANNED])}")


def _book(setting: Setting, cand: Candidate, cfg, tokens: int) -> dict:
    """The book's verdict and step for one layout (training.md §6.2), and its memory per chip
    (``BOOK_BYTES``); a pipeline's from ``harness.plan.pipeline.book_row``."""
    from harness.plan import pipeline
    from harness.plan.pipeline_book import flat_network_s

    if cand.roles:  # an expert layout (a MoE config): harness.plan.experts
        from harness.plan.experts import book_row
        return {**book_row(cand, cfg, setting.chip, setting.topology, setting.system),
                schema.LEVELS: pipeline_levels(setting.system, cand)}
    model = PLANNABLE[setting.workload](cfg)
    strategy, dtype = layouts.layout(cand.layout).strategy, book_dtype(cfg.param_dtype)
    levels = pipeline_levels(setting.system, cand)
    if cand.S > 1:
        return {**pipeline.book_row(cand, model, tokens, cfg.T, setting.chip, setting.system,
                                    n_ckpt(cfg), dtype), schema.LEVELS: levels}
    axes = (cand.M_X, cand.M_Y)
    v = training.verdict(strategy, tokens, setting.chip, cand.X, cand.Y, axes, model.F, dtype,
                         system=setting.system)  # past one node: gpus.md at the level crossed
    st = training.step_time(model, tokens, setting.chip, cand.X * cand.Y, strategy, cand.X,
                            cand.Y, axes, dtype=dtype, seq_len=cfg.T)
    analytic = st.t_step_s
    if setting.system is not None:  # the outer axis at the network level its groups cross
        analytic = flat_network_s(strategy, model, tokens, setting.chip, cand.X, cand.Y,
                                  cand.M_Y, cfg.T, setting.system)
    shards = {"dp": 1, "tp": cand.Y, "dp_tp": cand.Y}.get(cand.layout, cand.X * cand.Y)
    mem = training.memory_per_chip(model, tokens, cand.X * cand.Y, shards, n_ckpt=n_ckpt(cfg))
    return {schema.BOOK_CONDITION: v.condition, schema.BOOK_BOUND: v.bound,
            schema.ANALYTIC_S: analytic, schema.LEVELS: levels,
            BOOK_BYTES: mem.total_bytes}


def pipeline_levels(system: System | None, cand: Candidate) -> str | None:
    """``axis_levels`` of a candidate, a pipeline's over its three axes (stage, data, model,
    row-major), an expert layout's over its roles."""
    if cand.roles:
        return axis_levels(system, cand, cand.roles)
    if cand.S <= 1:
        return axis_levels(system, cand)
    return axis_levels(system, cand, (("stage", cand.S), ("X", cand.X), ("Y", cand.Y)))


def axis_levels(system: System | None, cand: Candidate, axes=None) -> str | None:
    """The network level that binds a collective over each mesh axis of the layout, the mesh
    row-major (its model axis Y inside a node or slice): "X: crosses 32 nodes: leaf, ...;
    Y: within one node: 8 GPUs over NVLink, ..." (None without a network). ``axes``: (name,
    size) of each mesh axis (default X and Y)."""
    from harness.explain.levels import binding_text
    from predictions import levels

    if system is None:
        return None
    axes = axes or (("X", cand.X), ("Y", cand.Y))
    dims = tuple(n for _, n in axes)
    said = []
    for k, (name, n) in enumerate(axes):
        if n > 1:  # 1 GB a device: bandwidth, not the hops' latency, sets which level binds
            t = levels.price("all-gather", 1e9, levels.mesh_groups(dims, (k,)), system)
            said.append(f"{name}: {binding_text(t, system)}")
    return "; ".join(said) or "one device"


def _check_builds(wl, cfg, mesh: str) -> None:
    """The workload's own checks (every split dim divisible) on a device-free mesh, before
    any compile: WorkloadError naming what does not divide."""
    from workloads.mesh import abstract_mesh

    wl.build(cfg, abstract_mesh(mesh, wl.mesh_axes), abstract=True)


def evaluate(setting: Setting, cand: Candidate, progress: Callable[[str], None]) -> dict:
    """One row of the plan: the compiled layout's predicted step, MFU, exposed communication
    and peak memory, and the book's verdict beside it."""
    import workloads
    from harness.plan.pipeline import pipeline_sets
    from workloads.aot import HbmExhausted, start_compile
    from workloads.base import WorkloadError

    row = {schema.LAYOUT: cand.layout, schema.MESH: cand.mesh,
           schema.SPANS: f"{cand.M_X}x{cand.M_Y}", schema.PLAN_NOTE: cand.note}
    base = workloads.make_config(setting.workload, setting.preset, setting.overrides)
    overrides = {**setting.overrides, "parallelism": cand.layout, **pipeline_sets(cand, base)}
    if cand.roles:  # an expert layout: its capacity factor (harness.plan.experts)
        from harness.plan.experts import expert_sets
        overrides.update(expert_sets(cand))
    wl = workloads.get(setting.workload)
    cfg = workloads.make_config(setting.workload, setting.preset, overrides)
    tokens = cfg.B * cfg.T
    row.update(_book(setting, cand, cfg, tokens))
    book_bytes = row[BOOK_BYTES]
    if "stage" in dict(cand.roles):  # a pipelined MoE step is not built: the book's only
        return _book_only(row, book_bytes, setting.chip)
    try:
        _check_builds(wl, cfg, cand.mesh)
    except WorkloadError as e:
        progress(f"{cand.layout} on {cand.mesh}: {NOT_BUILT}: {e}")
        return {**row, schema.FITS: NOT_BUILT, schema.PLAN_NOTE: f"{NOT_BUILT}: {e}"}
    if not cand.compile:
        return _book_only(row, book_bytes, setting.chip)
    progress(f"{cand.layout} on {cand.mesh}: compiling ...")
    t0 = time.perf_counter()
    try:
        aot = start_compile(setting.workload, setting.preset, overrides, cand.mesh,
                            tpu_chip=setting.tpu_chip, cache_dir=setting.cache_dir).result()
    except HbmExhausted as e:
        progress(f"{cand.layout} on {cand.mesh}: {DOES_NOT_FIT} ({time.perf_counter() - t0:.0f} s)")
        why = str(e).split(": ", 1)[-1]  # the compiler's words, without its name and slice
        try:  # what libtpu asked for, shown as the layout's memory (not a fit)
            asked = parse_refusal(why)
        except RefusalUnreadable:
            return {**row, schema.FITS: NO, schema.PLAN_NOTE: f"{DOES_NOT_FIT}: {why}"}
        return {**row, schema.FITS: NO, schema.REQUIRED_BYTES: asked.required_bytes,
                schema.PLAN_NOTE: f"{DOES_NOT_FIT}: {asked.what} need "
                                  f"{fmt_bytes(asked.required_bytes)}, "
                                  f"{fmt_bytes(asked.available_bytes)} of HBM available (libtpu)"}
    except WorkloadError as e:  # the compiler failed: the layout has no prediction, say why
        progress(f"{cand.layout} on {cand.mesh}: failed ({e})")
        return {**row, schema.FITS: NOT_BUILT, schema.PLAN_NOTE: f"{NOT_BUILT}: {e}"}
    progress(f"{cand.layout} on {cand.mesh}: "
             + (f"cached (compiled in {aot.compile_s:.0f} s)" if aot.cached
                else f"done in {time.perf_counter() - t0:.0f} s"))
    mesh = SimpleNamespace(shape=cand.shape or dict(zip(wl.mesh_axes, (cand.X, cand.Y))))
    model_flops = wl.book(cfg, mesh, setting.chip).model_flops if wl.book else None
    pred = predict_module(parse_module(aot.hlo_text), setting.chip, devices=aot.devices,
                          model_flops=model_flops, system=setting.system)
    sim = pred.step
    # training.md's bound: T_comms against T_math; here the program's communication at the
    # roofline against the core's compute in the simulated step
    bound = "comm" if sim.comm_s > sim.compute_s else "compute"
    row.update({schema.PREDICTED_STEP_S: sim.step_s,
                schema.MFU_AT_ROOFLINE: pred.totals.get(schema.MFU_AT_ROOFLINE),
                schema.PREDICTED_EXPOSED_COMM_S: sim.exposed_comm_s,
                schema.PREDICTED_BOUND: bound,
                schema.AGREE: YES if bound == row[schema.BOOK_BOUND] else NO})
    if aot.memory:
        fit = memory_fit(aot.memory, setting.chip, placed=aot.topology is not None)
        row.update({schema.PEAK_BYTES: fit["peak_bytes"], schema.FITS: YES if fit["fits"] else NO})
        if not fit["fits"]:
            row[schema.PLAN_NOTE] = (f"{DOES_NOT_FIT}: peak over {setting.chip.name}'s HBM by "
                                     f"{fmt_decimal_bytes(-fit['headroom_bytes'])}")
    return row


def _book_only(row: dict, book_bytes: float, chip: Chip) -> dict:
    """A row priced by the book alone (not compiled): its fit by the book's memory."""
    fits = book_bytes <= chip.hbm_bytes
    said = "not compiled"
    return {**row, schema.FITS: BOOK_YES if fits else BOOK_NO,
            schema.PLAN_NOTE: "; ".join(t for t in (row.get(schema.PLAN_NOTE), said) if t)}


def ranked(rows: Sequence[dict]) -> pd.DataFrame:
    """Layouts that fit by predicted step (those priced by the book alone after them, by the
    book's step), then those that do not fit, then those that cannot be built (the columns
    of ``schema.PLAN``, and a pipeline's where one is ranked)."""
    from harness.plan import experts
    from harness.plan.pipeline import COLUMNS

    df = pd.DataFrame(list(rows))
    extra = [c for c in (*COLUMNS, *experts.COLUMNS) if c in df.columns]
    book = [BOOK_BYTES] if BOOK_BYTES in df.columns else []
    df = df.reindex(columns=[*schema.PLAN[:3], *extra, *schema.PLAN[3:8], *book,
                             *schema.PLAN[8:]])
    for c in [c for c in extra if c in (*COLUMNS[:2], experts.Z_COL)]:  # whole numbers
        df[c] = df[c].astype("Int64")
    order = df[schema.FITS].map(_ORDER).fillna(0)
    book = pd.Series(float("inf"), index=df.index) if schema.ANALYTIC_S not in df else \
        df[schema.ANALYTIC_S].fillna(float("inf"))
    key = pd.DataFrame({"o": order, "c": df[schema.PREDICTED_STEP_S].isna(),
                        "s": df[schema.PREDICTED_STEP_S].fillna(book)})
    return df.loc[key.sort_values(["o", "c", "s"], kind="stable").index].reset_index(drop=True)


def plan(setting: Setting, candidates: Sequence[Candidate],
         progress: Callable[[str], None] = lambda line: None) -> Plan:
    """Compile, price and rank ``candidates`` (one compile at a time, each line of progress
    handed to ``progress``)."""
    check_workload(setting.workload)
    rows = []
    for i, cand in enumerate(candidates, 1):
        rows.append(evaluate(setting, cand, lambda line, i=i: progress(
            f"[{i}/{len(candidates)}] {line}")))
    table = ranked(rows)
    import workloads

    cfg = workloads.make_config(setting.workload, setting.preset, setting.overrides)
    # the two orders over the layouts that fit: the book's over those it prices (compiled or
    # not), the prediction's over those compiled
    fit = ~table[schema.FITS].isin([NO, BOOK_NO, NOT_BUILT])
    priced = table[table[schema.PREDICTED_STEP_S].notna() & fit]
    book = table[fit & table[schema.ANALYTIC_S].notna()].sort_values(schema.ANALYTIC_S,
                                                                      kind="stable")
    groups: list[list[str]] = []  # layouts the book's step cannot tell apart share a group
    last = None
    for layout, t in zip(book[schema.LAYOUT], book[schema.ANALYTIC_S]):
        if last is not None and abs(t - last) <= TIE * last:
            groups[-1].append(layout)
        else:
            groups.append([layout])
        last = t
    return Plan(table, cfg.B * cfg.T, groups, priced[schema.LAYOUT].tolist())


def orders_agree(book: Sequence[Sequence[str]], predicted: Sequence[str]) -> bool:
    """True when no two layouts the book orders strictly are in the other order predicted."""
    rank_of = {layout: i for i, group in enumerate(book) for layout in group}
    ranks = [rank_of[layout] for layout in predicted]
    return ranks == sorted(ranks)
