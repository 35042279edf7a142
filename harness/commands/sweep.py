"""``harness sweep FILE``: run a grid of workloads from a TOML sweep file, resumably.

Exit codes: 0 every point ran, 1 some points failed (listed), 2 a malformed file or bad option,
130 interrupted (resume with ``--resume``).
"""
from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
from pathlib import Path

from rich import progress as rp
from rich.console import Console
from rich.markup import escape

from harness.commands import add_distributed_arguments, add_no_compile_cache, in_job
from harness.errors import HarnessError
from harness.report import tables
from harness.sweep import report as sweep_report
from harness.sweep import resume
from harness.sweep import run as sweep
from harness.sweep.grid import load_sweep

# checked before the file is read (harness.commands.check_options)
CHECKED = {"out": "dir"}


def add_arguments(p) -> None:
    p.add_argument("file", type=Path, help="sweep file (TOML); examples in sweeps/")
    p.add_argument("--out", type=Path, default=Path("results") / "sweeps", metavar="DIR",
                   help="where the sweep's directory <name>-<timestamp>/ is made "
                        "(default results/sweeps)")
    p.add_argument("--resume", nargs="?", const=resume.LATEST, default=None, metavar="DIR",
                   help="continue a sweep: its directory, or without DIR the newest sweep of "
                        "this name under --out; done points are skipped, failed ones rerun")
    p.add_argument("--point-plots", action=argparse.BooleanOptionalAction, default=True,
                   help="draw each point's step, roofline and category plots on its page "
                        "(default; the summary says what they cost); the sweep's own plots are "
                        "drawn once, at the end")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the file and list the expanded points; run nothing")
    add_no_compile_cache(p, "JAX's persistent compilation cache in the harness's cache "
                            "directory")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each point N times, each in a fresh process, points interleaved: "
                        "the spread between them is each point's own noise for harness "
                        "compare (default 1)")
    add_distributed_arguments(p)


def _progress():
    return rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(),
                       rp.MofNCompleteColumn(), rp.TimeElapsedColumn(),
                       console=Console(stderr=True), transient=False)


def main(args) -> int:
    if args.distributed and not args.dry_run:  # join first: the grid counts the job's devices
        if args.compile_cache:
            from harness.runs import compile_cache

            compile_cache.enable()
        return in_job(args, "sweep", lambda cluster: _in_job(args, load_sweep(args.file),
                                                             cluster))
    grid = load_sweep(args.file)
    if args.repeat < 1:
        raise HarnessError(f"--repeat {args.repeat}: must be 1 or more")
    if args.dry_run:
        statuses = (None if args.resume is None
                    else resume.statuses(resume.sweep_dir(grid, args.out, args.resume)))
        print(tables.to_text(resume.points_table(grid, statuses),
                             title=f"sweep {grid.name}: {len(grid.points)} points"), end="")
        print(f"{args.file}: valid, {len(grid.points)} points")
        return 0
    if args.compile_cache:
        from harness.runs import compile_cache

        compile_cache.enable()
    return _run(args, grid, resume.sweep_dir(grid, args.out, args.resume), sweep.run_sweep)


def _in_job(args, grid, cluster) -> int:
    """One process of a sweep across a multi-process job: process 0 runs and stores it, the
    others run the points it names (``harness.multihost.sweep``)."""
    from harness.multihost import sweep as job

    if cluster.process_index == 0:
        code = _run(args, grid, resume.sweep_dir(grid, args.out, args.resume),
                    lambda *a, **kw: job.lead(*a, cluster=cluster, **kw))
    else:
        ran, stored = job.follow(grid, cluster)
        print(f"process {cluster.process_index} of {cluster.process_count}: ran {ran} "
              f"point(s) with process 0, which stored {stored}", flush=True)
        code = 0
    job.finish(cluster)
    return code


def _run(args, grid, sweep_dir: Path, run_sweep) -> int:
    """Run the sweep in ``sweep_dir`` with ``run_sweep`` (on this host, or led across a job),
    with progress on stderr and the summary table on stdout."""
    print(f"sweep {grid.name}: {len(grid.points)} points in {sweep_dir}", file=sys.stderr)
    interrupted = []

    def on_sigint(signum, frame):
        # Python drops a KeyboardInterrupt raised inside a weakref callback or __del__ (jax
        # runs many), so remember it too and stop at the next point boundary at the latest.
        interrupted.append(signum)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        with _progress() as progress:
            task = progress.add_task(grid.name, total=len(grid.points) * args.repeat)

            def on_event(e: sweep.Event) -> None:
                if interrupted:
                    raise KeyboardInterrupt
                if e.kind == "start":
                    progress.update(task, description=escape(
                        f"{e.index + 1}/{e.total} {e.point.label}"))
                    return
                progress.advance(task)
                if e.kind in (sweep.FAILED, sweep.OOM):
                    progress.console.print(escape(f"point {e.index + 1} failed: "
                                                  f"{e.record['error']}"))

            result = run_sweep(grid, sweep_dir, on_event=on_event, point_plots=args.point_plots,
                               **({"repeat": args.repeat} if args.repeat > 1 else {}))
            progress.update(task, description=escape(f"sweep {grid.name}"))
    except KeyboardInterrupt:
        print(f"harness sweep: interrupted; resume with: harness sweep {args.file} "
              f"--resume {sweep_dir}", file=sys.stderr)
        return 130
    except OSError as e:
        raise HarnessError(f"{sweep_dir}: {e}") from None
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    # a terminal: fit its width; a log: one line per point
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    shown = sweep_report.by_workload(result.summary)
    spread = sweep_report.spread(result.summary)  # the host's, on CPU (harness.chip.spells)
    for name, table in shown:
        print(tables.to_text(table, title=f"sweep {grid.name}: {name}", width=width,
                             spread=spread), end="")
    columns = dict.fromkeys(c for _, table in shown for c in table.columns)
    print(tables.legend_text(list(columns), width=min(width or 100, 100), spread=spread))
    for line in sweep_report.headline(result.summary):
        print(line)
    if sweep_report.timing(result.records):
        print(sweep_report.timing(result.records))
    for note in sweep_report.impossible_notes(result.summary):
        print(f"note: {note}")
    for rec in result.failed:
        print(f"failed: point {rec['index'] + 1}, {rec['label']}: {rec['error']}")
    done = sum(r["status"] == sweep.DONE for r in result.records)
    print(f"{done} of {len(result.records)} points done, {len(result.failed)} failed "
          f"({result.ran} run now, {len(result.records) - result.ran} already done)")
    print(f"report: {result.report}")
    return 1 if result.failed else 0
