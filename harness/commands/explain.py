"""``harness explain RUN|TRACE|HLO``: every collective of a program, where it came from and why.

A stored run directory (its COLLECTIVES table, or for a run saved before there was one, made
from the HLO its trace carries), or any profiler trace (``*.xplane.pb`` or a directory holding
one), analysed through the same path as ``harness trace`` (``pipeline.analyze_trace``). Prints
the table ranked by exposed time, then each collective's reason in a sentence and the book's
fix; ``--json``/``--csv`` write the full table. A program with no collectives says so (exit 0).
A file of compiled HLO text is explained as it is, not run (``--chip`` for roofline times).
"""
from __future__ import annotations

import math
from pathlib import Path

from harness import schema
from harness.commands import count
from harness.errors import HarnessError

SHOWN = (schema.OP, schema.COLLECTIVE, schema.SOURCE_LINE, schema.MESH_AXES,
         schema.DEVICE_BYTES, schema.COUNT, schema.REASON, schema.PREDICTED_S,
         schema.MEASURED_S, schema.EXPOSED_COMM_S)


def add_arguments(p) -> None:
    p.add_argument("path", help="a stored run directory, a trace file, a directory searched "
                   "for *.xplane.pb, or a compiled program's HLO text")
    p.add_argument("--mesh", metavar="X=4,Y=2", help="the mesh's named axes, for a trace that "
                   "does not record them (4x2 names them X, Y); default: the run's mesh, else "
                   "device groups are printed")
    p.add_argument("--chip", help="predict for this chip (default: the trace's accelerator)")
    p.add_argument("--program", default="", metavar="NAME|ID|all",
                   help="explain this program: every compilation of a name, one program id, or "
                        "all (default: the step program, the most device time among programs "
                        "run 3 or more times)")
    p.add_argument("--top", type=count, default=20, help="rows to print (default 20; 0 = all)")
    p.add_argument("--csv", type=Path, help="also write the full table as CSV here")
    p.add_argument("--json", type=Path, help="also write the full table as JSON here")


def _trace_of(run, path: Path) -> Path:
    """Where a stored run's trace is: the file it was analysed from, where it still is, else
    the run's own ``trace/`` (which may not exist)."""
    from harness.runs.store import TRACE_DIR

    found = run.meta.get(schema.TRACE_FILE)
    return Path(found) if found and Path(found).exists() else path / TRACE_DIR


def _module(run, path: Path):
    """The program's parsed HLO: from the trace the run was analysed from (a stored run's
    ``trace/``), else the HLO ``harness`` saved beside it."""
    from harness.hlo import parse_module
    from harness.runs import pipeline
    from harness.trace.load import find_trace_file, read_xspace

    where = _trace_of(run, path)
    if not where.exists():
        raise HarnessError(f"{path}: the run keeps no trace/, so its HLO is unknown; explain "
                           f"the trace it was made from instead")
    trace_file = find_trace_file(where)
    program = run.meta.get(schema.PROGRAM_ID) or run.meta.get(schema.PROGRAM, "")
    text, _ = pipeline.trace_program(read_xspace(trace_file)[0], program)
    text = text or pipeline.saved_beside(trace_file, trace_file.parent).get("hlo_text")
    if not text:
        raise pipeline.NoHlo(f"{path}: its trace holds no HLO, and none was saved beside it")
    return parse_module(text)


def _load(args, path: Path, mesh: dict | None):
    """The run (stored, or analysed from the trace) and its COLLECTIVES table."""
    from harness.analysis.programs import of_program
    from harness.explain import collectives, run_mesh
    from harness.runs import pipeline
    from harness.runs.run import OPS_PARQUET, Run
    from harness.runs.store import META

    # a run directory, or any folder holding a trace (a profile dir, a run reduced to its
    # meta and trace)
    if not (path.is_dir() and (path / META).is_file() and (path / OPS_PARQUET).is_file()):
        run = pipeline.analyze_trace(path, chip=args.chip, program=args.program, mesh=mesh)
        return run, run.collectives
    run = Run.load(path)
    if args.program and not _holds(run, args.program):  # not stored: from the run's trace
        where = _trace_of(run, path)
        if not where.exists():
            raise HarnessError(f"{path}: the run stores no program {args.program!r} and keeps "
                               f"no trace to find it in; it stores {_stored(run)}")
        run = pipeline.analyze_trace(where, chip=args.chip, program=args.program,
                                     mesh=mesh or run_mesh(run.meta))
        return run, run.collectives
    if run.collectives is not None and mesh is None:
        table = run.collectives
    else:  # a run saved before the table existed, or asked for on another mesh
        table = collectives(_module(run, path), mesh=mesh or run_mesh(run.meta), ops=run.ops,
                            step=run.step, program_id=run.meta.get(schema.PROGRAM_ID, ""))
    return run, of_program(table, args.program or _step_program(run))


def _holds(run, program: str) -> bool:
    """Whether the stored run's ops are of ``program`` (a name, a program id; all: of every
    program its programs table lists)."""
    from harness.analysis.programs import ALL, chosen, compilations

    stored = compilations(run.ops)
    if program == ALL:
        return run.programs is None or len(run.programs) <= len(stored)
    return any(chosen(key, program) for key in stored)


def _stored(run) -> str:
    from harness.analysis.programs import compilations, program_name

    return ", ".join(program_name(k) for k in compilations(run.ops)) or "none"


