"""The programs ``harness calibrate`` times: matmuls, in-place streams, collective chains.

Each builder returns a ``Program`` (a jitted function, its arguments and the work per op);
``measure`` runs one under the profiler through the same ``capture -> load_events`` pipeline
that ``harness run`` uses and returns a ``Sample`` of the op's time. XLA:CPU picks a matmul
kernel by layout (``x @ w`` runs as a YNNPACK ``ynn_fusion`` in jax 0.10, ``x.T @ w`` through its
own ``dot`` emitter), so the matmul probes differ by layout; which kernel each compiled to is
read from its HLO (``harness.chip.kernel_probes``), and each sample names the kernel it timed.
"""
from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd

from harness import schema
from harness.capture.steps import capture
from harness.errors import HarnessError
from harness.measure.shares import apart_by_opcode, host_shares
from harness.trace.load import load_events
from predictions import dtypes

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

DTYPES = ("fp32", "bf16")  # the book dtypes whose matmul peak is measured
# bf16 -> f32 convert size per device: 1.5 MB moved, in cache like most ops of a run. Measured
# here (8 devices busy, 2 cores): 10, 2.5, 6.8, 1.9, 0.46 GB/s at 2^14 .. 2^22 elements, 3-20x
# below an in-place stream of the same size; beyond the cache a fresh f32 buffer's page
# faults slow it further, so large converts run slower than this rate predicts.
CONVERT_ELEMENTS = 1 << 18
# The per-op overhead programs: in-place streams this small (64 to 1024 bytes, a few ns of
# memory traffic) take the runtime's fixed cost per op execution and nothing else; the median
# over five sizes steadies a figure single programs put anywhere in 0.55-1.0 us here. XLA runs
# a one-device program this small inline, untraced: one device gets none.
OVERHEAD_ELEMENTS = (16, 32, 64, 128, 256)
# predictions.collectives' CPU ring (gpus.md's ring, AllReduce = 2x AllGather):
# t_bw = RING*V*(g-1)/(g*W), t_lat = RING*(g-1)*hop latency
RING = {"all-gather": 1, "all-reduce": 2}


@dataclass(frozen=True)
class Sample:
    """One measured program: ``work`` (FLOPs or bytes) per device per op, ``op_s`` the op's time,
    ``span_s`` the step's span (first op start to last op end) per op."""

    kind: str  # a BUILDERS key
    scope: str  # "one" | "all"
    dtype: str
    size: int  # matmul n, stream elements or collective bytes V
    role: str  # "peak" | "latency" | "bandwidth" | "overhead"
    work: float
    op_s: float
    span_s: float
    kernel: str = ""  # a matmul's kernel (harness.hlo.kernels); dtype: the kernel's own


# --- what runs: one program per sample ---------------------------------------------------------
class Program(NamedTuple):
    """``opcodes``: the ops to time (empty: the longest op); ``carry`` feeds outputs back;
    ``shared``: timed as host shares (``harness.measure.shares``), as a run on CPU times its ops."""

    fn: Callable
    args: tuple
    work: float
    opcodes: tuple[str, ...] = ()
    carry: Callable | None = None
    chain: int = 1
    shared: bool = False


def _mesh(devices):
    import jax

    return jax.make_mesh((len(devices),), ("X",), devices=devices,
                         axis_types=(jax.sharding.AxisType.Auto,))


def _ones(mesh, shape, dtype, spec, value: float = 1.0):
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda: jnp.full(shape, value, getattr(jnp, dtype)),  # made on each device
                   out_shardings=jax.sharding.NamedSharding(mesh, spec))()


# The matmul probes, by layout: each device's own [n,n] @ [n,n], its left operand as stored
# (x @ w) or transposed (x.T @ w, a weight gradient's layout)
MATMULS: dict[str, Callable] = {
    "matmul": lambda x, w: x @ w,
    "matmul-tn": lambda x, w: x.T @ w,
}


