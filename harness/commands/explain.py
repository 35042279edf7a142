"""``harness explain RUN|TRACE|HLO``: every collective of a program, where it came from and why.

A stored run directory (its COLLECTIVES table, or for a run saved before there was one, made
from the HLO its trace carries), or any profiler trace (``*.xplane.pb`` or a directory holding
one), analysed through the same path as ``harness trace`` (``pipeline.analyze_trace``). Prints
the table ranked by exposed time, then each collective's reason in a sentence and the book's
fix, and where the program has an MoE's routed matmuls, their table after it (FLOPs as
computed, the routed tokens', the waste: ``harness.explain.routed``); ``--format md|json|csv``
prints it so instead (json and csv: every row, each whole; csv: the routed matmuls a second
table after one blank line);
``--json``/``--csv`` write the full table. A program with no collectives says so (exit 0).
A file of compiled HLO text is explained as it is, not run (``--chip`` for roofline times).
The report: ``harness.runs.explained``.
"""
from __future__ import annotations

from pathlib import Path

from harness.commands import add_format, add_mesh, add_network, count
from harness.errors import HarnessError

# checked before the run or trace is read (harness.commands.check_options)
CHECKED = {"chip": "chip", "csv": "file", "json": "file"}


def add_arguments(p) -> None:
    p.add_argument("path", help="a stored run directory, a trace file, a directory searched "
                   "for *.xplane.pb, or a compiled program's HLO text")
    add_mesh(p, what="the mesh's named axes, for a trace that does not record them (default: "
                     "the run's mesh, else device groups are printed)")
    p.add_argument("--chip", metavar="CHIP",
                   help="predict for this chip (default: the trace's accelerator)")
    p.add_argument("--program", default="", metavar="NAME|ID|all",
                   help="explain this program: every compilation of a name, one program id, or "
                        "all (default: the step program, the most device time among programs "
                        "run 3 or more times)")
    add_format(p, ("text", "md", "json", "csv"))
    p.add_argument("--top", type=count, default=20, metavar="N",
                   help="rows to print (default 20; 0 = all)")
    p.add_argument("--csv", type=Path, metavar="FILE",
                   help="also write the full table as CSV here")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the full table as JSON here")
    add_network(p)


def main(args) -> int:
    from harness.analysis.mesh import parse_mesh
    from harness.chip.network import declared
    from harness.report import tables
    from harness.runs.explained import explain_path, rendered

    mesh = parse_mesh(args.mesh) if args.mesh else None
    explained = explain_path(Path(args.path), args.chip, args.program, mesh, declared(args))
    print(rendered(explained, args.format, args.top), end="")
    if explained.table is not None and len(explained.table):
        _write(args, explained.table, tables)
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
