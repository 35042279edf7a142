"""``harness calibrate``: figures from samples, the ``cpu`` chip, the cache, the CLI, and the
drift reference; how near measured matmuls land is benchmarks/bench_cpu_accuracy.py."""
import dataclasses
import json
import logging
import math

import pytest

from harness import cli
from harness.chip import calibration as C
from harness.errors import HarnessError
from predictions import collectives, hardware, roofline
from predictions.rules import Cost

log = logging.getLogger(__name__)

N = 8
MiB = 1 << 20
# A reference ring (not from the code under test): 2 GB/s, 20 us per hop, 8 devices.
REF = dataclasses.replace(hardware.CHIPS["cpu"], ici_bytes_per_s=2e9, hop_latency_s=2e-5)


def _collective_samples(scope: str, g: int) -> list[C.Sample]:
    """Times the predictions' ring model gives on REF: what a perfect ring would measure."""
    out = []
    for kind in C.RING:
        for role, V in (("latency", 256), ("bandwidth", 4 * MiB)):
            t = collectives.estimate(kind, V, g, REF).seconds
            out.append(C.Sample(kind, scope, "fp32", V, role, V, t, t))
    return out


def synthetic(device_count: int = N, host: str | None = None) -> C.Calibration:
    import platform

    samples = []
    for scope, k, t_matmul, t_stream in (("one", 1, 0.02, 0.004), ("all", device_count, 0.16,
                                                                     0.032)):
        samples += [C.Sample("matmul", scope, dt, 1024, "peak", 2 * 1024 ** 3, t_matmul,
                             1.25 * t_matmul) for dt in ("fp32", "bf16")]
        samples.append(C.Sample("stream", scope, "fp32", 1 << 24, "peak", 8 * (1 << 24),
                                t_stream, t_stream))
        samples += _collective_samples(scope, 2 if scope == "one" else device_count)
    # a tiny in-place op's time, three sizes' worth of samples: the per-op overhead (all busy)
    samples += [C.Sample("stream", "all", "fp32", 16, "overhead", 128, t, 3 * t)
                for t in (1e-6, 2e-6, 4e-6)]
    return C.Calibration(
        host=host or platform.node(), cpu_model=C._cpu_model(), cores=2,
        device_count=device_count, jax_version="0", jaxlib_version="0",
        time="2026-01-01T00:00:00+00:00", mode="quick", seconds=1.0, note="n/a",
        one=C.rates(samples, "one", 1, 2), all=C.rates(samples, "all", device_count,
                                                          device_count),
        samples=tuple(samples))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    return tmp_path


# --- figures and the chip (no measurement) ------------------------------------------------------
def test_figures_invert_the_ring_model_of_predictions():
    cal = synthetic()
    for fig in (cal.one, cal.all):
        for kind in C.RING:
            assert fig.collective_bytes_per_s[kind] == pytest.approx(2e9)
            assert fig.collective_latency_s[kind] == pytest.approx(2e-5)
    # all busy: the work over the time left after the per-op overhead the chip adds back
    assert cal.all.flops_per_s["fp32"] == pytest.approx(2 * 1024 ** 3 / (0.16 - 1e-6))
    assert cal.all.flops_per_s_wall["fp32"] == pytest.approx(2 * 1024 ** 3 / (1.25 * 0.16))
    assert cal.one.memory_bytes_per_s == pytest.approx(8 * (1 << 24) / 0.004)
    # the overhead is the tiny op's smallest time (of 1, 2, 4 us: a roof is a lower bound);
    # none measured alone
    assert (cal.all.op_overhead_s, cal.one.op_overhead_s) == (pytest.approx(1e-6), 0.0)