# Every device runs a chain of ``chain`` dependent matmuls, whatever their size, after a
# one-element all-reduce that every device's program must reach before any goes on: the
# devices' chains run at once, their threads sharing the cores, as a run's sharded step does
# (its collectives keep every device's program in flight). Without it XLA:CPU ran the devices'
# programs a few at a time: a 512x512 matmul took 3 ms with the host nearly to itself, against
# 10-13 ms each when eight run at once, as in a run; chained after the all-reduce they take
# 11-14 ms, share and duration alike. Each op's time is as a run's (``harness.measure.shares``:
# its host share, or its duration where less and shorter than a scheduler slice); the chain's,
# per step the median over it, then the best step.


def _matmul(layout: str) -> Callable[..., Program]:
    def build(devices, dtype, n, chain) -> Program:
        import jax
        from jax.sharding import PartitionSpec as P

        m, k = _mesh(devices), len(devices)  # data parallel: each device its own matmul
        name = dtypes.numpy_name(dtype)  # book name -> jax.numpy name
        # w = 1/n everywhere (exact for n a power of two): x stays all ones along the chain
        args = (_ones(m, (k * n, n), name, P("X", None)), _ones(m, (n, n), name, P(), 1 / n))

        def body(x, w):
            x = x * (jax.lax.psum(x[:1, :1], "X") / k)  # all ones still (module note)
            for _ in range(chain):  # the barrier keeps each matmul its own op (a YNNPACK fusion
                x = jax.lax.optimization_barrier(MATMULS[layout](x, w))  # would take them all)
            return x

        fn = jax.jit(jax.shard_map(body, mesh=m, in_specs=(P("X", None), P()),
                                   out_specs=P("X", None)))
        # every device's matmul runs at once, queued on the host's shared thread pool: timed
        # as shares
        return Program(fn, args, 2.0 * n ** 3, shared=True, chain=chain)  # roofline.md: 2BDF
    return build


def _stream(devices, dtype, elements, chain) -> Program:
    import jax
    from jax.sharding import PartitionSpec as P

    x = _ones(_mesh(devices), (len(devices) * elements,), "float32", P("X"))
    fn = jax.jit(lambda x: x * 0.5 + 0.5, donate_argnums=0)  # in place; tends to 1, no denormals
    # roofline.md: bytes = read x + write the result
    return Program(fn, (x,), 2.0 * dtypes.nbytes("float32") * elements,
                   carry=lambda args, out: (out,))


def _convert(devices, dtype, elements, chain) -> Program:
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    x = _ones(_mesh(devices), (len(devices) * elements,), "bfloat16", P("X"))
    # bf16 -> f32, as a training step's casts: bytes = read 2 + write 4 per element
    nbytes = float(dtypes.nbytes("bfloat16") + dtypes.nbytes("float32"))
    return Program(jax.jit(lambda x: x.astype(jnp.float32)), (x,), nbytes * elements)


