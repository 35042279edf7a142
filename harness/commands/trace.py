"""``harness trace PATH``: the per-op report of an existing profiler trace.

With the program's HLO (carried by the trace, or ``--hlo``) and a chip (``--chip``, or the
accelerator the trace names), the full measured-vs-predicted report of ``harness run``; a trace
from a CPU host without ``--chip`` gives its measured per-op table only.
"""
from __future__ import annotations

from pathlib import Path

from harness import report, schema
from harness.commands import count
from harness.errors import HarnessError
from harness.ops import op_times
from harness.report import tables
from harness.trace.load import read_events


def add_arguments(p) -> None:
    p.add_argument("path", help="trace file, or a directory searched for *.xplane.pb")
    p.add_argument("--chip", help="predict for this chip (default: the trace's accelerator)")
    p.add_argument("--hlo", type=Path, help="the program's optimized HLO, for a trace that holds "
                   "none (an XLA dump, *after_optimizations.txt)")
    p.add_argument("--top", type=count, default=20, help="rows to print (default 20; 0 = all)")
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="annotated steps to drop from the start (default 0)")
    p.add_argument("--format", choices=sorted(report.FORMATS), default="text")
    p.add_argument("--csv", type=Path, help="also write the full op table as CSV here")
    p.add_argument("--json", type=Path, help="also write the full op table as JSON here")
    p.add_argument("--html", type=Path, help="also write the HTML report here")


def _accelerator(path) -> str | None:
    """The chip of the trace's accelerator, when it names one the registry knows."""
    from harness.trace.hlo_proto import device_kind
    from harness.trace.load import read_xspace
    from predictions import hardware

    kind = device_kind(read_xspace(path)[0])
    try:
        return hardware.chip_for(kind).name if kind else None
    except KeyError:
        return None


def main(args) -> int:
    if args.hlo is not None and not args.hlo.is_file():
        raise HarnessError(f"--hlo {args.hlo}: no such file")
    chip = args.chip or _accelerator(args.path)
    if chip is None and args.hlo is None:
        return _measured_only(args)
    from harness.analysis import analyze_trace

    analysis = analyze_trace(args.path, chip=chip, hlo=args.hlo, warmup_steps=args.warmup_steps)
    r = analysis.report
    if args.csv:
        args.csv.write_text(tables.to_csv(r.ops))
    if args.json:
        args.json.write_text(report.render(r, "json"))
    if args.html:
        args.html.write_text(report.render(r, "html"))
    if args.format == "text":
        print(report.to_text(r, top=args.top or len(r.ops)), end="")
    else:
        print(report.render(r, args.format), end="")
    return 0


def _measured_only(args) -> int:
    read = read_events(args.path, warmup_steps=args.warmup_steps)
    events = read.events
    ops = op_times(events)
    if args.csv:
        args.csv.write_text(tables.to_csv(ops))
    if args.json:
        args.json.write_text(tables.to_json(ops))
    shown = ops if args.top == 0 else ops.head(args.top)
    steps = events[schema.STEP].nunique()
    devices = events[schema.DEVICE].nunique()
    title = (f"{read.source}: {read.layout} layout, {devices} devices, "
             f"{steps} steps, {len(ops)} ops (measured only: give --chip for predictions)")
    fmt = args.format if args.format in tables.FORMATS else "text"
    print(tables.render(shown, fmt) if fmt != "text"
          else tables.to_text(shown, title=title), end="")
    return 0