def test_to_chip_is_a_cpu_chip_the_predictions_accept():
    cal = synthetic()
    chip = C.to_chip(cal)
    assert (chip.name, chip.kind, chip.chips_per_node) == ("cpu", "cpu", N)
    # the all-busy column
    assert chip.flops_per_s("fp32") == pytest.approx(2 * 1024 ** 3 / (0.16 - 1e-6))
    assert chip.hbm_bytes_per_s == pytest.approx(8 * (1 << 24) / (0.032 - 1e-6))
    assert chip.op_overhead_s == pytest.approx(1e-6)
    assert min(chip.flops_per_s(d) for d in chip.dtypes) > 0 and chip.hbm_bytes > 0
    est = roofline.matmul(4096, 4096, 4096, chip, dtype="fp32")
    assert est.t_compute_s == pytest.approx(2 * 4096 ** 3 / chip.flops_per_s("fp32"))
    t = roofline.op_time(Cost(flops=1e9, hbm_bytes=1e6), chip, "f32")
    assert t.predicted_s == pytest.approx(1e9 / chip.flops_per_s("fp32") + 1e-6)
    # the chip reproduces the times it was calibrated from
    assert collectives.all_gather(4 * MiB, N, chip) == pytest.approx(
        collectives.estimate("all-gather", 4 * MiB, N, REF).seconds)
    assert collectives.all_reduce(256, N, chip) == pytest.approx(2 * (N - 1) * 2e-5)


def test_to_chip_rejects_a_calibration_without_positive_figures():
    cal = synthetic()
    broken = dataclasses.replace(cal, all=dataclasses.replace(cal.all, memory_bytes_per_s=0.0))
    with pytest.raises(HarnessError, match="memory bandwidth"):
        C.to_chip(broken)


# --- cache ---------------------------------------------------------------------------------------
def test_save_load_round_trip(cache):
    cal = synthetic()
    path = C.save(cal)
    assert path == cache / "cpu-8.json"
    assert C.load(path) == cal
    assert json.loads(path.read_text())["all"]["group"] == N


def test_cache_is_keyed_by_device_count(cache, monkeypatch):
    assert C.cache_path(8).name == "cpu-8.json" and C.cache_path(4).name == "cpu-4.json"
    C.save(synthetic(device_count=4))
    assert C.cached(8) is None
    assert C.cached(4).device_count == 4

    def no_measuring(*a, **k):
        raise AssertionError("a saved calibration must not be measured again")

    monkeypatch.setattr(C, "calibrate", no_measuring)
    registered = hardware.CHIPS["cpu"]
    chip, cal, measured = C.cpu_chip_for_run(4)
    assert not measured and cal == C.cached(4)
    assert chip == C.to_chip(cal) and chip.chips_per_node == 4
    assert hardware.CHIPS["cpu"] is registered  # the chip is a value: the registry is as it was


def test_another_hosts_calibration_is_not_used(cache, caplog):
    C.save(synthetic(host="elsewhere"))
    with caplog.at_level(logging.WARNING, logger="harness.chip.calibration"):
        assert C.cached(N) is None
    assert "elsewhere" in caplog.text


@pytest.mark.parametrize("content, why", [
    ("{not json", "Expecting"),
    ('{"format": 99}', "format 99"),
    ('{"format": 1, "host": "x"}', "format 1, expected 4"),  # before the per-op overhead
    ('{"format": 2, "host": "x"}', "format 2, expected 4"),  # matmul timed by raw durations
    ('{"format": 3, "host": "x"}', "format 3, expected 4"),  # one matmul rate for every kernel
    ('{"format": 4, "host": "x"}', "not a usable calibration"),
    ("[1, 2]", "format 'list'"),
])
def test_corrupt_cache_file_is_a_one_line_error_naming_it(cache, caplog, content, why):
    path = C.cache_path(N)
    path.write_text(content)
    with pytest.raises(HarnessError) as err:
        C.load(path)
    message = str(err.value)
    assert str(path) in message and why in message and "\n" not in message
    # the automatic path (a run on CPU) warns, names the file, and measures a new one
    with caplog.at_level(logging.WARNING, logger="harness.chip.calibration"):
        assert C.cached(N) is None
    assert str(path) in caplog.text


