"""Per-kernel pricing of the ``cpu`` chip: which kernel runs an op's matmul, read from compiled
HLO (``harness.hlo.kernels``); a kernel's rate interpolated between measured sizes
(``predictions.roofline.kernel_rate``); memory bandwidth by working set; and ``hlo_costs``
pricing each op at its own kernel's rate on a stored calibration, saying which rate priced it
(``schema.RATE``)."""
import dataclasses
import math
from pathlib import Path

import pytest

from harness import schema
from harness.chip import calibration as C
from harness.chip import drift
from harness.hlo import hlo_costs, kernels, parse_module
from predictions import hardware, roofline

FIXTURE = Path(__file__).parent / "fixtures" / "cpu_calibration" / "cpu-8.json"

# XLA:CPU's compiled HLO (jax 0.10) of a gradient step's matmuls: a YNNPACK fusion, XLA's own
# dot, a kernel kind this calibration never saw (an XNNPACK fusion), a oneDNN call, a loop
# fusion around a dot, and an elementwise fusion.
HLO = """HloModule jit_step, is_scheduled=true

%ynn (p0: f32[32,64], p1: f32[64,256]) -> f32[32,256] {
  %p0 = f32[32,64]{1,0} parameter(0)
  %p1 = f32[64,256]{1,0} parameter(1)
  ROOT %d0 = f32[32,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%xnn (q0: f32[32,64], q1: f32[64,256]) -> f32[32,256] {
  %q0 = f32[32,64]{1,0} parameter(0)
  %q1 = f32[64,256]{1,0} parameter(1)
  ROOT %d1 = f32[32,256]{1,0} dot(%q0, %q1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%out (r0: f32[32,64], r1: f32[64,256]) -> f32[32,256] {
  %r0 = f32[32,64]{1,0} parameter(0)
  %r1 = f32[64,256]{1,0} parameter(1)
  %d2 = f32[32,256]{1,0} dot(%r0, %r1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = f32[32,256]{1,0} tanh(%d2)
}

%ew (e0: f32[32,256]) -> f32[32,256] {
  %e0 = f32[32,256]{1,0} parameter(0)
  ROOT %m = f32[32,256]{1,0} multiply(%e0, %e0)
}

ENTRY %main (x: f32[32,64], w: f32[64,256], g: f32[32,256]) -> f32[64,256] {
  %x = f32[32,64]{1,0} parameter(0)
  %w = f32[64,256]{1,0} parameter(1)
  %g = f32[32,256]{1,0} parameter(2)
  %ynn_fusion = f32[32,256]{1,0} fusion(%x, %w), kind=kCustom, calls=%ynn, @YNN@
  %xnn_fusion = f32[32,256]{1,0} fusion(%x, %w), kind=kCustom, calls=%xnn, @XNN@
  %tanh_fusion = f32[32,256]{1,0} fusion(%x, %w), kind=kOutput, calls=%out
  %onednn = f32[32,256]{1,0} custom-call(%x, %w), custom_call_target="__onednn$matmul"
  %multiply_fusion = f32[32,256]{1,0} fusion(%g), kind=kLoop, calls=%ew
  ROOT %dot = f32[64,256]{1,0} dot(%x, %multiply_fusion), @TN@
}
""".replace("@YNN@", 'backend_config={"fusion_config":{"kind":"__ynn_fusion"},'
                     '"outer_dimension_partitions":[]}').replace(
    "@XNN@", 'backend_config={"fusion_config":{"kind":"__xnn_fusion"}}').replace(
    "@TN@", "lhs_contracting_dims={0}, rhs_contracting_dims={0}")  # one line each, as XLA prints
FLOPS = 2 * 32 * 64 * 256  # roofline.md: 2BDF, every matmul of the module


def test_kernel_is_read_from_the_compiled_hlo():
    module = parse_module(HLO)
    got = {i.name: kernels.kernel(i, module) for i in module.entry.instructions}
    assert got == {"x": "", "w": "", "g": "", "ynn_fusion": "ynn_fusion",
                   "xnn_fusion": "xnn_fusion", "tanh_fusion": "dot", "onednn": "onednn$matmul",
                   "multiply_fusion": "", "dot": "dot"}


def _chip(**kw):
    return dataclasses.replace(hardware.CHIPS["cpu"], **kw)


