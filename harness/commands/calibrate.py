"""``harness calibrate``: measure this host's peaks with XLA and save them as the ``cpu`` chip.

    harness calibrate            # full calibration of --devices N (default 8) virtual devices
    harness calibrate --quick    # a few seconds, what a run performs when none is saved
    harness calibrate --json --out cal.json

Prints one device alone against all N busy, the ``cpu`` chip the figures make, the caveat about
shared cores, and where the calibration was saved (``harness.calibrate.cache_path``).
"""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.chip import calibration as cal_lib
from harness.errors import HarnessError
from harness.units import fmt_seconds, fmt_si


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true",
                   help="a few seconds: one size per figure, fewer steps")
    p.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    p.add_argument("--allow-busy", action="store_true",
                   help="save the figures even when the host was busy while measuring (a "
                        "reference matmul's rate varied more than 1.5x)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="save here instead of the cache (default: "
                        f"${cal_lib.CACHE_ENV} or ~/.cache/scaling-harness/cpu-<N>.json)")


def _rate(x: float | None, unit: str) -> str:
    """A measured rate with an SI prefix; "-" where none was measured."""
    return fmt_si(x, unit) if x else "-"


def _time(x: float | None) -> str:
    """A measured time; "-" where none was measured."""
    return fmt_seconds(x) if x else "-"


def rows(cal: cal_lib.Calibration) -> list[tuple[str, str, str]]:
    """(figure, one device alone, all N busy) per measured figure, with units."""
    one, all_ = cal.one, cal.all
    out = []
    for dt in cal_lib.DTYPES:
        out.append((f"matmul {dt}", _rate(one.flops_per_s.get(dt), "FLOP/s"),
                    _rate(all_.flops_per_s.get(dt), "FLOP/s")))
        out.append((f"  (step wall clock, {dt})",
                    _rate(one.flops_per_s_wall.get(dt), "FLOP/s"),
                    _rate(all_.flops_per_s_wall.get(dt), "FLOP/s")))
    out.append(("memory stream (x*a+b)", _rate(one.memory_bytes_per_s, "B/s"),
                _rate(all_.memory_bytes_per_s, "B/s")))
    out.append(("  (step wall clock)", _rate(one.memory_bytes_per_s_wall, "B/s"),
                _rate(all_.memory_bytes_per_s_wall, "B/s")))
    out.append(("bf16 -> f32 convert", _rate(one.convert_bytes_per_s, "B/s"),
                _rate(all_.convert_bytes_per_s, "B/s")))
    out.append(("per-op overhead (a tiny op)", _time(one.op_overhead_s),
                _time(all_.op_overhead_s)))
    for kind in cal_lib.RING:
        out.append((f"{kind} bandwidth W", _rate(one.collective_bytes_per_s.get(kind), "B/s"),
                    _rate(all_.collective_bytes_per_s.get(kind), "B/s")))
        out.append((f"{kind} latency per hop", _time(one.collective_latency_s.get(kind)),
                    _time(all_.collective_latency_s.get(kind))))
    return out


def _print(cal: cal_lib.Calibration, chip) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    n = cal.device_count
    table = Table(title=f"{cal.cpu_model}, {cal.cores} cores, {n} virtual devices "
                        f"({cal.mode} calibration, {cal.seconds:.1f} s)", title_justify="left")
    table.add_column("per device")
    table.add_column("one device alone" if n > 1 else "one device", justify="right")
    table.add_column(f"all {n} busy (collectives: group of {cal.all.group})"
                     if n > 1 else "-", justify="right")
    for row in rows(cal):
        table.add_row(*row)
    console.print(table)
    print("Per-op times from the XLA profiler; the wall-clock rows divide by the whole step's "
          "span instead. One device alone: collectives over a pair, the other devices idle.")
    print(f"The `cpu` chip takes the all-{n}-busy column: "
          f"{_rate(chip.flops_per_s('fp32'), 'FLOP/s')} fp32, "
          f"{_rate(chip.flops_per_s('bf16'), 'FLOP/s')} bf16, "
          f"{_rate(chip.hbm_bytes_per_s, 'B/s')} memory, "
          f"ring W {_rate(chip.ici_bytes_per_s, 'B/s')}, {_time(chip.hop_latency_s)} per hop.")
    print(f"Caveat: {cal_lib.NOTE.format(n=n, cores=cal.cores)}. Treat collective predictions "
          f"on CPU as a check of the pipeline, not of an interconnect.")


def main(args) -> int:
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        why = "is a directory" if args.out.is_dir() else f"{args.out.parent} is not a directory"
        raise HarnessError(f"--out {args.out}: {why}; give a file path like cpu.json "
                           "in an existing directory")  # before minutes of measuring
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
