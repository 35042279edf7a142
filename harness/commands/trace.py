"""``harness trace PATH``: the per-op report of an existing profiler trace.

With the program's HLO (carried by the trace, or ``--hlo``) and a chip (``--chip``, the
accelerator the trace's device planes describe, or for a CPU trace this host's calibrated
``cpu`` chip), the full measured-vs-predicted report of ``harness run`` of its step program
(``--program`` for others), with every program that ran in its programs table; a trace whose
device the registry does not know gives its measured per-op table only.
The trace is decoded once and each program's HLO parsed once (``harness.runs.pipeline``);
plots are drawn only for the formats that show them (md, html).
"""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import add_format, add_network, add_warmup, count, deprecated
from harness.errors import HarnessError

# checked before the trace is read (harness.commands.check_options)
CHECKED = {"chip": "chip", "csv": "file", "json": "file", "html": "file"}


def add_arguments(p) -> None:
    p.add_argument("path", help="trace file, or a directory searched for *.xplane.pb")
    p.add_argument("--chip", metavar="CHIP",
                   help="predict for this chip (default: the trace's accelerator)")
    p.add_argument("--hlo", type=Path, metavar="FILE", help="the program's optimized HLO, for a "
                   "trace that holds none (an XLA dump, *after_optimizations.txt)")
    add_network(p)
    p.add_argument("--top", type=count, default=20, metavar="N",
                   help="rows to print (default 20; 0 = all)")
    add_warmup(p, 0, "annotated steps to drop from the start, warm-up")
    deprecated(p, "--warmup-steps", "--warmup", dest="warmup", type=count)
    p.add_argument("--program", default="", metavar="NAME|ID|all",
                   help="report every compilation of a name, one compilation (its program id) "
                        "or all (default: the step program, the most device time among "
                        "programs run 3 or more times)")
    add_format(p, schema.REPORT_FORMATS)
    p.add_argument("--csv", type=Path, metavar="FILE",
                   help="also write the full op table as CSV here")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the report as JSON here")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the HTML report here")


def main(args) -> int:
    from harness.trace.opener import find_trace_file, read_xspace, start_decode

    if args.hlo is not None and not args.hlo.is_file():
        raise HarnessError(f"--hlo {args.hlo}: no such file")
    space, label = read_xspace(find_trace_file(args.path))
    # the decode starts in worker processes now; pandas and the analysis are imported below,
    # beside it (a large trace's decode takes longer than those imports)
    trace_format = start_decode(space, label)
    from harness.chip.network import declared
    from harness.chip.resolve import chip_from_trace
    from harness.report import render, tables
    from harness.runs import pipeline
    from harness.trace.decode import NoHlo

    if trace_format == "tpu-json" and args.chip is None:  # a Chrome JSON names no chip
        from predictions.hardware import CHIPS

        tpus = [n for n, c in CHIPS.items() if c.kind == "tpu"]
        raise HarnessError(f"{label}: a Chrome JSON trace names no chip; give the TPU it ran "
                           f"on with --chip (one of {', '.join(tpus)})")
    found, notes = (None, []) if args.chip else chip_from_trace(space)
    # a CPU trace names no chip: it is predicted for this host's calibrated cpu chip
    on_cpu = trace_format == "cpu"
    if args.chip is None and found is None and args.hlo is None and not on_cpu:
        return _measured_only(space, label, args, notes)
    try:
        run = pipeline.analyze_trace(args.path, chip=args.chip, hlo=args.hlo,
                                     warmup_steps=args.warmup, space=space,
                                     program=args.program, network=declared(args))
    except NoHlo as e:
        if args.chip:  # predictions were asked for: say what they need
            raise
        return _measured_only(space, label, args, [*notes, f"no predictions: {e}"])
    print(render(run, args.format, top=args.top if args.format == "text" else None), end="")
    _write(args, csv=lambda: tables.to_csv(run.ops), json=lambda: render(run, "json"),
           html=lambda: render(run, "html"))
    return 0


def _write(args, **render) -> None:
    """Write each output file asked for (``--csv``, ``--json``, ``--html``), every one that
    can be; then one line naming the first path that could not be written."""
    failed = []
    for option, text in render.items():
        path = getattr(args, option)
        if path is None:
            continue
        try:
            path.write_text(text())
        except OSError as e:
            failed.append(f"--{option} {path}: cannot write it ({e.strerror or e})")
    if failed:
        raise HarnessError(failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1
                                        else ""))


def _measured_only(space, label: str, args, notes: list[str]) -> int:
    from harness.capture.environment import git_state
    from harness.record import Run
    from harness.report import render, tables
    from harness.report.heading import measured_title
    from harness.runs.pipeline import measured_only

    read, ops = measured_only(space, warmup_steps=args.warmup, label=label)
    title = measured_title(read, ops)
    # the commit of the checkout reading it, on its page as on a full trace's
    page = Run(title=title, ops=ops, notes=list(notes), meta=git_state())
    shown = ops if args.top == 0 else ops.head(args.top)
    fmt = args.format if args.format in tables.FORMATS else "text"
    print(tables.render(shown, fmt) if fmt != "text"
          else tables.to_text(shown, title=title), end="")
    print("".join(f"note: {n}\n" for n in notes if fmt == "text"), end="")
    _write(args, csv=lambda: tables.to_csv(ops), json=lambda: tables.to_json(ops),
           html=lambda: render(page, "html"))
    return 0
