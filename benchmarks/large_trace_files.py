"""The large traces of ``bench_large_trace.py``: the CPU capture made by plain ``jax.profiler``
and any trace's steps repeated (``repeat``), each copy's steps new steps.

    python benchmarks/bench_large_trace.py --help    # makes them in its --workdir, reused there
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CPU_STEPS, CPU_LAYERS = 400, 60
SHIFTED = ("step_num", "run_id")  # stats renumbered in each copy

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
