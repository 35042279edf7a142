"""``harness calibrate``: measure this host's peaks with XLA and save them as the ``cpu`` chip.

    harness calibrate            # full calibration of --devices N (default 8) virtual devices
    harness calibrate --quick    # a few seconds, what a run performs when none is saved
    harness calibrate --json --out cal.json

Prints one device alone against all N busy, the ``cpu`` chip the figures make, the caveat about
shared cores (``harness.chip.calibration_table``), and where the calibration was saved
(``harness.chip.cache.cache_path``).
"""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.chip import calibration as cal_lib
from harness.chip import calibration_table as report

# checked before minutes of measuring (harness.commands.check_options)
CHECKED = {"out": "file"}


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true",
                   help="a few seconds: one size per figure, fewer steps")
    p.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    p.add_argument("--allow-busy", action="store_true",
                   help="save the figures even when the host was busy while measuring (a "
                        "reference matmul's rate varied more than 1.5x, or its FLOPs per CPU "
                        "second, the cores' own speed, more than 1.3x)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="save here instead of the cache (default: "
                        f"${cal_lib.CACHE_ENV} or ~/.cache/scaling-harness/cpu-<N>.json)")


def _print(cal: cal_lib.Calibration, chip) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    table = Table(title=report.title(cal), title_justify="left")
    first, *figures = report.headers(cal)
    table.add_column(first)
    for header in figures:
        table.add_column(header, justify="right")
    for row in report.rows(cal):
        table.add_row(*row)
    console.print(table)
    for line in report.notes(cal, chip):
        print(line)


def main(args) -> int:
    mode = "quick" if args.quick else "full"
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        cal = cal_lib.calibrate(mode, args.devices, progress=progress,
                                refuse_busy=not args.allow_busy)
    chip = cal_lib.to_chip(cal)
    path = cal_lib.save(cal, args.out)
    if args.json:
        print(json.dumps(cal.to_dict(), indent=1))
    else:
        _print(cal, chip)
    print(f"saved: {path}")
    return 0
