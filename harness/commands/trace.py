"""``harness trace DIR``: the per-op table of an existing profiler trace."""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import count
from harness.report import tables


def add_arguments(p) -> None:
    p.add_argument("path", help="trace file, or a directory searched for *.xplane.pb")
    p.add_argument("--top", type=count, default=20, help="rows to print (default 20; 0 = all)")
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="annotated steps to drop from the start (default 0)")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")
    p.add_argument("--csv", type=Path, help="also write the full table as CSV here")
    p.add_argument("--json", type=Path, help="also write the full table as JSON here")


def main(args) -> int:
    from harness.ops import op_times
    from harness.trace.load import load_events

    events = load_events(args.path, warmup_steps=args.warmup_steps)
    ops = op_times(events)
    if args.csv:
        args.csv.write_text(tables.to_csv(ops))
    if args.json:
        args.json.write_text(tables.to_json(ops))
    shown = ops if args.top == 0 else ops.head(args.top)
    steps = events[schema.STEP].nunique()
    devices = events[schema.DEVICE].nunique()
    title = (f"{events.attrs['source']}: {events.attrs['layout']} layout, {devices} devices, "
             f"{steps} steps, {len(ops)} ops")
    print(tables.render(shown, args.format) if args.format != "text"
          else tables.to_text(shown, title=title), end="")
    return 0