def _collective(kind: str) -> Callable[..., Program]:
    def build(devices, dtype, nbytes, chain) -> Program:
        import jax
        from jax.sharding import PartitionSpec as P

        g, gather = len(devices), kind == "all-gather"
        per_dev = max(1, nbytes // (4 * (g if gather else 1)))  # f32 elements held per device

        def body(x):  # each collective depends on the previous one: none can merge or overlap
            for _ in range(chain):
                x = (x + jax.lax.all_gather(x, "X", tiled=True)[: x.shape[0]] if gather
                     else jax.lax.psum(x, "X") * (1.0 / g))
            return x

        m = _mesh(devices)
        fn = jax.jit(jax.shard_map(body, mesh=m, in_specs=P("X"), out_specs=P("X")))
        V = 4.0 * per_dev * (g if gather else 1)  # bytes after the gather / being reduced
        return Program(fn, (_ones(m, (g * per_dev,), "float32", P("X")),), V,
                       (kind, f"{kind}-start"), chain=chain)
    return build


BUILDERS: dict[str, Callable[..., Program]] = {
    **{layout: _matmul(layout) for layout in MATMULS}, "stream": _stream, "convert": _convert,
    "all-reduce": _collective("all-reduce"), "all-gather": _collective("all-gather")}


def _opcodes(hlo_text: str) -> dict[str, str]:
    """ENTRY instruction name -> opcode in compiled HLO text."""
    entry = hlo_text[hlo_text.find("\nENTRY"):]
    return dict(re.findall(r"%([\w.\-]+) = (?:\([^=]*?\)|\S+) ([\w\-]+)\(", entry))


@contextlib.contextmanager
def outside_user_mesh() -> Iterator[None]:
    """No mesh context (``jax.set_mesh(None)``) for the harness's own programs (these probes,
    the host-speed reference), whatever mesh the caller set around ``harness.analyze``: their
    arrays are laid out on meshes of their own, which an explicit-axes context would refuse."""
    import jax

    with jax.set_mesh(None):
        yield


def measure(kind, scope, dtype, size, role, devices, sizes) -> Sample:
    """One program under the profiler. The op's time: per step the median over devices (a
    ``shared`` program: the mean of host shares, as a run measures ops on CPU, ``_per_op``),
    then the best step; a chain of collectives, per step the median over its ops, then the
    best step (``best_step``).

    Only the matmul is timed as shares. The other programs run one short op per device per
    step, dispatched device after device, so their ops hardly overlap and a share would charge
    each with a host that sat idle; in a run, such ops run beside the other devices' ops, where
    a share is the op's own duration (``harness.measure.shares``)."""
    with outside_user_mesh():
        prog = BUILDERS[kind](devices, dtype, size, sizes.chain)
        return measure_program(prog, kind, scope, dtype, size, role, sizes)


def _per_op(ev, shared: bool, codes: dict[str, str]) -> pd.Series:
    """Each op's time in each step, indexed (op, step): the median over devices of its
    duration; a ``shared`` program's, the mean over devices of its time on the host as a run
    on CPU measures its ops (``harness.measure.shares``: its share, or its duration where less
    and the share is shorter than a scheduler slice)."""
    column, how = (schema.HOST_NS, "mean") if shared else (schema.DURATION_NS, "median")
    if shared:
        ev = host_shares(ev, apart_by_opcode(codes))
    return (ev.groupby([schema.OP, schema.STEP, schema.DEVICE], observed=True)[column].sum()
            .groupby(level=[0, 1]).agg(how))


def best_step(per: pd.Series, chain: bool) -> float:
    """The time of ``_per_op``'s ops: a ``chain``'s, per step the median over its ops, then the
    best step (``measure_program``); else the longest op's best step."""
    if chain:
        return float(per.groupby(level=1).median().min())
    return float(per.groupby(level=0).min().max())


def measure_program(prog, kind, scope, dtype, size, role, sizes,
                    ops: tuple[str, ...] = ()) -> Sample:
    """``prog`` under the profiler, as ``measure``; ``ops``: the ops to time (a matmul chain's).
    A chain's time is, per step, the median over its ops, then the best step: the ops of one
    step share the host between them, so the best step bounds them all, where each op's own
    best step would pick for each the step it happened to run beside the fewest others."""
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        cap = capture(prog.fn, prog.args, warmup=1, steps=sizes.steps, out_dir=tmp,
                      carry=prog.carry)
        ev = load_events(cap.trace_dir)
    by_step = ev.assign(end=ev[schema.START_NS] + ev[schema.DURATION_NS]).groupby(schema.STEP)
    span_ns = (by_step["end"].max() - by_step[schema.START_NS].min()).median()
    codes = _opcodes(cap.hlo_text)
    per = _per_op(ev, prog.shared, codes)
    names = per.index.get_level_values(0).astype(str)
    if prog.opcodes:
        per = per[[codes.get(op) in prog.opcodes for op in names]]
        if per.empty:
            raise HarnessError(f"calibration: no {kind} op in the trace of {cap.program}")
    if ops:  # the matmuls' own ops, not the converts around them
        per = per[[op in ops for op in per.index.get_level_values(0).astype(str)]]
        if per.empty:
            raise HarnessError(f"calibration: no op {ops[0]} in the trace of {cap.program}")
    op_ns = best_step(per, chain=bool(prog.opcodes or ops))
    return Sample(kind, scope, dtype, int(size), role, prog.work, float(op_ns) * 1e-9,
                  float(span_ns) * 1e-9 / prog.chain)