def test_kernel_rate_is_log_log_linear_between_sizes_and_clamped_beyond():
    chip = _chip(kernel_flops=(("ynn_fusion", "fp32", ((1e6, 1e9), (1e8, 1e11))),))
    # halfway in log(size) is halfway in log(rate): sqrt(1e9 * 1e11)
    assert roofline.kernel_rate(chip, "ynn_fusion", "f32", 1e7) == pytest.approx(1e10)
    # a quarter of the way (half a decade of two): rate grows as size here, half a decade too
    assert roofline.kernel_rate(chip, "ynn_fusion", "f32", 1e6 * 10 ** 0.5) == pytest.approx(
        1e9 * 10 ** 0.5)
    assert roofline.kernel_rate(chip, "ynn_fusion", "fp32", 10.0) == 1e9  # clamped below
    assert roofline.kernel_rate(chip, "ynn_fusion", "fp32", 1e12) == 1e11  # and above
    assert roofline.kernel_rate(chip, "ynn_fusion", "bf16", 1e7) is None  # no bf16 kernel
    assert roofline.kernel_rate(chip, "dot", "fp32", 1e7) is None
    assert roofline.kernel_rate(hardware.CHIPS["h100"], "dot", "bf16", 1e7) is None


def test_stored_calibration_prices_each_op_at_its_kernels_rate():
    cal = C.load(FIXTURE)
    chip = C.to_chip(cal)
    points = {key: pts for key, pts in cal.all.kernel_flops_per_s.items()}
    assert {"ynn_fusion fp32", "dot fp32"} <= set(points)

    def interpolated(key, flops):  # log-log between the two measured sizes around flops
        pts = points[key]
        (s0, r0), (s1, r1) = next((a, b) for a, b in zip(pts, pts[1:]) if a[0] <= flops <= b[0])
        w = (math.log(flops) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return r0 ** (1 - w) * r1 ** w

    ops = hlo_costs(HLO, chip).set_index(schema.OP)
    # the tanh fusion's FLOPs are its dot's 2BDF and a tanh per element
    for op, key, flops in (("ynn_fusion", "ynn_fusion fp32", FLOPS), ("dot", "dot fp32", FLOPS),
                           ("tanh_fusion", "dot fp32", FLOPS + 32 * 256)):
        assert ops.loc[op, schema.FLOPS] == flops
        assert ops.loc[op, schema.T_COMPUTE_S] == pytest.approx(flops / interpolated(key, flops))
    # a kernel the calibration never saw: the generic rate (the best measured), and it says so
    generic = max(r for pts in points.values() for _, r in pts)
    assert cal.all.flops_per_s["fp32"] == pytest.approx(generic)
    assert ops.loc["xnn_fusion", schema.T_COMPUTE_S] == pytest.approx(FLOPS / generic)
    # a MFLOP at tens of GFLOP/s or less outweighs 104 KiB at tens of GB/s: compute-bound
    assert ops.loc["ynn_fusion", schema.RATE] == "ynn_fusion fp32"
    assert ops.loc["dot", schema.RATE] == "dot fp32"
    assert kernels.price(chip, "xnn_fusion", "f32", FLOPS) == (
        None, "generic fp32 (xnn_fusion not calibrated)")


def test_rate_column_names_the_bounding_terms_rate():
    tiers = ((1 << 20, 50e9),)
    chip = _chip(kernel_flops=(("ynn_fusion", "fp32", ((1e3, 1e9),)),), memory_tiers=tiers,
                 hbm_bytes_per_s=10e9, op_overhead_s=1e-9)
    ops = hlo_costs(HLO, chip).set_index(schema.OP)
    # 1 GFLOP/s makes the ynn matmul compute-bound; the elementwise fusion moves 64 KiB
    assert ops.loc["ynn_fusion", schema.RATE] == "ynn_fusion fp32"
    assert ops.loc["ynn_fusion", schema.T_COMPUTE_S] == pytest.approx(FLOPS / 1e9)
    assert ops.loc["multiply_fusion", schema.RATE] == "memory <= 1 MiB"
    assert ops.loc["multiply_fusion", schema.T_MEMORY_S] == pytest.approx(2 * 32 * 256 * 4 / 50e9)
    assert ops.loc["xnn_fusion", schema.RATE] == "generic fp32 (xnn_fusion not calibrated)"
    # the book's chips: one peak for every matmul, as before, and the rate column says so
    h100 = hlo_costs(HLO, "h100").set_index(schema.OP)
    assert (h100.loc["ynn_fusion", schema.T_COMPUTE_S] ==
            pytest.approx(FLOPS / roofline.peak_flops("h100", "f32")))


def test_figures_take_the_best_rate_after_the_smallest_overhead():
    S = C.Sample
    samples = [S("stream", "all", "fp32", 16, "overhead", 128, t, t) for t in (2e-6, 1e-6)]
    # two repeats of one kernel size: the best, with the overhead taken off its time
    samples += [S("matmul", "all", "fp32", 64, "peak", 1e6, t, t, "ynn_fusion")
                for t in (1e-3 + 1e-6, 2e-3)]
    samples += [S("matmul", "all", "fp32", 128, "peak", 8e6, 4e-3 + 1e-6, 1, "ynn_fusion"),
                S("matmul-tn", "all", "fp32", 128, "peak", 8e6, 1e-3 + 1e-6, 1, "dot")]
    # streams: 1 KiB is all overhead (dropped); 64 KiB at 64 GB/s, 1 MiB at 32, 64 MiB at 40
    samples += [S("stream", "all", "fp32", n, "peak", b, b / w + 1e-6, 1)
                for n, b, w in ((128, 1024, 1e12), (8192, 1 << 16, 64e9),
                                (1 << 17, 1 << 20, 32e9), (1 << 23, 1 << 26, 40e9))]
    f = C.rates(samples, "all", 8, 8)
    assert f.op_overhead_s == 1e-6
    assert f.kernel_flops_per_s == {"ynn_fusion fp32": [[1e6, pytest.approx(1e9)],
                                                        [8e6, pytest.approx(2e9)]],
                                    "dot fp32": [[8e6, pytest.approx(8e9)]]}
    assert f.flops_per_s == {"fp32": pytest.approx(8e9)}  # the best kernel
    assert f.memory_bytes_per_s == pytest.approx(40e9)  # the largest working set
    # a larger working set never prices faster: 1 MiB's 32 GB/s is raised to 64 MiB's 40
    assert f.memory_tiers == [[1 << 20, pytest.approx(64e9)], [1 << 26, pytest.approx(40e9)]]
    chip = C.to_chip(dataclasses.replace(_stored(), all=f))
    assert chip.memory_tiers == ((1 << 20, pytest.approx(64e9)), (1 << 26, pytest.approx(40e9)))
    assert roofline.memory_bandwidth(chip, 1 << 16) == pytest.approx(64e9)
    assert roofline.memory_bandwidth(chip, 1 << 27) == chip.hbm_bytes_per_s
    assert dict((k, d) for k, d, _ in chip.kernel_flops) == {"ynn_fusion": "fp32",
                                                             "dot": "fp32"}


def _stored():
    return C.load(FIXTURE)


def test_drift_scales_every_kernels_rate_and_memory_tier():
    chip = C.to_chip(_stored())
    fast = drift.scaled(chip, 2.0)
    for (k, d, pts), (k2, d2, pts2) in zip(chip.kernel_flops, fast.kernel_flops):
        assert (k, d) == (k2, d2)
        assert [r * 2 for _, r in pts] == pytest.approx([r for _, r in pts2])
    assert [w * 2 for _, w in chip.memory_tiers] == pytest.approx(
        [w for _, w in fast.memory_tiers])
    assert [c for c, _ in chip.memory_tiers] == [c for c, _ in fast.memory_tiers]


def test_a_calibration_of_another_core_count_is_not_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    import platform

    cal = dataclasses.replace(_stored(), host=platform.node(), cpu_model=C._cpu_model())
    C.save(dataclasses.replace(cal, cores=C.usable_cores() + 1))
    assert C.cached(cal.device_count) is None
    assert "usable cores" in caplog.text
    C.save(dataclasses.replace(cal, cores=C.usable_cores()))
    assert C.cached(cal.device_count) is not None


def test_usable_cores_takes_the_cgroup_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert C._quota(str(tmp_path / "cpu.max"), None) == 1.5
    (tmp_path / "unlimited").write_text("max 100000\n")
    assert C._quota(str(tmp_path / "unlimited"), None) is None
    assert C._quota(str(tmp_path / "absent"), None) is None
