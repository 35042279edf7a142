"""Reading a pod-sized profile: the whole ``harness trace`` command against xprof's ``hlo_stats``
on the same large trace, made here.

    python benchmarks/bench_large_trace.py [--format cpu|gpu] [--copies N] [--repeats 3]
                                           [--workdir DIR] [--xprof-memory-gb GB] [--json PATH]

The trace (not committed; kept in ``--workdir`` and reused when it is there):

- ``cpu``: made with plain ``jax.profiler`` in a fresh process: 400 steps of a jitted function
  of 60 small matmuls and 60 all-reduces over 8 CPU devices (about 130 MB).
- ``gpu``: the H100 fixture ``tests/fixtures/h100/llama_train-100m`` (a real capture: 5 steps,
  kernels on five streams, the host's Python thread) repeated.
- ``--copies N``: the trace's steps repeated N times (``repeat``): every line's events copied
  N times, each copy shifted by the capture's span and its ``step_num`` and ``run_id`` stats
  moved past the copies before, so each copy's steps are new steps (``--copies 8`` on the CPU
  trace: about 1 GB; ``gpu`` defaults to 100 copies, about 110 MB).

Timed in one run, each command in a fresh process, alternated ``--repeats`` times after one
untimed read of the file (page cache warm for both) and with this checkout's bytecode compiled
(as an installed package's is):

(a) ``python -m harness trace FILE --chip cpu|h100 --csv OUT`` from this checkout;
(b) xprof's ``hlo_stats`` (``xspace_to_tool_data([FILE], "hlo_stats", {})``, as
    ``tests/xprof_stats.py`` calls it) on a fresh hard link of the file in an empty folder (xprof
    caches its result beside the trace), its rows counted.

Printed: wall seconds (min and median), peak memory (the largest resident set of the command's
processes, from ``wait4``; and the peak of their proportional set sizes summed, sampled every
50 ms: ``harness trace`` reads lines in worker processes), the ratio (b)/(a), the host's cores and
load. xprof runs under an address-space limit (``--xprof-memory-gb``) so that a trace too large
for it fails alone instead of taking the host's memory. A benchmark reports: exit 0 either way.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
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

GPU_FIXTURE = ROOT / "tests" / "fixtures" / "h100" / "llama_train-100m"
CPU_STEPS, CPU_LAYERS = 400, 60
SHIFTED = ("step_num", "run_id")  # stats renumbered in each copy
TARGETS = {"cpu": 5.0, "gpu": 5.0}  # (b)/(a) at 100 MB and more; 10x at 1 GB

_MAKE_CPU = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
out, steps, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mesh = Mesh(jax.devices(), ("x",))
@jax.jit
def f(x, w):
    for _ in range(layers):
        x = jnp.tanh(x @ w)                                  # a small matmul per device
        x = x - jnp.sum(x, axis=0, keepdims=True) * 1e-3     # an all-reduce over the 8 devices
    return x
x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("x", None)))
w = jax.device_put(jnp.ones((32, 32)) * 0.01, NamedSharding(mesh, P()))
f(x, w).block_until_ready()
with jax.profiler.trace(out):
    for step in range(steps):
        with jax.profiler.StepTraceAnnotation("step", step_num=step):
            y = f(x, w)
        y.block_until_ready()
"""

_XPROF = """
import json, sys
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
data = xspace_to_tool_data([sys.argv[1]], "hlo_stats", {})[0]
print(len(json.loads(data)["rows"]))
"""


def make_cpu_trace(folder: Path) -> Path:
    """The CPU trace, captured by plain ``jax.profiler`` in a fresh process."""
    subprocess.run([sys.executable, "-c", _MAKE_CPU, str(folder), str(CPU_STEPS),
                    str(CPU_LAYERS)], check=True, stderr=subprocess.DEVNULL)
    return next(folder.rglob("*.xplane.pb"))


