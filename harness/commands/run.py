"""``harness run WORKLOAD``: build a registered workload, capture it, analyse it, store the run."""
from __future__ import annotations

from pathlib import Path

from harness import report, tables
from harness.errors import HarnessError


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["B=128", "dtype=bf16"]`` -> ``{"B": "128", "dtype": "bf16"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HarnessError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def add_arguments(p) -> None:
    p.add_argument("workload", nargs="?", help="workload name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered workloads and exit")
    p.add_argument("--preset", default="tiny", help="named config preset (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable)")
    p.add_argument("--mesh", help="mesh shape such as 4x2 (default: the workload's)")
    p.add_argument("--chip", help="predict for this chip (default: the one the run is on)")
    p.add_argument("--steps", type=int, default=5, help="measured steps (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untraced warm-up steps (default 2)")
    p.add_argument("--out", type=Path, default=Path("results"),
                   help="directory that receives the run (default results/)")
    p.add_argument("--top", type=int, default=15, help="op rows to print (default 15; 0 = all)")
    p.add_argument("--format", choices=sorted(report.FORMATS), default="text")


def main(args) -> int:
    from harness.runner import list_workloads, run_workload

    if args.list or not args.workload:
        print(tables.to_text(list_workloads(), title="workloads"), end="")
        if not args.list:
            raise HarnessError("name a workload to run (listed above)")
        return 0
    analysis, path = run_workload(args.workload, preset=args.preset,
                                  overrides=parse_sets(args.sets), mesh=args.mesh,
                                  steps=args.steps, warmup=args.warmup, out=args.out,
                                  chip=args.chip)
    if args.format == "text":
        print(report.to_text(analysis.report, top=args.top), end="")
    else:
        print(report.render(analysis.report, args.format), end="")
    print(f"report: {path / 'report.html'}")
    return 0
