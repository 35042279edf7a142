"""Reading a pod-sized profile: the whole ``harness trace`` command against xprof's ``hlo_stats``
on the same large trace, made here.

    python benchmarks/bench_large_trace.py [--format cpu|gpu] [--copies N] [--repeats 3]
                                           [--workdir DIR] [--xprof-memory-gb GB] [--json PATH]
                                           [--check [--min-ratio 3] [--max-memory-gb 1]]

The trace (not committed; kept in ``--workdir`` and reused when it is there):

- ``cpu``: made with plain ``jax.profiler`` in a fresh process: 400 steps of a jitted function
  of 60 small matmuls and 60 all-reduces over 8 CPU devices (about 130 MB).
- ``gpu``: the H100 fixture ``tests/fixtures/h100/llama_train-100m`` (a real capture: 5 steps,
  kernels on five streams, the host's Python thread) repeated.
- ``--copies N``: the trace's steps repeated N times (``large_trace_files.repeat``): every
  line's events copied N times, each copy shifted by the capture's span and its ``step_num``
  and ``run_id`` stats moved past the copies before, so each copy's steps are new steps
  (``--copies 8`` on the CPU trace: about 1 GB; ``gpu`` defaults to 100 copies, about 110 MB).

Timed in one run, each command in a fresh process, alternated ``--repeats`` times after one
untimed read of the file (page cache warm for both) and with this checkout's bytecode compiled
(as an installed package's is):

(a) ``python -m harness trace FILE --chip cpu|h100 --csv OUT`` from this checkout;
(b) xprof's ``hlo_stats`` (``xspace_to_tool_data([FILE], "hlo_stats", {})``, as
    ``tests/xprof_stats.py`` calls it) on a fresh hard link of the file in an empty folder (xprof
    caches its result beside the trace), its rows counted.

Printed: wall seconds (min and median), peak memory (the largest resident set of the command's
processes, from ``wait4``; and the peak of their proportional set sizes summed, sampled every
``SAMPLE_S``: ``harness trace`` reads lines in worker processes), the ratio (b)/(a), the host's
cores and load. A sample reads each process's ``smaps_rollup``, which walks its page tables: every
50 ms that took 1.7 s of CPU in a 7.7 s ``harness trace`` and 8.9 s in a 19 s ``hlo_stats`` (2 GB)
on a 2-core host, CPU taken from the commands timed; every 250 ms, 0.5 s and 2.8 s. xprof runs
under an address-space limit (``--xprof-memory-gb``) so that a trace too large for it fails
alone instead of taking the host's memory. A benchmark reports: exit 0 either way,
but with ``--check``, CI's guard (``tests/test_bench_large_trace.py``, slow): exit 1 where (b)/(a)
on wall minima is below ``--min-ratio``, the harness's peak memory (the larger of the two above)
is above ``--max-memory-gb``, a run of it failed or its report lacks the step's waits (every
analysis of the step path runs in the timed command).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from large_trace_files import make_cpu_trace, repeat

GPU_FIXTURE = ROOT / "tests" / "fixtures" / "h100" / "llama_train-100m"
TARGETS = {"cpu": 5.0, "gpu": 5.0}  # (b)/(a) at 100 MB and more; 10x at 1 GB
SAMPLE_S = 0.25  # between samples of the commands' proportional set sizes (module docstring)

_XPROF = """
import json, sys
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
data = xspace_to_tool_data([sys.argv[1]], "hlo_stats", {})[0]
print(len(json.loads(data)["rows"]))
"""


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def timed(argv: list[str], env: dict | None = None, limit_bytes: int | None = None) -> dict:
    """Run ``argv`` in a fresh process: wall seconds, CPU seconds (user and system, of it and
    its worker processes), the largest resident set among its processes (``wait4``), the peak
    of their summed proportional set sizes, exit status, the last line it printed (on stderr,
    where it failed) and whether its report holds the step's waits."""
    def limit():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    t0 = time.perf_counter()
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=err, preexec_fn=limit)
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(SAMPLE_S):
            peak[0] = max(peak[0], sum(_pss_kb(p) for p in _tree(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.decode(errors="replace")
    err.seek(0)
    if proc.returncode:  # what it said on stderr last, where it failed
        text = err.read()[-2000:].decode(errors="replace")
    err.close()
    last = text.strip().splitlines()[-1:] or [""]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024, "pss_mb": peak[0] / 1024,
            "rc": proc.returncode, "said": last[0][:80],
            "waits": bool(re.search(r"^waiting .* of the .* period", text, re.M))}


def summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    walls = [r["wall_s"] for r in ok]
    return {"runs": runs, "ok": len(ok), "min_s": min(walls) if walls else None,
            "median_s": statistics.median(walls) if walls else None,
            "cpu_min_s": min((r["cpu_s"] for r in ok), default=None),
            "max_rss_mb": max((r["max_rss_mb"] for r in ok), default=None),
            "pss_mb": max((r["pss_mb"] for r in ok), default=None)}


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--format", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--copies", type=int, help="repeat the trace's steps this many times "
                   "(default: 1 for cpu, 100 for gpu)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "harness-bench")
    ram_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    p.add_argument("--xprof-memory-gb", type=float, default=round(0.8 * ram_gb, 1),
                   help="address-space limit of the xprof process (default 80%% of this "
                        "host's memory; xprof holds about 15 GB at 1 GB)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--check", action="store_true",
                   help="a guard: exit 1 where (b)/(a) on wall minima is below --min-ratio, "
                        "the harness's peak memory is above --max-memory-gb, a run failed or "
                        "its report lacks the step's waits")
    p.add_argument("--min-ratio", type=float, default=3.0, help="with --check (default 3)")
    p.add_argument("--max-memory-gb", type=float, default=1.0,
                   help="with --check: the largest resident set of the harness's processes "
                        "and the peak of their summed proportional sets, GiB (default 1)")
    return p.parse_args(argv)


def large_trace(args) -> tuple[Path, int]:
    """The trace to read (made in ``args.workdir`` where it is not there yet), and its
    copies."""
    copies = args.copies or (100 if args.format == "gpu" else 1)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.format == "cpu":
        base = next(args.workdir.glob("cpu/**/*.xplane.pb"), None) or make_cpu_trace(
            args.workdir / "cpu")
    else:
        base = next(GPU_FIXTURE.rglob("*.xplane.pb"))
    trace = base
    if copies > 1:
        trace = args.workdir / f"{args.format}-x{copies}" / "host.xplane.pb"
        if not trace.exists():
            trace.parent.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            repeat(base, trace.with_suffix(".tmp"), copies).rename(trace)
            print(f"made {trace} in {time.perf_counter() - t:.0f} s")
    return trace, copies


def alternated(args, trace: Path) -> tuple[list[dict], list[dict]]:
    """(a) and (b), each in a fresh process, alternated ``args.repeats`` times."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x))
    chip = "cpu" if args.format == "cpu" else "h100"
    ours = [sys.executable, "-m", "harness", "trace", str(trace), "--chip", chip,
            "--csv", str(args.workdir / "ops.csv")]
    # this checkout's bytecode, as pip writes an installed package's: where bytecode is not
    # written (PYTHONDONTWRITEBYTECODE), a checkout's run compiles every module (0.15 s)
    for package in ("harness", "predictions"):
        compileall.compile_dir(ROOT / package, quiet=1)
    with open(trace, "rb") as f:  # one untimed read: the page cache warm for both
        while f.read(1 << 24):
            pass
    a, b = [], []
    for _ in range(args.repeats):
        a.append(timed(ours, env))
        with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
            link = Path(scratch) / "host.xplane.pb"
            os.link(trace, link)
            b.append(timed([sys.executable, "-c", _XPROF, str(link)], env,
                           int(args.xprof_memory_gb * 2**30)))
    return a, b


def peak_mb(fig: dict) -> float:
    """The harness's peak memory, MB: the larger of its largest resident set and the peak
    of its processes' proportional sets summed (its decode workers included)."""
    return max(fig["max_rss_mb"] or 0, fig["pss_mb"] or 0)


def check(args, fa: dict, fb: dict, ratio: float | None) -> list[str]:
    """The guard's failures (``--check``): none where it passes."""
    out = []
    if fa["ok"] < len(fa["runs"]) or not all(r["waits"] for r in fa["runs"]):
        out.append(f"harness trace failed or printed no waits in {len(fa['runs'])} run(s): "
                   f"{[(r['rc'], r['said']) for r in fa['runs']]}")
    if ratio is None:
        out.append("no ratio: xprof's hlo_stats failed every time")
    elif ratio < args.min_ratio:
        out.append(f"(b)/(a) {ratio:.2f}x is below {args.min_ratio:g}x")
    if fa["ok"] and peak_mb(fa) > args.max_memory_gb * 1024:
        out.append(f"harness peak memory {peak_mb(fa):.0f} MB is above "
                   f"{args.max_memory_gb:g} GiB")
    return out


def main(argv=None) -> int:
    args = _args(argv)
    trace, copies = large_trace(args)
    size_mb = trace.stat().st_size / 1e6
    cores = len(os.sched_getaffinity(0))
    print(f"trace: {trace} ({size_mb:.0f} MB, {args.format}, steps x{copies})")
    load_before = os.getloadavg()[0]
    print(f"host: {cores} cores, load average {load_before:.1f} before")
    a, b = alternated(args, trace)
    load_after = os.getloadavg()[0]
    fa, fb = summary(a), summary(b)
    for name, fig in (("(a) harness trace", fa), ("(b) xprof hlo_stats", fb)):
        if not fig["ok"]:
            print(f"{name}: failed every time ({fig['runs'][-1]})")
            continue
        print(f"{name:22s} wall min {fig['min_s']:6.2f} s, median {fig['median_s']:6.2f} s; "
              f"CPU min {fig['cpu_min_s']:6.2f} s; peak RSS {fig['max_rss_mb']:5.0f} MB, peak "
              f"PSS of its processes {fig['pss_mb']:5.0f} MB ({fig['ok']}/{len(fig['runs'])} "
              f"ran; its last line: {fig['runs'][-1]['said']!r})")
    ratio = fb["min_s"] / fa["min_s"] if fa["ok"] and fb["ok"] else None
    ratio_med = fb["median_s"] / fa["median_s"] if fa["ok"] and fb["ok"] else None
    if ratio:
        target = 10.0 if size_mb >= 900 else TARGETS[args.format]
        cpu = fb["cpu_min_s"] / fa["cpu_min_s"]
        print(f"(b)/(a): {ratio:.1f}x on wall minima, {ratio_med:.1f}x on wall medians "
              f"(target {target:g}x: {'PASS' if ratio >= target else 'MISS'}); {cpu:.1f}x on "
              f"CPU seconds")
    print(f"load average {load_after:.1f} after")
    if args.json:
        args.json.write_text(json.dumps({
            "trace": str(trace), "size_mb": size_mb, "format": args.format, "copies": copies,
            "host": {"cores": cores, "load_before": load_before, "load_after": load_after},
            "harness": fa, "xprof": fb, "ratio_min": ratio, "ratio_median": ratio_med,
            "ratio_cpu": fb["cpu_min_s"] / fa["cpu_min_s"] if ratio else None},
            indent=2) + "\n")
    if not args.check:
        return 0
    failed = check(args, fa, fb, ratio)
    print(f"check (at least {args.min_ratio:g}x on wall minima, at most "
          f"{args.max_memory_gb:g} GiB, {cores} cores): "
          + ("PASS" if not failed else "FAIL: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
