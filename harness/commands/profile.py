"""``harness profile SCRIPT [ARGS...]``: run a Python script of your own under the profiler and
report every jitted program it ran, per op, against the roofline.

The script runs as it would alone, in a process of its own (``harness.capture.script``): its own
``XLA_FLAGS``, else the environment's, choose its devices (``harness --devices N profile``
forces N), and it is traced in segments of ``--segment-s`` seconds, so that a script XLA aborts
or Ctrl-C stops loses about the last one. The segments are read as one trace
(``harness.runs.script``), as ``harness trace`` reads any trace: every program that ran, each
execution a step, on the chip its devices are (on CPU, this host's ``cpu`` chip calibrated on as
many devices), its collectives' axes named after the meshes the script built. A script that
raises, exits non-zero or dies still gets the report of what it ran (exit 1); Ctrl-C stops it
and reports (exit 130). ``--out DIR`` stores the run, trace included, for ``harness report``
and ``harness compare``; otherwise the trace is removed after the report unless
``--keep-trace DIR`` keeps it.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from harness import schema
from harness.commands import add_format, count
from harness.errors import HarnessError

DEFAULT_DEVICES = None  # the script's own device count; --devices only when given (harness.cli)
# checked before the script runs (harness.commands.check_options)
CHECKED = {"chip": "chip", "out": "dir", "keep-trace": "new-dir"}


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        s = 0.0
    if not s > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return s


def add_arguments(p) -> None:
    from harness.capture.segments import SEGMENT_S

    p.add_argument("script", type=Path, help="the Python script to run under the profiler")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments for the script (everything after SCRIPT)")
    p.add_argument("--chip", metavar="CHIP",
                   help="predict for this chip (default: the one the script ran on)")
    p.add_argument("--program", default="", metavar="NAME|ID|all",
                   help="report every compilation of a name, one program id, or all (default: "
                        "the step program, the most device time among programs run 3+ times)")
    p.add_argument("--top", type=count, default=20, metavar="N",
                   help="op rows to print (default 20; 0 = all)")
    add_format(p, schema.REPORT_FORMATS)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="store the run (and its trace) in this directory")
    p.add_argument("--keep-trace", type=Path, metavar="DIR",
                   help="write the trace to DIR and keep it (default: a temporary folder, "
                        "removed after the report)")
    p.add_argument("--segment-s", type=_seconds, default=SEGMENT_S, metavar="S",
                   help=f"stop and restart the trace every S seconds: a script that dies or is "
                        f"interrupted loses about its last S (default {SEGMENT_S:g})")


def main(args) -> int:
    from harness import report
    from harness.capture.script import run_script
    from harness.runs.script import analyze_script, oom_answer
    from harness.runs.workload import new_run_name

    if not args.script.is_file():
        raise HarnessError(f"{args.script}: no such script")
    root = args.keep_trace or Path(tempfile.mkdtemp(prefix="harness-profile-"))
    try:
        ran = run_script(args.script, list(args.script_args), root, devices=args.devices,
                         segment_s=args.segment_s)
        answer = oom_answer(ran)  # out of memory: the answer, after what it ran before
        if ran.ended() and not answer:
            print(f"harness profile: {args.script} {ran.ended()}; reporting what it ran before",
                  file=sys.stderr)
        try:
            run = analyze_script(ran, chip=args.chip, program=args.program,
                                 keep=args.keep_trace is not None)
        except HarnessError as e:  # no trace, or none with an op: the script's end comes first
            if not ran.exit_code:
                raise
            print(f"{args.script}: {answer}" if answer else f"harness profile: error: {e}",
                  file=sys.stdout if answer else sys.stderr)
            return ran.exit_code
        stored = (run.save(args.out / new_run_name(args.script.stem), files=report.files)
                  if args.out else None)
        if not stored and not args.keep_trace:  # the trace goes with the temporary folder
            run.meta.pop(schema.TRACE_FILE, None)
        print(report.render(run, args.format, top=args.top if args.format == "text" else None),
              end="")
        if answer:
            print(f"{args.script}: {answer}")
        if stored:
            print(f"run: {stored}")
        if args.keep_trace:
            print(f"trace: {args.keep_trace}")
    finally:
        if args.keep_trace is None:
            shutil.rmtree(root, ignore_errors=True)
    return ran.exit_code