def repeat(source: Path, out: Path, copies: int) -> Path:
    """Write ``source``'s trace with every line's events copied ``copies`` times, copy k
    shifted by k spans of the capture and its ``step_num`` / ``run_id`` stats by k times their
    range: k more captures of the same steps, one after another, on the same lines. One line
    is held at a time; planes are written as profilers write them (id and name, lines, then
    metadata)."""
    import numpy as np

    from harness.trace import wire
    from harness.trace.load import read_xspace
    from harness.trace.space import PLANE_LINES, SPACE_PLANES
    from harness.trace.varint import encode
    from harness.trace.xplane import XLine, XPlaneLazy

    space, _ = read_xspace(source)
    first, last, ranges, shifted = None, None, {}, {}
    for plane in space.planes:  # the capture's span; each shifted stat's range and places
        ids = {k: m.name for k, m in plane.stat_metadata.items() if m.name in SHIFTED}
        for ref in plane.lines:
            ev = wire.read_line(ref.raw()).events()
            if not len(ev):
                continue
            start = ev.timestamp_ns * 1000 + ev.offset_ps
            first = min(first if first is not None else start.min(), start.min())
            last = max(last if last is not None else 0, (start + ev.duration_ps).max())
            st = ev.stats()
            hit = np.flatnonzero(np.isin(st.metadata_id, list(ids)) &
                                 np.isin(st.kind, (wire.INT64, wire.UINT64)))
            place = hit - np.searchsorted(st.row, st.row[hit])  # its place in its event
            shifted[id(ref)] = [(int(st.row[i]), int(j), ids[int(st.metadata_id[i])])
                                for i, j in zip(hit, place)]
            for i in hit.tolist():
                name, v = ids[int(st.metadata_id[i])], int(st.value[i])
                lo, hi = ranges.get(name, (v, v))
                ranges[name] = (min(lo, v), max(hi, v))
    span_ps = int(last - first) + 10**9  # 1 ms between copies
    stride = {name: hi - lo + 1 for name, (lo, hi) in ranges.items()}
    with open(out, "wb") as f:
        for plane in space.planes:
            body = tempfile.TemporaryFile()
            for ref in plane.lines:
                raw = bytes(ref.raw())
                head = XLine.FromString(raw)
                head.ClearField("events")
                parts = [head.SerializeToString()]  # the line's own fields, then its events
                for k in range(copies):
                    line = XLine.FromString(raw)
                    for ev in line.events if k else ():
                        ev.offset_ps += k * span_ps
                    for row, place, name in shifted.get(id(ref), []) if k else ():
                        st = line.events[row].stats[place]
                        kind = st.WhichOneof("value")
                        setattr(st, kind, getattr(st, kind) + k * stride[name])
                    only = XLine()
                    only.events.extend(line.events)
                    parts.append(only.SerializeToString())
                body.write(encode(PLANE_LINES << 3 | 2) + encode(sum(map(len, parts))))
                for part in parts:  # serialized messages one after another: one message
                    body.write(part)
            head, tail = XPlaneLazy(), XPlaneLazy()
            head.CopyFrom(plane._meta)
            tail.CopyFrom(plane._meta)
            head.ClearField("event_metadata"), head.ClearField("stat_metadata")
            head.ClearField("stats"), tail.ClearField("id"), tail.ClearField("name")
            head, tail = head.SerializeToString(), tail.SerializeToString()
            f.write(encode(SPACE_PLANES << 3 | 2) + encode(len(head) + body.tell() + len(tail)))
            f.write(head)
            body.seek(0)
            while chunk := body.read(1 << 24):
                f.write(chunk)
            f.write(tail)
    return out


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
    of their summed proportional set sizes, exit status and the last line it printed."""
    def limit():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, preexec_fn=limit)
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], sum(_pss_kb(p) for p in _tree(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    last = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024, "pss_mb": peak[0] / 1024,
            "rc": proc.returncode, "said": last[0][:80]}


def summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    walls = [r["wall_s"] for r in ok]
    return {"runs": runs, "ok": len(ok), "min_s": min(walls) if walls else None,
            "median_s": statistics.median(walls) if walls else None,
            "cpu_min_s": min((r["cpu_s"] for r in ok), default=None),
            "max_rss_mb": max((r["max_rss_mb"] for r in ok), default=None),
            "pss_mb": max((r["pss_mb"] for r in ok), default=None)}


def main(argv=None) -> int:
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
    args = p.parse_args(argv)
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
    size_mb = trace.stat().st_size / 1e6
    chip = "cpu" if args.format == "cpu" else "h100"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x))
    ours = [sys.executable, "-m", "harness", "trace", str(trace), "--chip", chip,
            "--csv", str(args.workdir / "ops.csv")]
    cores = len(os.sched_getaffinity(0))
    print(f"trace: {trace} ({size_mb:.0f} MB, {args.format}, steps x{copies})")
    load_before = os.getloadavg()[0]
    print(f"host: {cores} cores, load average {load_before:.1f} before")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
