"""Parser benchmark: ``load_events`` against a naive ProfileData loop on >= 1M op events.

Builds a synthetic CPU-format trace (the format with per-event stats, the costlier one to parse)
with the stats XLA's CPU runtime writes. Each op event is followed by its ``end:`` marker and two
thread-pool events: 4 events per op. Real CPU traces carry more runtime events than that (an MLP
training step on 8 virtual devices: 13,888 events for 400 op executions, ~35 per op), so the
synthetic trace understates what skipping them is worth. Each parser runs in a fresh process;
the script reports events/s, their ratio, and peak resident memory.

    python benchmarks/bench_parse.py [--events 1000000] [--format cpu|tpu]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

from harness.trace.xplane import XSpace

DEVICES = 8


def build_trace(n_events: int, trace_format: str) -> bytes:
    """``n_events`` op executions spread over 8 devices (plus one marker event per op on CPU)."""
    space = XSpace()
    if trace_format == "cpu":
        p = space.planes.add(id=1, name="/host:CPU")
        # the stats XLA's CPU runtime writes on op events and their "end:" markers
        for i, n in enumerate(["hlo_op", "hlo_module", "device_ordinal", "run_id", "step_num",
                               "program_id", "jit_step", "_src", "_pt", "_p", "_ct", "_c",
                               "thunk_executor.cc"], start=1):
            p.stat_metadata[i].name = n
        ops = [f"fusion.{k}" for k in range(200)]
        for k, name in enumerate(ops, start=100):
            p.stat_metadata[k].name = name
            p.event_metadata[k].name = name
        p.event_metadata[1].name = "end: op"
        p.event_metadata[4].name = "ThreadpoolListener::Record"
        p.event_metadata[5].name = "ThreadpoolListener::StartRegion"
        steps = n_events // (DEVICES * len(ops))
        py = p.lines.add(id=1, name="python")
        p.event_metadata[2].name = "step"
        p.event_metadata[3].name = "CommonPjRtLoadedExecutable::Execute (jit_step)"
        for s in range(steps):
            e = py.events.add(metadata_id=2, offset_ps=s * 10**9, duration_ps=10**6)
            e.stats.add(metadata_id=5, int64_value=s)
            e = py.events.add(metadata_id=3, offset_ps=s * 10**9 + 1000, duration_ps=10**5)
            e.stats.add(metadata_id=4, int64_value=1000 + s)
        for d in range(DEVICES):
            line = p.lines.add(id=10 + d, name=f"tf_XLAPjRtCpuClient/{d}")
            for s in range(steps):
                t = s * 10**9 + 10**7
                for k in range(len(ops)):
                    e = line.events.add(metadata_id=100 + k, offset_ps=t, duration_ps=2_000_000)
                    e.stats.add(metadata_id=1, ref_value=100 + k)
                    e.stats.add(metadata_id=2, ref_value=7)
                    e.stats.add(metadata_id=6, int64_value=10)
                    e.stats.add(metadata_id=4, int64_value=1000 + s)
                    e.stats.add(metadata_id=3, int64_value=d)
                    e.stats.add(metadata_id=8, ref_value=13)
                    e.stats.add(metadata_id=9, int64_value=0)
                    e.stats.add(metadata_id=10, int64_value=25769803776 + k)
                    e.stats.add(metadata_id=8, ref_value=13)
                    m = line.events.add(metadata_id=1, offset_ps=t + 2_000_000, duration_ps=1000)
                    m.stats.add(metadata_id=11, int64_value=0)
                    m.stats.add(metadata_id=12, int64_value=25769803776 + k)
                    m.stats.add(metadata_id=8, ref_value=13)
                    for tp in (4, 5):  # thread-pool bookkeeping around each op
                        r = line.events.add(metadata_id=tp, offset_ps=t + 2_001_000, duration_ps=0)
                        r.stats.add(metadata_id=9, int64_value=15)
                        r.stats.add(metadata_id=10, int64_value=52 + k)
                        r.stats.add(metadata_id=8, ref_value=13)
                    t += 3_000_000
    else:
        ops = [f"fusion.{k}" for k in range(200)]
        steps = n_events // (DEVICES * len(ops))
        for d in range(DEVICES):
            p = space.planes.add(id=d + 1, name=f"/device:TPU:{d}")
            for k, name in enumerate(ops, start=1):
                p.event_metadata[k].name = name
            p.event_metadata[1000].name = "jit_step(1)"
            st = p.lines.add(id=1, name="Steps")
            mods = p.lines.add(id=2, name="XLA Modules")
            xla = p.lines.add(id=3, name="XLA Ops")
            for s in range(steps):
                p.event_metadata[2000 + s].name = str(s)
                st.events.add(metadata_id=2000 + s, offset_ps=s * 10**9, duration_ps=9 * 10**8)
                mods.events.add(metadata_id=1000, offset_ps=s * 10**9, duration_ps=9 * 10**8)
                for k in range(len(ops)):
                    xla.events.add(metadata_id=1 + k, offset_ps=s * 10**9 + k * 3_000_000,
                                   duration_ps=2_000_000)
    return space.SerializeToString()


def naive(path: str):
    """The obvious loop: every event of every line into a dict, ops kept, then a DataFrame."""
    import pandas as pd
    from jax.profiler import ProfileData

    rows = []
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                op = stats.get("hlo_op") or (ev.name if line.name == "XLA Ops" else None)
                if op:
                    rows.append({"program": stats.get("hlo_module"), "op": op,
                                 "device": stats.get("device_ordinal", plane.name),
                                 "run_id": stats.get("run_id"), "start_ns": ev.start_ns,
                                 "duration_ns": ev.duration_ns})
    return pd.DataFrame(rows)


def ours(path: str):
    from harness.trace.load import load_events

    return load_events(path)


def _vm_hwm() -> int:
    """Peak resident set of this process in bytes (Linux VmHWM; ru_maxrss outlives exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _child(fn_name: str, path: str, q):
    fn = {"naive": naive, "load_events": ours}[fn_name]
    if fn_name == "load_events":
        import harness.trace.load  # noqa: F401  (imports are not parse time)
    else:
        import jax.profiler  # noqa: F401
        import pandas  # noqa: F401
    base = _vm_hwm()
    t0 = time.perf_counter()
    df = fn(path)
    dt = time.perf_counter() - t0
    q.put((dt, len(df), base, _vm_hwm()))


def measure(fn_name: str, path: str) -> tuple[float, int, int, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn_name, path, q))
    proc.start()
    result = q.get()
    proc.join()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--format", choices=["cpu", "tpu"], default="cpu")
    a = ap.parse_args()
    t0 = time.perf_counter()
    data = build_trace(a.events, a.format)
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "bench.xplane.pb")
        Path(path).write_bytes(data)
        print(f"synthetic {a.format} trace: {len(data) / 1e6:.1f} MB, built in "
              f"{time.perf_counter() - t0:.1f} s")
        results = {name: measure(name, path) for name in ("naive", "load_events")}
    for name, (dt, n, base, peak) in results.items():
        print(f"{name:12s} {n:>9,d} op events in {dt:6.2f} s = {n / dt:>12,.0f} events/s, "
              f"peak RSS {peak / 1e6:7.0f} MB (after imports {base / 1e6:.0f} MB)")
    ratio = results["naive"][0] / results["load_events"][0]
    print(f"speed-up over naive: {ratio:.1f}x (target >= 5x); "
          f"load_events peak RSS {results['load_events'][3] / 1e9:.2f} GB (target < 1 GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