def test_bad_mode_and_device_count_name_the_choices():
    with pytest.raises(HarnessError, match=r"choose from \['full', 'quick'\]"):
        C.calibrate("fast")
    with pytest.raises(HarnessError, match="this process has 8 CPU devices"):
        C.calibrate("quick", device_count=64)


# --- CLI (measurement replaced by the synthetic record) -----------------------------------------
def test_cli_prints_table_caveat_and_where_it_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(C, "calibrate",
                        lambda mode, n, progress=None, strict=False: synthetic(n))
    out = tmp_path / "cal.json"
    assert cli.main(["calibrate", "--quick", "--save", str(out)]) == 0
    text = capsys.readouterr().out
    assert "all 8 busy" in text and "one device alone" in text
    assert "GFLOP/s" in text and "rendezvous" in text and "not a network" in text
    assert text.rstrip().endswith(f"saved: {out}")
    assert C.load(out) == synthetic(N)
    assert cli.main(["calibrate", "--format", "json", "--save", str(out)]) == 0
    record = json.loads(capsys.readouterr().out.rsplit("saved:", 1)[0])
    assert record["device_count"] == N and record["all"]["flops_per_s"]["fp32"] > 0


def test_a_tiny_op_the_trace_leaves_out_gives_no_overhead_and_the_rest_stands(monkeypatch):
    """One device runs a program this small inline, untraced: the overhead sample is skipped;
    any other program without ops in its trace is still an error."""
    from harness.chip import drift
    from harness.errors import TraceError

    monkeypatch.setattr(drift, "reference_rates", lambda devices: [1e9] * 3)
    monkeypatch.setattr(drift, "core_speed", lambda devices: 4e9)
    todo = [("stream", "all", "fp32", 16, "overhead", 1), ("matmul", "all", "fp32", 64, "peak", 1)]
    monkeypatch.setattr(C, "tasks", lambda plan, n: todo)

    def measure(kind, scope, dtype, size, role, devices, plan):
        if role == "overhead":
            raise TraceError("trace has no XLA op executions (cpu format)")
        return C.Sample(kind, scope, dtype, size, role, 2.0 * size ** 3, 1e-3, 1e-3)

    monkeypatch.setattr(C, "measure", measure)
    monkeypatch.setattr(C, "measure_kernel", lambda kind, scope, dt, size, devices, plan, seen:
                        C.measure(kind, scope, dt, size, "peak", devices, plan))
    cal = C.calibrate("quick", 1)
    assert [s.role for s in cal.samples] == ["peak"] and cal.all.op_overhead_s == 0.0
    assert cal.all.flops_per_s["fp32"] == pytest.approx(2.0 * 64 ** 3 / 1e-3)
    monkeypatch.setattr(C, "tasks", lambda plan, n: todo[1:])  # the matmul alone, no ops
    monkeypatch.setattr(C, "measure", lambda *a: measure(*a[:4], "overhead", *a[5:]))
    monkeypatch.setattr(C, "measure_kernel", lambda *a: measure(*a[:4], "overhead", *a[4:6]))
    with pytest.raises(TraceError, match="no XLA op executions"):
        C.calibrate("quick", 1)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    registered = hardware.CHIPS["cpu"]
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(C.CACHE_ENV, str(root))
        chip, cal, measured = C.cpu_chip_for_run(N)  # none saved: runs a quick one
        assert hardware.CHIPS["cpu"] is registered  # the chip is a value: the registry as it was
        yield chip, cal, measured, root


def test_quick_calibration_runs_and_saves(calibrated):
    chip, cal, measured, root = calibrated
    assert measured and cal.mode == "quick" and cal.device_count == N
    assert C.load(root / "cpu-8.json") == cal
    assert chip == C.to_chip(cal)
    assert cal.all.group == N and set(cal.all.collective_bytes_per_s) == set(C.RING)
    # eight devices trace even a tiny op: its time is the per-op overhead the chip carries
    assert cal.all.op_overhead_s > 0 and chip.op_overhead_s == cal.all.op_overhead_s
    assert "rendezvous" in cal.note and "not a network" in cal.note


