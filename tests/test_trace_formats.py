"""Per-op medians on synthetic TPU, GPU and CPU traces, worked out by hand."""
import pytest
from xspace_text import plane, serialize

from harness import schema
from harness.measure.ops import op_times, step_samples
from harness.trace.load import load_events, read_events

US = 1000  # ns


def _row(ops, op):
    rows = ops[ops[schema.OP] == op]
    assert len(rows) == 1, ops
    return rows.iloc[0]


def tpu_device(n, fusion_us, ar_pairs_us):
    """One TPU plane: a warm-up execution at t=0, then three steps 1000 us apart.

    ``fusion_us``: fusion.1's duration in steps 0..2; ``ar_pairs_us``: all-reduce.2 runs twice
    per step.
    """
    steps = [(str(s), (1 + s) * 1000 * US, 900 * US, {}) for s in range(3)]
    modules = [("jit_step(7)", 0, 500 * US, {})]
    ops = [("fusion.1", 10 * US, 999 * US, {}), ("all-reduce.2", 100 * US, 999 * US, {})]  # warm-up
    for s in range(3):
        t0 = (1 + s) * 1000 * US
        modules.append(("jit_step(7)", t0, 800 * US, {}))
        ops.append(("fusion.1", t0 + 10 * US, fusion_us[s] * US, {}))
        a, b = ar_pairs_us[s]
        ops.append(("all-reduce.2", t0 + 200 * US, a * US, {}))
        ops.append(("all-reduce.2", t0 + 400 * US, b * US, {}))
    return plane(f"/device:TPU:{n}", {"Steps": steps, "XLA Modules": modules, "XLA Ops": ops},
                 plane_id=n + 1)


@pytest.fixture
def tpu_trace():
    return serialize(
        tpu_device(0, [10, 30, 20], [(5, 5), (6, 4), (7, 7)]),
        tpu_device(1, [40, 50, 60], [(1, 1), (2, 2), (3, 3)]),
    )


def test_tpu_format_medians_and_warmup_exclusion(tpu_trace):
    read = read_events(tpu_trace)
    events = read.events
    assert read.format == "tpu"
    assert set(events[schema.PROGRAM]) == {"jit_step"}  # "(7)" program id stripped
    assert sorted(events[schema.STEP].unique()) == [0, 1, 2]  # warm-up execution dropped
    ops = op_times(events)
    fusion = _row(ops, "fusion.1")
    # device 0: median(10, 30, 20) = 20 us; device 1: median(40, 50, 60) = 50 us
    assert fusion[schema.MEASURED_S] == pytest.approx((20 + 50) / 2 * 1e-6)
    assert fusion[schema.MEASURED_MIN_S] == pytest.approx(20e-6)
    assert fusion[schema.MEASURED_MAX_S] == pytest.approx(50e-6)
    assert fusion[schema.COUNT] == 1 and fusion[schema.DEVICES] == 2
    ar = _row(ops, "all-reduce.2")
    # device 0 per step: 10, 10, 14 -> 10 us; device 1: 2, 4, 6 -> 4 us; median of (10, 4) = 7 us
    assert ar[schema.MEASURED_S] == pytest.approx(7e-6)
    assert ar[schema.COUNT] == 2


def test_tpu_warmup_steps_option(tpu_trace):
    ops = op_times(load_events(tpu_trace, warmup_steps=1))
    # steps 1 and 2 only: device 0 median(30, 20) = 25 us; device 1 median(50, 60) = 55 us
    assert _row(ops, "fusion.1")[schema.MEASURED_S] == pytest.approx(40e-6)


def test_step_samples_are_per_step_medians_over_devices(tpu_trace):
    samples = step_samples(load_events(tpu_trace))
    fusion = samples[samples[schema.OP] == "fusion.1"].sort_values(schema.STEP)
    # step s: median over devices of (device 0, device 1) = (10+40)/2, (30+50)/2, (20+60)/2
    assert list(fusion[schema.MEASURED_S]) == pytest.approx([25e-6, 40e-6, 40e-6])


