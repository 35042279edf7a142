"""``harness calibrate``: measure this host's peaks with XLA and save them as the ``cpu`` chip.

    harness calibrate            # full calibration of --devices N (default 8) virtual devices
    harness calibrate --quick    # a few seconds, what a run performs when none is saved
    harness calibrate --json --out cal.json

Prints one device alone against all N busy, the ``cpu`` chip the figures make, the caveat about
shared cores (``harness.chip.calibration_table``), and where the calibration was saved
(``harness.chip.cache.cache_path``).
"""
from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.chip import calibration as cal_lib
from harness.chip import calibration_table as report
from harness.commands import add_format, deprecated
from harness.units import json_text

# checked before minutes of measuring (harness.commands.check_options)
CHECKED = {"save": "file"}
# --allow-busy saved a busy host's figures that calibrate refused (commit 28ef246); it saves
# them by default now (issue 50), so the flag stays only to keep old command lines working
ALLOW_BUSY = ("harness calibrate: --allow-busy is deprecated and does nothing: a busy host's "
              "calibration is saved with a warning (--strict refuses it)")


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true",
                   help="a few seconds: one size per figure, fewer steps")
    add_format(p, ("text", "json"))
    deprecated(p, "--json", "--format json", dest="format", action="store_const", const="json")
    p.add_argument("--strict", action="store_true",
                   help="refuse the figures when the host was busy while measuring (a "
                        "reference matmul's rate varied more than 1.5x) or its cores changed "
                        "speed (its FLOPs per CPU second moved more than 1.3x); by default "
                        "they are saved with a warning, and carry the cores' spread")
    p.add_argument("--allow-busy", action="store_true",
                   help="deprecated, does nothing: a busy host's calibration is saved anyway")
    p.add_argument("--save", type=Path, metavar="FILE",
                   help="save the calibration here instead of the cache (default: "
                        f"${cal_lib.CACHE_ENV} or ~/.cache/scaling-harness/cpu-<N>.json)")
    deprecated(p, "--out", "--save", dest="save", type=Path)


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
    if args.allow_busy:
        print(ALLOW_BUSY, file=sys.stderr)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        cal = cal_lib.calibrate(mode, args.devices, progress=progress, strict=args.strict)
    chip = cal_lib.to_chip(cal)
    path = cal_lib.save(cal, args.save)
    if args.format == "json":
        print(json_text(cal.to_dict(), indent=1))
    else:
        _print(cal, chip)
    print(f"saved: {path}")
    return 0