def test_calibrated_rate_is_the_samples_work_over_time_and_predicts_matmuls(calibrated):
    """Load-independent: whatever speed the host had, the chip's fp32 rate is the measured
    samples' FLOPs over their op time, and a matmul's roofline time is 2BDF over that rate.
    (How near measured matmuls land: ``benchmarks/bench_cpu_accuracy.py``.)"""
    chip, cal, _, _ = calibrated
    fp32 = [s for s in cal.samples if (s.scope, s.dtype) == ("all", "fp32")
            and s.kind in C.MATMULS]
    assert fp32 and all(s.work == 2 * s.size ** 3 for s in fp32)  # roofline.md: 2BDF FLOPs
    # every layout's kernel, read from its HLO (jax 0.10: ynn_fusion and dot), has a rate
    assert all(s.kernel for s in fp32)
    assert {k for k, d, _ in chip.kernel_flops} == {s.kernel for s in fp32}
    rate = max(s.work / (s.op_s - cal.all.op_overhead_s) for s in fp32)  # the best kernel
    assert chip.flops_per_s("fp32") == pytest.approx(rate)
    est = roofline.matmul(1024, 1280, 768, chip, dtype="fp32")  # the chip a run is priced on
    assert est.t_lower_s == pytest.approx(2 * 1024 * 1280 * 768 / rate)
    assert cal.reference_flops_per_s > 0 and cal.reference_spread >= 1.0


