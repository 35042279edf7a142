"""``harness profile SCRIPT [ARGS...]``: run a Python script of your own under the profiler and
report every jitted program it ran, per op, against the roofline.

The script runs in this process as ``__main__`` (``sys.argv`` is the script and its arguments),
inside one ``jax.profiler`` trace; the trace is then read as ``harness trace`` reads any trace
(``harness.runs.pipeline.analyze_trace``): every program that ran, each execution a step, on
the chip its devices are (on CPU, this host's calibrated ``cpu`` chip). ``--out DIR`` stores
the run for ``harness report`` and ``harness compare``.
"""
from __future__ import annotations

import argparse
import runpy
import sys
import tempfile
from pathlib import Path

from harness import schema
from harness.commands import count
from harness.errors import HarnessError, one_line


def add_arguments(p) -> None:
    p.add_argument("script", type=Path, help="the Python script to run under the profiler")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments for the script (everything after SCRIPT)")
    p.add_argument("--chip", help="predict for this chip (default: the one the script ran on)")
    p.add_argument("--program", default="", metavar="NAME|ID|all",
                   help="report every compilation of a name, one program id, or all (default: "
                        "the step program, the most device time among programs run 3+ times)")
    p.add_argument("--top", type=count, default=20, help="op rows to print (default 20; 0 = all)")
    p.add_argument("--format", choices=schema.REPORT_FORMATS, default="text")
    p.add_argument("--out", type=Path, help="store the run (and its trace) in this directory")


def _run_script(script: Path, argv: list[str], trace_dir: Path) -> str:
    """Run ``script`` as ``__main__`` inside one trace into ``trace_dir``; what it raised, as
    one line ("" when it ran to the end or exited with status 0)."""
    import jax

    from harness.capture.steps import start_lean_trace

    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv, failure = [str(script), *argv], ""
    sys.path.insert(0, str(script.resolve().parent))
    start_lean_trace(trace_dir)
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        failure = "" if e.code in (None, 0) else f"exited with status {e.code}"
    except Exception as e:  # noqa: BLE001 - the user's script: report it, keep what ran
        failure = f"raised {type(e).__name__}: {one_line(e)}"
    finally:
        jax.profiler.stop_trace()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return failure


def main(args) -> int:
    from harness.runs import pipeline
    from harness.runs.workload import new_run_id

    if not args.script.is_file():
        raise HarnessError(f"{args.script}: no such script")
    trace_dir = Path(tempfile.mkdtemp(prefix="harness-profile-"))
    failure = _run_script(args.script, list(args.script_args), trace_dir)
    if failure:
        print(f"harness profile: {args.script} {failure}; reporting what it ran before",
              file=sys.stderr)
    if not any(trace_dir.rglob("*.xplane.pb")):
        raise HarnessError(f"{args.script}: the profiler wrote no trace (did the script run "
                           f"any JAX program?)")
    run = pipeline.analyze_trace(trace_dir, chip=args.chip, program=args.program)
    run.capture.owned = True  # the trace is ours: a stored run takes it
    print(run.render(args.format, top=args.top if args.format == "text" else None), end="")
    if args.out:
        path = run.save(args.out / new_run_id(args.script.stem))
        print(f"run: {path}")
    return 1 if failure else 0
