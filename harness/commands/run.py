"""``harness run WORKLOAD``: build a registered workload, capture it, print its per-op table."""
from __future__ import annotations

from pathlib import Path

from harness import tables
from harness.errors import HarnessError



def parse_sets(items: list[str]) -> dict[str, str]:
    """``["B=128", "dtype=bf16"]`` -> ``{"B": "128", "dtype": "bf16"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HarnessError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def add_arguments(p) -> None:
    p.add_argument("workload", help="workload name (see `harness run --list`)", nargs="?")
    p.add_argument("--list", action="store_true", help="list the registered workloads and exit")
    p.add_argument("--preset", default="tiny", help="named config preset (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    p.add_argument("--mesh", help="mesh shape such as 4x2 (default: all devices on one axis)")
    p.add_argument("--steps", type=int, default=5, help="measured steps (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untraced warm-up steps (default 2)")
    p.add_argument("--out", type=Path, default=Path("results"),
                   help="directory that receives the run (default results/)")
    p.add_argument("--top", type=int, default=20, help="rows to print (default 20; 0 = all)")
    p.add_argument("--format", choices=sorted(tables.FORMATS), default="text")


def main(args) -> int:
    from harness.runner import list_workloads, run_workload

    if args.list or not args.workload:
        print(tables.to_text(list_workloads(), title="workloads"), end="")
        return 0 if args.list else 2
    run = run_workload(args.workload, preset=args.preset, overrides=parse_sets(args.sets),
                       mesh=args.mesh, steps=args.steps, warmup=args.warmup, out=args.out)
    shown = run.ops if args.top == 0 else run.ops.head(args.top)
    print(tables.render(shown, args.format) if args.format != "text"
          else tables.to_text(shown, title=run.title), end="")
    print(f"run: {run.path}")
    return 0