def gpu_trace():
    """Host step annotations at 1000, 2000, 3000 us; fusion.3 runs as two kernels per execution."""
    host = plane("/host:CPU", {"python": [
        ("step", s * 1000 * US, 100 * US, {"step_num": s - 1}) for s in (1, 2, 3)]})
    k = {"hlo_module": "jit_step"}
    kernels_a, kernels_b = [], []
    # warm-up before the first step: excluded
    kernels_a.append(("dot_kernel", 500 * US, 777 * US, dict(k, hlo_op="dot.1")))
    fusion_first, fusion_second, dot = [3, 4, 5], [4, 4, 4], [10, 12, 11]
    for s in range(3):
        t0 = (1 + s) * 1000 * US + 50 * US  # device work trails the host annotation
        kernels_a.append(("loop_kernel_a", t0, fusion_first[s] * US, dict(k, hlo_op="fusion.3")))
        kernels_b.append(("loop_kernel_b", t0 + 10 * US, fusion_second[s] * US,
                          dict(k, hlo_op="fusion.3")))
        kernels_a.append(("gemm", t0 + 200 * US, dot[s] * US, dict(k, hlo_op="dot.1")))
    gpu = plane("/device:GPU:0",
                {"Stream #13(Compute)": kernels_a, "Stream #14(Compute)": kernels_b}, plane_id=2)
    return serialize(host, gpu)


def test_gpu_format_folds_kernels_into_one_op_execution():
    read = read_events(gpu_trace())
    events = read.events
    assert read.format == "gpu"
    ops = op_times(events)
    fusion = _row(ops, "fusion.3")
    # kernels per step: 3+4, 4+4, 5+4 = 7, 8, 9 us -> median 8 us, one execution per step
    assert fusion[schema.MEASURED_S] == pytest.approx(8e-6)
    assert fusion[schema.COUNT] == 1
    dot = _row(ops, "dot.1")
    assert dot[schema.MEASURED_S] == pytest.approx(11e-6)  # median(10, 12, 11); warm-up 777 dropped


def cpu_trace():
    """Two devices; run 41 is a warm-up outside any step annotation; runs 42, 43 are steps 0, 1."""
    python = [("step", 1000 * US, 10 * US, {"step_num": 0}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 1002 * US, 5 * US, {"run_id": 42}),
              ("step", 2000 * US, 10 * US, {"step_num": 1}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 2002 * US, 5 * US, {"run_id": 43}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 500 * US, 5 * US, {"run_id": 41})]
    worker = []
    durations = {(41, 0): 900, (41, 1): 900, (42, 0): 10, (42, 1): 30, (43, 0): 20, (43, 1): 50}
    for (run, dev), dur in durations.items():
        t0 = (run - 40) * 1000 * US + 100 * US  # ops run after the annotation has closed
        st = {"hlo_op": "dot.1", "hlo_module": "jit_f", "device_ordinal": dev, "run_id": run}
        worker.append(("dot.1", t0, dur * US, st))
        worker.append(("end: dot.1", t0 + dur * US, 1, {}))
        worker.append(("Rendezvous", t0, 5 * US, {"run_id": run}))
    return serialize(plane("/host:CPU", {"python": python, "tf_XLAPjRtCpuClient/1": worker}))


def test_cpu_format_attributes_ops_to_steps_by_run_id():
    read = read_events(cpu_trace())
    events = read.events
    assert read.format == "cpu"
    assert set(events[schema.OP]) == {"dot.1"}  # "end: dot.1" markers and Rendezvous are not ops
    assert len(events) == 4  # run 41 (warm-up) dropped
    ops = op_times(events)
    # device 0: median(10, 20) = 15 us; device 1: median(30, 50) = 40 us -> median 27.5 us
    assert _row(ops, "dot.1")[schema.MEASURED_S] == pytest.approx(27.5e-6)
