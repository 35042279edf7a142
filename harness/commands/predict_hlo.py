"""``harness predict-hlo WORKLOAD``: compile ahead of time, cost the HLO on chips, no run.

A TPU chip with a libtpu topology (``workloads.tpu.TOPOLOGIES``) is compiled for its own slice
by the TPU compiler when libtpu is installed (``--compiler auto``/``tpu``); every other chip, and
every chip with ``--compiler cpu``, costs the HLO of a compile on virtual CPU devices. With
``auto`` the CPU compile also runs beside a TPU one, so the gap to the book can be shown for both.
Each chip's step is its schedule played at the roofline (``harness.step.simulate``), printed
with its exposed communication and critical path beside the per-op sum and the book's step.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from harness import schema
from harness.capture.memory import memory_fit
from harness.chip.cache import cache_root
from harness.commands import count
from harness.commands.run import parse_sets
from harness.errors import HarnessError
from harness.hlo import cross_check, parse_module
from harness.plan import remat
from harness.plan.fit import describe_refusal, fit_line
from harness.plan.predict import STEP, book_gap, predict_module
from harness.report import tables
from harness.report.heading import mesh_str
from harness.step.simulate import critical_ops
from harness.units import fmt_seconds
from predictions import hardware
from predictions.step import OVERLAP

OP_COLUMNS = (schema.OP, schema.OPCODE, schema.CATEGORY, schema.BOUND, schema.COUNT,
              schema.PREDICTED_S, schema.T_COMPUTE_S, schema.T_MEMORY_S, schema.T_COMM_S,
              schema.COLLECTIVE, schema.GROUP_SIZE)
COMPILERS = {
    "auto": "the TPU compiler for TPU chips when libtpu is installed (and XLA:CPU beside it)",
    "tpu": "the TPU compiler only (needs libtpu)",
    "cpu": "XLA:CPU on virtual devices only",
}
CPU = "cpu"  # the compile key of the virtual-CPU compile; a TPU compile's key is its chip
CPU_NOT_A_BOUND = ("XLA:CPU's program priced at this chip's roofline: NOT a TPU bound (libtpu "
                   "refused the TPU program; the CPU compiler's fusions, layouts and memory are "
                   "not the TPU's)")
# utilisation figures not shown for a chip whose TPU compile was refused
NOT_FOR_REFUSED = frozenset({schema.MFU_AT_ROOFLINE, schema.MFU, schema.MFU_BOOK, schema.HFU})


def add_arguments(p) -> None:
    p.add_argument("workload", help="workload name, e.g. llama_train")
    p.add_argument("--preset", default="tiny", help="config preset, e.g. 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--mesh", default="8x8", help="target mesh shape (default 8x8)")
    p.add_argument("--chip", dest="chips", action="append", default=[],
                   help="chip to predict for (repeatable; default tpu-v5p)")
    p.add_argument("--compiler", choices=sorted(COMPILERS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in COMPILERS.items()))
    p.add_argument("--no-cache", action="store_true",
                   help="compile again even when the same compile is cached "
                        "($SCALING_HARNESS_CACHE/aot, default ~/.cache/scaling-harness/aot)")
    p.add_argument("--top", type=count, default=15, help="op rows to print per chip")
    p.add_argument("--format", choices=["text", "md", "json"], default="text")


def plan(chip_names: list[str], compiler: str, have_libtpu: bool) -> tuple[dict, list[str]]:
    """chip -> compile key (``"cpu"`` or the chip itself for a TPU compile), and notes to print
    (one line each). HarnessError when ``--compiler tpu`` cannot be honoured."""
    from workloads import tpu

    keys, notes = {}, []
    for name in chip_names:
        has_topology = name in tpu.TOPOLOGIES
        if compiler == "tpu" and not has_topology:
            raise HarnessError(f"--compiler tpu: chip {name} has no libtpu topology; chips with "
                               f"one: {', '.join(tpu.TOPOLOGIES)}")
        if compiler == "tpu" and not have_libtpu:
            raise HarnessError(f"--compiler tpu needs libtpu, which is not installed: "
                               f"{tpu.INSTALL_HINT}")
        if has_topology and compiler != CPU and not have_libtpu:
            notes.append(f"{name}: libtpu is not installed, so XLA:CPU's HLO is costed as if on "
                         f"{name}; for the TPU compiler: {tpu.INSTALL_HINT}")
        keys[name] = name if has_topology and compiler != CPU and have_libtpu else CPU
    return keys, notes


def _compile_all(args, overrides, keys: dict, compiler: str) -> dict:
    """Run every needed compile side by side; key -> (AotResult, Module, cross-check)."""
    from workloads.aot import HbmExhausted, start_compile

    needed = list(dict.fromkeys(keys.values()))
    if compiler == "auto" and CPU not in needed:
        needed.append(CPU)  # the gap table shows both compilers' HLO
    cache = None if args.no_cache else aot_cache_dir()
    jobs = {k: start_compile(args.workload, args.preset, overrides, args.mesh,
                             tpu_chip=None if k == CPU else k, cache_dir=cache) for k in needed}
    out = {}
    for key, job in jobs.items():
        try:
            aot = job.result()
        except HbmExhausted as e:  # the fit verdict; the chip is costed on the CPU compile
            if CPU not in jobs:
                raise HarnessError(f"does not fit: {e} (--compiler auto costs the CPU compile "
                                   "instead)") from None
            out[key] = e
            continue
        module = parse_module(aot.hlo_text)
        out[key] = (aot, module, cross_check(module, aot.cost_analysis))
    return out


def aot_cache_dir() -> Path:
    """``$SCALING_HARNESS_CACHE/aot`` (default ``~/.cache/scaling-harness/aot``)."""
    return cache_root() / "aot"


def _compile_line(aot, check: dict, mesh: str) -> str:
    """How the program was compiled, and our FLOPs against XLA's cost_analysis: first with
    loop bodies counted once, as XLA counts them (the like-for-like check), then with each body
    times its trip count (what runs; XLA's figure leaves the trips out)."""
    where = (f"for {aot.topology} ({aot.devices} chips as mesh {mesh})" if aot.topology
             else f"on {aot.devices} virtual CPU devices")
    when = "cached; when compiled: " if aot.cached else ""
    return (f"{aot.compiler} {where}: {when}lowered in {aot.lower_s:.1f} s, compiled in "
            f"{aot.compile_s:.1f} s; HLO FLOPs vs XLA cost_analysis, loop bodies once as XLA "
            f"counts them: {_rel(check, 'flops_loops_once')}; each body x its trip count (what "
            f"runs, which XLA's figure leaves out): {_rel(check, 'flops')}")


def main(args) -> int:
    import workloads  # deferred: importing workloads imports jax
    from workloads import tpu
    from workloads.mesh import parse_shape

    chips = [hardware.chip_entry(c) for c in (args.chips or ["tpu-v5p"])]
    overrides = parse_sets(args.sets)
    wl = workloads.get(args.workload)
    cfg = workloads.make_config(args.workload, args.preset, overrides)
    sizes = parse_shape(args.mesh)
    mesh = SimpleNamespace(shape=dict(zip(wl.mesh_axes, sizes)))
    keys, notes = plan([c.name for c in chips], args.compiler, tpu.libtpu_available())
    tpu_key = next((k for k in keys.values() if k != CPU), None)
    chose_remat = remat.wanted(wl, overrides, tpu_key)
    if chose_remat:  # no remat given: the fastest that fits
        overrides, note = remat.choose(
            wl, args.preset, overrides, args.mesh, tpu_key,
            None if args.no_cache else aot_cache_dir(),
            lambda line: print(line, file=sys.stderr, flush=True))
        notes.append(note)
        cfg = workloads.make_config(args.workload, args.preset, overrides)
    compiles = _compile_all(args, overrides, keys, args.compiler)
    results, refusals = [], {}
    for chip in chips:
        key = keys[chip.name]
        refused = compiles.get(key) if isinstance(compiles.get(key), Exception) else None
        if refused is not None:  # said first; the CPU compile priced below, not as a bound
            refusals[chip.name] = describe_refusal(
                refused, chip.name, wl, args.preset, overrides, args.mesh,
                compiles[CPU][1] if CPU in compiles else None, chose_remat)
            key = keys[chip.name] = CPU
        aot, module, check = compiles[key]
        book = wl.book(cfg, mesh, chip) if wl.book is not None else None
        pred = predict_module(module, chip, devices=aot.devices,
                              model_flops=book.model_flops if book else None,
                              analytic_s=book.analytic_s if book else None)
        label = "tpu" if key != CPU else CPU
        by_compile, steps = {label: pred.ops}, {label: pred.step.step_s}
        if key != CPU and CPU in compiles:
            on_cpu = predict_module(compiles[CPU][1], chip)
            by_compile[CPU], steps[CPU] = on_cpu.ops, on_cpu.step.step_s
        gap = book_gap(book.parts, by_compile, steps) if book and book.parts else None
        fit = (memory_fit(aot.memory, chip, placed=True)  # libtpu returned it: placed
               if aot.topology and aot.memory else None)
        totals = dict(pred.totals)
        if refused is not None:  # XLA:CPU's program: no utilisation to claim for the TPU
            fit = {"fits": False, "refused": refusals[chip.name][1]}
            totals = {k: v for k, v in totals.items() if k not in NOT_FOR_REFUSED}
        results.append((chip.name, key, pred, gap, fit, totals))
    head = f"{args.workload} ({args.preset}) on mesh {mesh_str(dict(mesh.shape))}"
    ok = {k: v for k, v in compiles.items() if not isinstance(v, Exception)}
    if args.format == "json":
        print(json.dumps({
            "header": head, "notes": notes,
            "cross_check": next(iter(ok.values()))[2],
            "refused": {name: js for name, (_, js) in refusals.items()},
            "compiles": {k: {"compiler": a.compiler, "topology": a.topology,
                             "devices": a.devices, "lower_s": a.lower_s,
                             "compile_s": a.compile_s, "cached": a.cached, "memory": a.memory,
                             "cross_check": c}
                         for k, (a, _, c) in ok.items()},
            "chips": [{"chip": name, "compile": key, "totals": totals, "memory_fit": fit,
                       "priced_program": CPU_NOT_A_BOUND if name in refusals else key,
                       "critical_path": json.loads(critical_ops(r.step, args.top).to_json(
                           orient="records")),
                       "links": r.step.lanes,
                       "categories": json.loads(r.categories.to_json(orient="records")),
                       "book_gap": None if gap is None else json.loads(
                           gap.to_json(orient="records")),
                       "top_ops": json.loads(r.ops.head(args.top).to_json(orient="records"))}
                      for name, key, r, gap, fit, totals in results]}, indent=1, default=str))
        return 0
    fmt = "md" if args.format == "md" else "text"
    print(head)
    for lines, _ in refusals.values():
        print("\n".join(lines))
    for note in notes:
        print(note)
    for name, key, r, gap, fit, totals in results:
        aot, _, check = compiles[key]
        if name in refusals:
            print(f"\n{name}: {CPU_NOT_A_BOUND}")
        print(f"\n{name}: {_compile_line(aot, check, args.mesh)}")
        if fit is not None and "refused" not in fit:
            print(fit_line(fit, name))
        for line in step_lines(r.step, totals):
            print(line)
        print("  ".join(f"{k}={tables.fmt_figure(k, v)}" for k, v in totals.items()))
        print(tables.render(r.categories, fmt), end="")
        if gap is not None:
            print(f"the simulated step vs the book, part by part ({', '.join(gap.columns[3::3])}"
                  ": HLO seconds, the overlap row what the schedule hides; work_x: HLO FLOPs or "
                  "bytes / the book's; excess: seconds beyond that work at the book's rate)")
            print(tables.render(gap, fmt), end="")
            print(gap_line(gap, "tpu" if key != CPU else CPU))
        print(tables.render(r.ops.head(args.top), fmt, OP_COLUMNS), end="")
    return 0


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


def _rel(check: dict, key: str) -> str:
    v = check.get(f"{key}_rel_diff")
    return "n/a" if v is None else f"{v:+.1%}"
