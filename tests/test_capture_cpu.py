"""A real sharded matmul captured on 8 virtual CPU devices."""
import re

import numpy as np
import pytest

from harness import schema
from harness.capture.steps import CAPTURE_FILE, HLO_FILE, capture
from harness.measure.ops import op_times
from harness.trace.load import load_events


@pytest.fixture(scope="module")
def matmul_capture(tmp_path_factory):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
    # sharding.md case 3: both operands sharded on the contracting dim -> partial sums + AllReduce
    x_BD = jax.device_put(jnp.ones((128, 512), jnp.float32), NamedSharding(mesh, P(None, "X")))
    w_DF = jax.device_put(jnp.ones((512, 256), jnp.float32), NamedSharding(mesh, P("X", None)))
    f = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P()))
    return capture(f, (x_BD, w_DF), warmup=1, steps=3, out_dir=tmp_path_factory.mktemp("cap"),
                   mesh=mesh)


def _entry_instructions(hlo_text):
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    return dict(re.findall(r"%([\w.\-]+) = \S+ ([\w\-]+)\(", entry))


def test_every_device_runs_the_dot_fusion_and_the_all_reduce(matmul_capture):
    events = load_events(matmul_capture.trace_dir)
    instrs = _entry_instructions(matmul_capture.hlo_text)
    collectives = {n for n, opc in instrs.items() if opc == "all-reduce"}
    fusions = {n for n, opc in instrs.items() if opc == "fusion"}
    assert collectives and fusions, instrs
    program = matmul_capture.program
    for device in range(8):
        mine = events[(events[schema.DEVICE] == device)]
        names = set(mine[schema.OP])
        assert collectives <= names, (device, names)
        assert names & fusions, (device, names)
        assert set(mine[schema.PROGRAM]) == {program}
    assert sorted(events[schema.STEP].unique()) == [0, 1, 2]  # warm-up not traced


def test_op_names_in_trace_match_compiled_hlo(matmul_capture):
    ops = op_times(load_events(matmul_capture.trace_dir))
    instrs = _entry_instructions(matmul_capture.hlo_text)
    assert set(ops[schema.OP]) <= set(instrs), (set(ops[schema.OP]) - set(instrs))
    assert (ops[schema.DEVICES] == 8).all()
    assert (ops[schema.MEASURED_S] > 0).all()
    assert (ops[schema.MEASURED_MIN_S] <= ops[schema.MEASURED_S]).all()
    assert (ops[schema.MEASURED_S] <= ops[schema.MEASURED_MAX_S]).all()


def test_capture_saves_hlo_cost_analysis_and_meta(matmul_capture):
    d = matmul_capture.trace_dir
    assert (d / HLO_FILE).read_text() == matmul_capture.hlo_text
    assert (d / CAPTURE_FILE).exists()
    meta = matmul_capture.meta
    assert meta["device_count"] == 8 and meta["backend"] == "cpu"
    assert meta["mesh"] == {"X": 8}
    # per-device dot: [128, 64] @ [64, 256] -> 2 * 128 * 64 * 256 FLOPs (plus the all-reduce adds)
    assert matmul_capture.cost_analysis["flops"] >= 2 * 128 * 64 * 256


def test_single_device_program_is_captured(tmp_path):
    # single-device dispatch names no run_id on the host; ops are tied to steps by time
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda a: jnp.tanh(a @ a))
    cap = capture(f, (jnp.ones((128, 128)),), warmup=1, steps=3, out_dir=tmp_path)
    events = load_events(cap.trace_dir)
    assert sorted(events[schema.STEP].unique()) == [0, 1, 2]
    assert set(events[schema.DEVICE]) == {0}
    instrs = _entry_instructions(cap.hlo_text)
    assert set(events[schema.OP]) <= set(instrs)
    assert (op_times(events)[schema.COUNT] == 1).all()


def test_capture_times_each_traced_step_with_a_lean_profiler(matmul_capture):
    import statistics

    from harness.analysis.tables import _step_s
    from harness.capture.steps import LEAN_PROFILE, lean_profile_options

    opts = lean_profile_options()  # jax 0.10 has ProfileOptions with both fields
    assert opts is not None
    assert {k: getattr(opts, k) for k in LEAN_PROFILE} == {"python_tracer_level": 0,
                                                           "host_tracer_level": 1}
    times = matmul_capture.meta["step_times_s"]  # untraced, after the trace
    assert len(times) == 3 and all(t > 0 for t in times)
    assert len(matmul_capture.meta["traced_step_times_s"]) == 3
    assert matmul_capture.meta["trace_stop_s"] > 0
    # MFU's step is their median, not the timeline's step (the other tests find the ops traced)
    assert _step_s(times, {"step_s": 1.0}, None) == statistics.median(times)