def _step_program(run) -> str:
    """The program id (else the name) of the program a stored run's step and summary are of."""
    return str(run.meta.get(schema.PROGRAM_ID) or run.meta.get(schema.PROGRAM) or "")


def _redundant(run, path: Path, mesh: dict | None) -> list[str]:
    """Lines on the work the layout repeats: the program's FLOPs over the model's, and each
    dot that repeats its work over some mesh axes (``harness.explain.redundant``)."""
    from harness.explain import redundant, run_mesh
    from harness.report.tables import fmt_number

    s = run.summary
    factor = redundant.program_factor(s.get(schema.HLO_FLOPS_PER_DEVICE), s.get(schema.DEVICES),
                                      s.get(schema.MODEL_FLOPS))
    lines = []
    if factor is not None:
        lines.append(f"{schema.REDUNDANT_WORK}: the program does {factor:.2f}x the model's "
                     f"FLOPs ({fmt_number(s[schema.HLO_FLOPS_PER_DEVICE])} per device x "
                     f"{s[schema.DEVICES]} devices / {fmt_number(s[schema.MODEL_FLOPS])})")
    mesh = mesh or run_mesh(run.meta)
    if mesh is None:
        return lines
    try:
        module = _module(run, path)
    except HarnessError:
        return lines
    return lines + _repeated(module, mesh)


def _repeated(module, mesh: dict) -> list[str]:
    """One line per dot that repeats its work over some mesh axes, with the book's fix."""
    from harness.explain import redundant

    lines = []
    for _, r in redundant.repeated_dots(module, mesh).iterrows():
        where = f" ({r[schema.SOURCE_LINE]})" if r[schema.SOURCE_LINE] else ""
        lines.append(f"{r[schema.OP]}{where} repeats its work {r[schema.REPEAT]:g}x over "
                     f"{r[schema.REPLICATED_AXES]}: no operand is split over it "
                     f"(fix: shard the batch or a weight dimension over it, book §6.1)")
    return lines


def _check_mesh(mesh: dict | None, devices) -> None:
    """A ``--mesh`` must hold the program's devices: its groups are mapped onto it."""
    if mesh and devices and math.prod(mesh.values()) != int(devices):
        shape = ",".join(f"{k}={v}" for k, v in mesh.items())
        raise HarnessError(f"--mesh {shape} has {math.prod(mesh.values())} devices; the program "
                           f"runs on {int(devices)}")


def _is_hlo_text(path: Path) -> bool:
    """A file of HLO text (``compiled.as_text()``, an XLA dump's ``*after_optimizations.txt``)
    rather than a trace."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(64).lstrip().startswith(b"HloModule")


def _static(args, path: Path, mesh: dict | None):
    """(title, COLLECTIVES, lines on repeated work) of a compiled program's HLO text, not run:
    each collective's roofline time on ``--chip`` where one is given, nothing measured."""
    from harness.explain import collectives
    from harness.hlo import hlo_costs, parse_module

    module = parse_module(path.read_text())
    _check_mesh(mesh, module.num_devices)
    ops = hlo_costs(module, args.chip) if args.chip else None
    chip = f", predicted for {args.chip}" if args.chip else " (--chip for roofline times)"
    title = f"{module.name} ({path.name}: HLO text, not run{chip})"
    extra = _repeated(module, mesh) if mesh is not None else []
    return title, collectives(module, mesh=mesh, ops=ops), extra


def main(args) -> int:
    from harness.analysis.programs import compilations
    from harness.explain import parse_mesh
    from harness.report import heading, tables

    mesh = parse_mesh(args.mesh) if args.mesh else None
    path = Path(args.path)
    if not path.exists():
        raise HarnessError(f"{path}: no such run directory or trace file")
    if _is_hlo_text(path):
        title, table, extra = _static(args, path, mesh)
    else:
        run, table = _load(args, path, mesh)
        _check_mesh(mesh, run.meta.get(schema.DEVICE_COUNT))
        title, extra = heading.title(run), _redundant(run, path, mesh)
    if table is None or not len(table):
        print(f"{title}: no collectives: every op runs on its own device's data")
        print("".join(f"{line}\n" for line in extra), end="")
        return 0
    shown = table if args.top == 0 else table.head(args.top)
    n = len(table)
    # several compilations: each row names its program and program id
    several = len(compilations(table)) > 1
    columns = [*((schema.PROGRAM, schema.PROGRAM_ID) if several else ()), *SHOWN]
    print(tables.to_text(shown[[c for c in columns if c in shown.columns]],
                         title=f"{title}: {n} collective{'s' * (n != 1)}, most exposed first"),
          end="")
    for i, row in shown.iterrows():
        where = f" ({row[schema.SOURCE_LINE]})" if row[schema.SOURCE_LINE] else ""
        print(f"{row[schema.OP]}{where}: {row[schema.WHY]}")
        if row[schema.FIX]:
            print(f"  fix: {row[schema.FIX]}")
    print("".join(f"{line}\n" for line in extra), end="")
    print(tables.legend_text(columns))
    _write(args, table, tables)
    return 0


def _write(args, table, tables) -> None:
    for option, render in (("csv", tables.to_csv), ("json", tables.to_json)):
        out = getattr(args, option)
        if out is None:
            continue
        try:
            out.write_text(render(table))
        except OSError as e:
            raise HarnessError(f"--{option} {out}: cannot write it ({e.strerror or e})") from None
