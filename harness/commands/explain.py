"""``harness explain RUN|TRACE``: every collective of a program, where it came from and why.

A stored run directory (its COLLECTIVES table, or for a run saved before there was one, made
from the HLO its trace carries), or any profiler trace (``*.xplane.pb`` or a directory holding
one), analysed through the same path as ``harness trace`` (``pipeline.analyze_trace``). Prints
the table ranked by exposed time, then each collective's reason in a sentence and the book's
fix; ``--json``/``--csv`` write the full table. A program with no collectives says so (exit 0).
"""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import count
from harness.errors import HarnessError

SHOWN = (schema.OP, schema.COLLECTIVE, schema.SOURCE_LINE, schema.MESH_AXES,
         schema.DEVICE_BYTES, schema.COUNT, schema.REASON, schema.PREDICTED_S,
         schema.MEASURED_S, schema.EXPOSED_COMM_S)


def add_arguments(p) -> None:
    p.add_argument("path", help="a stored run directory, a trace file, or a directory searched "
                   "for *.xplane.pb")
    p.add_argument("--mesh", metavar="X=4,Y=2", help="the mesh's named axes, for a trace that "
                   "does not record them (4x2 names them X, Y); default: the run's mesh, else "
                   "device groups are printed")
    p.add_argument("--chip", help="predict for this chip (default: the trace's accelerator)")
    p.add_argument("--program", default="", metavar="ID|NAME",
                   help="explain this program (default: the run's, else the longest that ran)")
    p.add_argument("--top", type=count, default=20, help="rows to print (default 20; 0 = all)")
    p.add_argument("--csv", type=Path, help="also write the full table as CSV here")
    p.add_argument("--json", type=Path, help="also write the full table as JSON here")


def _stored(path: Path, mesh: dict | None):
    """A stored run and its COLLECTIVES table (made from its trace's HLO where not stored)."""
    from harness.explain import collectives, run_mesh
    from harness.hlo import parse_module
    from harness.runs import pipeline
    from harness.runs.run import Run
    from harness.runs.store import TRACE_DIR
    from harness.trace.load import find_trace_file, read_xspace

    run = Run.load(path)
    if run.collectives is not None and mesh is None:
        return run, run.collectives
    trace_dir = path / TRACE_DIR
    if not trace_dir.is_dir():
        raise HarnessError(f"{path}: the run keeps no trace/, so its HLO is unknown; explain "
                           f"the trace it was made from instead")
    trace_file = find_trace_file(trace_dir)
    space, _ = read_xspace(trace_file)
    text, _ = pipeline.trace_program(space, run.meta.get(schema.PROGRAM, ""))
    if text is None:
        text = pipeline.saved_beside(trace_file, trace_dir).get("hlo_text")
    if not text:
        raise pipeline.NoHlo(f"{path}: its trace holds no HLO, and none was saved beside it")
    table = collectives(parse_module(text), mesh=mesh or run_mesh(run.meta), ops=run.ops,
                        step=run.step)
    return run, table


def _traced(args, mesh: dict | None):
    from harness.runs import pipeline

    run = pipeline.analyze_trace(args.path, chip=args.chip, program=args.program, mesh=mesh)
    return run, run.collectives


def main(args) -> int:
    from harness.explain import parse_mesh
    from harness.report import tables
    from harness.runs.store import META

    mesh = parse_mesh(args.mesh) if args.mesh else None
    path = Path(args.path)
    if not path.exists():
        raise HarnessError(f"{path}: no such run directory or trace file")
    stored = path.is_dir() and (path / META).is_file()
    run, table = _stored(path, mesh) if stored else _traced(args, mesh)
    if args.program and table is not None and len(table):
        table = table[table[schema.PROGRAM] == args.program] if stored else table
    if table is None or not len(table):
        print(f"{run.title}: no collectives: every op runs on its own device's data")
        return 0
    shown = table if args.top == 0 else table.head(args.top)
    print(tables.to_text(shown[list(SHOWN)], title=f"{run.title}: {len(table)} collectives, "
                         f"most exposed first"), end="")
    for i, row in shown.iterrows():
        where = f" ({row[schema.SOURCE_LINE]})" if row[schema.SOURCE_LINE] else ""
        print(f"{row[schema.OP]}{where}: {row[schema.WHY]}")
        if row[schema.FIX]:
            print(f"  fix: {row[schema.FIX]}")
    print(tables.legend_text(list(SHOWN)))
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