def test_cpu_ops_are_timed_as_their_share_of_the_host(matmul_capture):
    """On CPU an op's time is its share of the host (harness.measure.shares): the shares of every op
    on every device add up to D x the time any op was running, the union of all op intervals,
    taken here from the raw events by sorting and merging (a collective running from the last
    arrival of its execution, harness.measure.arrivals: before it, it waits). An execution
    shorter than a scheduler slice is timed by its duration where less, so the per-step samples
    (means over the 8 devices of those times) add up to that union less what the short ones'
    shares charged for idle cores."""
    from harness.measure.arrivals import arrivals
    from harness.measure.shares import SLICE_NS, host_shares
    from harness.runs.pipeline import from_capture

    a = from_capture(matmul_capture, chip="h100")
    running = a.events[schema.START_NS].copy()
    waits = arrivals(a.events)
    running[waits.index] = waits[schema.LAST_ARRIVE_NS].clip(upper=waits[schema.END_NS])
    ev = a.events.assign(**{schema.START_NS: running, "end": a.events[schema.START_NS]
                            + a.events[schema.DURATION_NS]}).sort_values(schema.START_NS)
    union_ns, reach = 0, -1
    for s, e in zip(ev[schema.START_NS], ev["end"]):
        if e > reach:
            union_ns += e - max(s, reach)
            reach = e
    assert (a.ops[schema.DEVICES] == 8).all()  # every op on all 8: mean over 8 = sum / 8
    timed = host_shares(a.events)  # the run's collectives span all 8 devices; no containers
    share, host = timed[schema.SHARE_NS], timed[schema.HOST_NS]
    assert share.sum() / 8 == pytest.approx(union_ns, rel=1e-3)
    short = share < SLICE_NS
    assert (host[~short] == share[~short]).all()
    assert (host[short] == np.minimum(share, timed[schema.DURATION_NS])[short]).all()
    idle = (share - host).sum() / 8
    assert a.steps[schema.MEASURED_S].sum() == pytest.approx((union_ns - idle) * 1e-9, rel=1e-3)
    assert a.meta[schema.OP_TIMING] == "host_time"  # so compare can tell the rules apart


def test_each_run_says_what_tracing_cost_it(matmul_capture):
    """``trace_overhead`` is the median traced step over the median untraced one, from the two
    timings the capture kept; traced steps 1.5x slower than untraced ones make a note."""
    import dataclasses
    import statistics

    from harness.analysis.tables import TRACE_NOTE
    from harness.runs.pipeline import from_capture

    meta = matmul_capture.meta
    a = from_capture(matmul_capture, chip="h100")
    expected = (statistics.median(meta["traced_step_times_s"])
                / statistics.median(meta["step_times_s"]))
    assert a.summary[schema.TRACE_OVERHEAD] == pytest.approx(expected)
    slowed = dataclasses.replace(matmul_capture, meta={
        **meta, "traced_step_times_s": [1.5 * t for t in meta["step_times_s"]]})
    b = from_capture(slowed, chip="h100")
    assert b.summary[schema.TRACE_OVERHEAD] == pytest.approx(1.5) and 1.5 > TRACE_NOTE
    assert any("tracing slowed each step 1.50x" in n for n in b.notes)
    same = dataclasses.replace(matmul_capture, meta={
        **meta, "traced_step_times_s": list(meta["step_times_s"])})
    c = from_capture(same, chip="h100")
    assert c.summary[schema.TRACE_OVERHEAD] == pytest.approx(1.0)
    assert not any("tracing slowed" in n for n in c.notes)
    # a trace captured elsewhere has no step timings: no figure
    bare = dataclasses.replace(matmul_capture, meta={
        k: v for k, v in meta.items() if k not in ("step_times_s", "traced_step_times_s")})
    assert schema.TRACE_OVERHEAD not in from_capture(bare, chip="h100").summary