def test_calibration_flops_match_xla_cost_analysis():
    import jax

    from harness.chip.modes import MODES
    from harness.chip.probes import _matmul

    prog = _matmul("matmul")(jax.devices()[:N], "fp32", 256, MODES["quick"].chain)
    cost = prog.fn.lower(*prog.args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    # per device: a chain of [256,256] @ [256,256], 2 * 256^3 FLOPs each, after x is scaled
    # by the one-element all-reduce that starts every device's chain at once (256^2 multiplies)
    assert prog.chain == MODES["quick"].chain and prog.work == 2 * 256 ** 3
    assert cost["flops"] == prog.work * prog.chain + 256 ** 2


def test_drift_factor_scales_compute_and_memory_not_collectives():
    from harness.chip import drift

    chip = C.to_chip(synthetic())
    # best before 8, after 10 GFLOP/s against a best of 5 at calibration: 10 / 5 = 2x faster now
    scaled, f, note = drift.apply(chip, {"reference_flops_per_s": 5e9},
                                  {"reference_flops_per_s": [8e9, 10e9]})
    assert f == pytest.approx(2.0) and "2.00x its calibrated speed" in note
    assert scaled.flops_per_s("fp32") == pytest.approx(2 * chip.flops_per_s("fp32"))
    assert scaled.hbm_bytes_per_s == pytest.approx(2 * chip.hbm_bytes_per_s)
    assert scaled.op_overhead_s == pytest.approx(chip.op_overhead_s / 2)  # 2x faster: half
    assert scaled.ici_bytes_per_s == chip.ici_bytes_per_s
    assert scaled.hop_latency_s == chip.hop_latency_s
    # an older calibration without a reference: the chip as it is
    same, f, note = drift.apply(chip, {}, {"reference_flops_per_s": [8e9, 12e9]})
    assert same is chip and math.isnan(f) and note == ""
    # the host's speed moved 2x between before and after: no one factor describes the run
    same, f, note = drift.apply(chip, {"reference_flops_per_s": 5e9},
                                {"reference_flops_per_s": [6e9, 12e9]})
    assert same is chip and math.isnan(f) and "moved 2.0x during this run" in note
    assert drift.spread([10, 9, 10, 5, 2]) == pytest.approx(10 / 9)  # best / median


def test_a_busy_host_is_calibrated_with_a_warning_and_strict_refuses(monkeypatch, caplog):
    """Reversed on purpose (issue 50): a busy host used to be refused unless --allow-busy; a
    shared host is often busy, so its calibration now completes, a warning names how busy, and
    only ``strict`` (``harness calibrate --strict``) refuses. Reference rates 10, 4, 5, 3, 10
    then 4 x5: median 4, best 10, 10 / 4 = 2.50x."""
    from harness.chip import drift

    def busy():
        return iter([[10e9, 4e9, 5e9, 3e9, 10e9], [4e9, 4e9, 4e9, 4e9, 4e9]])

    rates = busy()
    monkeypatch.setattr(drift, "reference_rates", lambda devices: next(rates))
    monkeypatch.setattr(C, "tasks", lambda plan, n: [])  # no programs: only the reference
    monkeypatch.setattr(C, "rates", lambda *a: C.Rates(N, N))
    with caplog.at_level(logging.WARNING, logger=C.log.name):
        cal = C.calibrate("quick", N)
    assert cal.reference_spread == pytest.approx(2.5) and "varied 2.50x" in caplog.text
    assert cal.core_speed == () and cal.spread == 0.0  # no matmul probe: no check of the cores
    rates = busy()
    with pytest.raises(HarnessError, match=r"host was busy .* varied 2.50x .*--strict"):
        C.calibrate("quick", N, strict=True)


def test_calibration_keeps_the_best_reference_rate_a_run_compares_with_its_own(monkeypatch):
    """Both sides take the best of their ten reference steps (five before, five after): a run
    whose host gave the same best as the calibration's has a factor of 1, whichever side of
    its capture that best fell on."""
    from harness.chip import drift

    before, after = [9e9, 10e9, 9.5e9, 10e9, 8e9], [12e9, 11e9, 11.5e9, 12e9, 10e9]
    rates = iter([before, after])
    monkeypatch.setattr(drift, "reference_rates", lambda devices: next(rates))
    monkeypatch.setattr(C, "tasks", lambda plan, n: [])
    monkeypatch.setattr(C, "rates", lambda *a: C.Rates(N, N))
    cal = C.calibrate("quick", N)
    assert cal.reference_flops_per_s == 12e9
    assert drift.factor(cal.reference_flops_per_s, 12e9, 11e9) == pytest.approx(1.0)
    assert drift.factor(cal.reference_flops_per_s, 11e9, 12e9) == pytest.approx(1.0)
    assert drift.factor(cal.reference_flops_per_s, 6e9, 9e9) == pytest.approx(0.75)


def test_cores_that_changed_speed_are_measured_again_and_the_spread_kept(monkeypatch, caplog):
    """Reversed on purpose (issue 50; commit 28ef246 refused such a calibration): the cores'
    speed is checked before each fp32 matmul probe and once after them, the probes beside a
    check slower than the fastest / 1.3 run again, each keeps its fastest, and the checks'
    spread is stored for the figures priced from it to carry.

    Worked by hand: checks 80 (before 16), 45 (before 32), 80 (before 64), 80 (after) G. The
    fastest is 80, so a probe is slow beside a check under 80 / 1.3 = 61.5: 16 (80 then 45) and
    32 (45 then 80); 64 (80, 80) is not. A probe's op takes 1 ms at 80 G and 80 / 45 ms at
    45 G: 32 read 1.78 ms. The repeats run 16 and 32 again, a check before each and one after,
    all 80: both read 1 ms, and 32's rate is 2 x 32^3 / 1 ms = 65.5 MFLOP/s. Spread 80 / 45."""
    from harness.chip import calibration_table, drift

    todo = [("matmul", "all", "fp32", size, "peak", N) for size in (16, 32, 64)]
    monkeypatch.setattr(C, "tasks", lambda plan, n: todo)
    monkeypatch.setattr(drift, "reference_rates", lambda devices: [10e9] * 5)
    now = []

    def core_speed(devices):
        now.append(next(speeds))
        return now[-1]

    def kernel(kind, scope, dt, size, devices, plan, seen):
        return C.Sample(kind, scope, dt, size, "peak", 2.0 * size ** 3, 1e-3 * 80e9 / now[-1],
                        1e-3, "ynn_fusion")

    monkeypatch.setattr(drift, "core_speed", core_speed)
    monkeypatch.setattr(C, "measure_kernel", kernel)
    speeds = iter([80e9, 45e9, 80e9, 80e9] + [80e9] * 3)
    with caplog.at_level(logging.WARNING, logger=C.log.name):
        cal = C.calibrate("quick", N)
    assert [s.size for s in cal.samples[:3]] == [16, 32, 64] and cal.repeats == 2
    assert sorted(s.size for s in cal.samples[3:]) == [16, 32]  # cheapest first: either order
    assert [s.op_s for s in cal.samples if s.size == 32] == pytest.approx([80 / 45 * 1e-3, 1e-3])
    rates = dict(map(tuple, cal.all.kernel_flops_per_s["ynn_fusion fp32"]))
    assert rates[2.0 * 32 ** 3] == pytest.approx(2.0 * 32 ** 3 / 1e-3)  # the fastest repeat
    assert cal.core_speed == (45e9, 80e9) and cal.spread == pytest.approx(80 / 45)
    assert "45 to 80 GFLOP per CPU second (1.78x" in caplog.text and "1.78x spread" in caplog.text
    assert C.Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    chip = C.to_chip(dataclasses.replace(synthetic(), spread=cal.spread))
    assert chip.spread == pytest.approx(80 / 45)  # the chip carries it
    assert any("45 GFLOP to 80 GFLOP per CPU second" in line and "2 probe run(s) repeated" in line
               and "up to 178%" in line for line in calibration_table.notes(cal, chip))
    # strict: refused, after the repeats
    speeds, now[:] = iter([80e9, 45e9, 80e9, 80e9] + [80e9] * 3), []
    with pytest.raises(HarnessError, match=r"cores changed speed .* 45 to 80 GFLOP per CPU "
                                           r"second \(1.78x; .*--strict"):
        C.calibrate("quick", N, strict=True)
    # steady cores (80, 75, 70, 80: 80 / 70 = 1.14x, within 1.3x): no repeat, no complaint
    speeds, now[:] = iter([80e9, 75e9, 70e9, 80e9]), []
    cal = C.calibrate("quick", N, strict=True)
    assert cal.repeats == 0 and cal.spread == pytest.approx(80 / 70)


def test_a_quick_calibration_runs_each_size_of_its_mode():
    from harness.chip.modes import MODES, tasks

    quick = MODES["quick"]
    todo = tasks(quick, 8)
    # all 8 busy: 2 collectives x (1 latency + 1 bandwidth size), 3 streams, 1 convert,
    # 5 overhead streams, 2 dtypes x 2 layouts x 3 matmul sizes; one device alone: the same
    # collectives on a group of 2, the largest stream, 1 convert, 2 dtypes x the largest matmul
    assert len([t for t in todo if t[1] == "all"]) == 4 + 3 + 1 + 5 + 12
    assert len([t for t in todo if t[1] == "one"]) == 4 + 1 + 1 + 2
    assert {t[3] for t in todo if t[0] == "all-gather"} == {256, 4 << 20}
    assert [t[3] for t in todo if t[1] == "one" and t[0] == "matmul"] == [512, 512]
    assert [t[0] for t in todo if t[1] == "one"][-2:] == ["matmul", "matmul"]  # matmuls last
    assert len([t for t in tasks(quick, 1) if t[0] in ("all-gather", "all-reduce")]) == 0
