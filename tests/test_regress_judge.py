"""harness.regress.judge: every verdict path, on hand-made runs with known step times, host
probes and op tables (expected verdicts by arithmetic)."""
import math

import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.chip import drift
from harness.errors import HarnessError
from harness.record import Run
from harness.regress import judge

PROGRAM = "jit_step"
# op, category, bound, collective, group, measured ms, roofline ms, FLOPs, HBM bytes, comm bytes
OPS = (("fusion.1", "matmul", "compute", "", 1, 6.0, 4.8, 4e9, 1e6, 0.0),      # 80%
       ("all-reduce.2", "collective", "comm", "all-reduce", 8, 3.0, 2.76, 0.0, 0.0, 2e6),  # 92%
       ("fusion.3", "elementwise", "memory", "", 1, 1.0, 0.5, 1e6, 4e6, 0.0),  # 50%
       ("copy.4", "copy", schema.UNMODELED, "", 1, 0.05, math.nan, 0.0, 0.0, 0.0))  # no rule
Z = np.linspace(-1.0, 1.0, 10)  # each run's steps: its step time x (1 + spread x Z)


def make(step_ms=10.0, *, cpu=1.0, spread=0.01, steps=10, host=1.0, host_after=None, cores=1.0,
         work=1.0, ops_scale=1.0, fingerprint="f1", test="test_model.py::test_mlp",
         collectives=True, wall_times=True, probe=True) -> Run:
    """A run of a 10 ms step (its ops 6 + 3 + 1 + 0.05 ms) whose wall steps are ``step_ms`` x (1 +
    spread x Z), its CPU time per step ``cpu`` x that, its probe's speed ``host`` (``host_after``
    after the steps) x 10 GFLOP/s and its cores' ``cores`` x 100 GFLOP per CPU second; ``work``
    scales the program's FLOPs and bytes, ``ops_scale`` its ops' measured times."""
    z = np.linspace(-1.0, 1.0, steps)
    times = step_ms * 1e-3 * (1 + spread * z)
    rows = [{schema.PROGRAM: PROGRAM, schema.OP: op, schema.CATEGORY: cat, schema.BOUND: bound,
             schema.COLLECTIVE: coll, schema.GROUP_SIZE: group, schema.COUNT: 1,
             schema.MEASURED_S: t * ops_scale * 1e-3, schema.PREDICTED_S: pred * work * 1e-3,
             schema.EFFICIENCY: pred * work / (t * ops_scale), schema.FLOPS: f * work,
             schema.HBM_BYTES: hbm * work, schema.COMM_BYTES: comm * work}
            for op, cat, bound, coll, group, t, pred, f, hbm, comm in OPS
            if collectives or not coll]
    after = host if host_after is None else host_after
    meta = {schema.TEST: test, schema.MESH: {"data": 8}, schema.DEVICE_KIND: "cpu",
            schema.HLO_FINGERPRINTS: {PROGRAM: fingerprint}, schema.TIME: "2026-11-24T00:00:00"}
    if wall_times:
        meta.update({schema.STEP_TIMES_S: list(times),
                     schema.STEP_CPU_TIMES_S: list(times / step_ms * 10.0 * cpu)})
    if probe:
        meta[drift.HOST_DRIFT] = {
            drift.RATES: [list(10e9 * host * (1 + 0.01 * Z[:5])),
                          list(10e9 * after * (1 + 0.01 * Z[:5]))],
            drift.CPU_RATES: [list(100e9 * cores * (1 + 0.01 * Z[:5]))] * 2}
    ops_ms = sum(t for *_, t, _, _, _, _ in OPS) * ops_scale
    step = {schema.STEP_S: ops_ms * 1e-3, schema.COMPUTE_S: 7e-3 * ops_scale,
            schema.COMM_S: 3e-3 * ops_scale, schema.EXPOSED_COMM_S: 3e-3 * ops_scale,
            schema.IDLE_S: 0.0}
    return Run(meta=meta, ops=pd.DataFrame(rows), step=step,
               summary={schema.HLO_FLOPS_PER_DEVICE: 4.001e9 * work,
                        schema.WALL_STEP_S: float(np.median(times))})


def save(root, name, **kw):
    """``make(**kw)`` stored under ``root/name``."""
    return make(**kw).save(root / name)


def test_the_same_code_on_the_same_host_is_ok():
    v = judge.compare(make(), make())
    assert (v.verdict, v.cause) == (judge.OK, judge.NOISE)
    assert v.change == 0.0 and v.host_change == 0.0
    assert "not slower beyond noise" in v.message


def test_the_same_program_slower_on_a_steady_host_is_a_regression_saying_where():
    v = judge.compare(make(), make(15.0, cpu=1.5, ops_scale=1.5))
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    assert v.change == pytest.approx(0.5)
    assert v.message.startswith("same program, slower by 50% (more CPU time per step): wall step "
                                "10 ms -> 15 ms (+50%")
    # compute 7 -> 10.5 ms, exposed communication 3 -> 4.5 ms; fusion.1 lost most: 6 -> 9 ms,
    # 80% of its roofline at 6 ms, 4.8 / 9 = 53% at 9 ms
    assert "compute +3.5 ms; exposed communication +1.5 ms" in v.message
    assert "most in fusion.1 (matmul, compute-bound) fell from 80% to 53% of its roofline" \
        in v.message


def test_slower_on_a_host_other_processes_took_is_inconclusive_never_a_regression():
    # the wall step 1.6x, the CPU time per step the same, the probe 1.6x slower
    v = judge.compare(make(), make(16.0, cpu=1.0, host=1 / 1.6))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    assert v.host_change == pytest.approx(1 / 1.6 - 1)
    assert "the same CPU work per step" in v.message


def test_slower_cores_are_inconclusive_unless_the_step_slowed_more():
    v = judge.compare(make(), make(15.0, cpu=1.5, cores=1 / 1.5))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    assert "the host's cores ran as much slower (-33%" in v.message
    # cores 10% slower, the CPU time per step 1.5x: 1.5 / 1.1 is still beyond 10%
    assert judge.compare(make(), make(15.0, cpu=1.5, cores=1 / 1.1)).verdict == \
        judge.REGRESSION


def test_more_cpu_work_per_step_is_a_regression_even_on_a_busy_host():
    # the probe 1.5x slower, but the CPU time per step grew 1.5x: the host does not explain it
    v = judge.compare(make(), make(22.5, cpu=1.5, host=1 / 1.5))
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    assert "CPU time per step +50%" in v.message


def test_more_cpu_time_while_the_host_moved_under_the_candidate_is_inconclusive():
    # the same program, its CPU time per step 1.4x, while the candidate's own probe went from
    # 10 to 8 GFLOP/s between before and after its steps (20% > the 10% a steady host moves):
    # its device threads spun longer as the load changed; the same 1.4x with the candidate's
    # probe the same before and after stays a regression (the test above)
    v = judge.compare(make(), make(14.0, cpu=1.4, host=1.0, host_after=0.8))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    assert "while the host moved under it" in v.message
    steady = judge.compare(make(), make(14.0, cpu=1.4, host=0.8))
    assert (steady.verdict, steady.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    # a changed program's CPU time is its own: still a regression
    other = judge.compare(make(), make(14.0, cpu=1.4, host=1.0, host_after=0.8, work=1.4,
                                       fingerprint="f2"))
    assert other.verdict == judge.REGRESSION


def test_a_slower_wall_step_with_the_same_cpu_work_is_inconclusive_even_on_a_steady_probe():
    # the probe (before and after the steps) can miss a load that came and went in between:
    # with the same CPU work per step, the wall step alone cannot tell the host from the program
    v = judge.compare(make(), make(15.0, cpu=1.0))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    assert "the same CPU work per step" in v.message


def older(run: Run, probe_moved: float | None = 1.0) -> Run:
    """``run`` as a CPU run saved before CPU times and probe repeats were kept: its probe's best
    before and after only (none when ``probe_moved`` is None)."""
    del run.meta[schema.STEP_CPU_TIMES_S]
    run.meta[drift.HOST_DRIFT] = None if probe_moved is None else {
        drift.REFERENCE: [10e9, 10e9 / probe_moved]}
    return run


def test_an_older_cpu_run_is_judged_by_its_probe():
    assert judge.compare(older(make()), older(make(15.0))).verdict == judge.REGRESSION
    v = judge.compare(older(make()), older(make(15.0), probe_moved=1.5))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)
    v = judge.compare(older(make(), None), older(make(15.0), None))
    assert (v.verdict, v.cause) == (judge.INCONCLUSIVE, judge.HOST)


def test_a_program_doing_more_work_is_a_regression_that_says_so():
    v = judge.compare(make(), make(80.0, cpu=8.0, work=8.0, fingerprint="f2", host=0.5))
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.PROGRAM)
    assert v.message.startswith("the program does more work: 8x the FLOPs, 8x the HBM bytes, "
                                "8x the communication bytes per device;")
    assert v.program["changed"] and v.program["more_work"]
    assert v.program[f"{schema.FLOPS}_x"] == pytest.approx(8.0)


def test_a_changed_program_that_is_not_slower_is_ok():
    v = judge.compare(make(), make(9.9, cpu=0.99, work=0.5, fingerprint="f2"))
    assert (v.verdict, v.cause) == (judge.OK, judge.PROGRAM)
    assert v.message.startswith("the program changed (0.5x the FLOPs")
    assert not v.program["more_work"]


def test_a_new_fingerprint_with_the_same_work_is_a_changed_program():
    v = judge.compare(make(), make(fingerprint="f2"))
    assert v.program["changed"] and not v.program["more_work"]
    assert "fingerprint" in v.program["what"] and v.verdict == judge.OK


def test_a_new_collective_is_more_work():
    v = judge.compare(make(collectives=False), make(20.0, cpu=2.0, fingerprint="f2"))
    assert v.program["collectives"] == [{}, {"all-reduce": 1}]
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.PROGRAM)
    assert "collectives all-reduce 0 -> 1" in v.message


def test_the_same_program_doing_more_work_is_a_same_program_regression():
    """One compiled program (one fingerprint) that ran 1.3x the work per step (a loop whose trip
    count is an input value): a regression of the same program, saying what grew."""
    v = judge.compare(make(), make(13.0, cpu=1.3, work=1.3))
    assert (v.verdict, v.cause) == (judge.REGRESSION, judge.SAME_PROGRAM)
    assert v.message.startswith("the same program (fingerprint) did more work per step: 1.3x "
                                "the FLOPs")


def test_faster_is_an_improvement():
    v = judge.compare(make(), make(7.0, cpu=0.7))
    assert v.verdict == judge.IMPROVEMENT and v.change == pytest.approx(-0.3)


def test_a_change_within_the_threshold_is_ok():
    assert judge.compare(make(), make(10.5, cpu=1.05)).verdict == judge.OK  # +5% < 10%
    assert judge.compare(make(), make(13.0, cpu=1.3)).verdict == judge.REGRESSION
    rule = judge.Rule(fail_on=(("step", 0.5),))
    assert judge.compare(make(), make(13.0, cpu=1.3), rule).verdict == judge.OK


def test_a_change_beyond_the_threshold_within_its_noise_is_ok():
    a, b = make(spread=0.5), make(12.0, cpu=1.2, spread=0.5)
    v = judge.compare(a, b)
    # each side: log steps' MAD over 10 steps; the median's s.e. 1.2533 x 1.4826 x MAD / sqrt(10)
    # and the run-to-run 0.05 of each run
    mads = [np.median(np.abs(np.log(x) - np.median(np.log(x))))
            for x in (10 * (1 + 0.5 * Z), 12 * (1 + 0.5 * Z))]
    se = math.sqrt(sum((1.2533 * 1.4826 * m / math.sqrt(10)) ** 2 for m in mads) + 2 * 0.05**2)
    p = 0.5 * math.erfc(math.log(1.2) / se / math.sqrt(2))
    assert p > 0.01 and v.p_value == pytest.approx(p)
    assert v.verdict == judge.OK


def test_five_steps_decide_a_doubled_step():
    v = judge.compare(make(steps=5), make(20.0, cpu=2.0, steps=5))
    assert v.verdict == judge.REGRESSION


def test_runs_without_step_times_are_inconclusive():
    v = judge.compare(make(wall_times=False), make(wall_times=False))
    assert (v.verdict, v.message) == (judge.INCONCLUSIVE, "no step times to compare")


def test_a_device_run_without_a_probe_is_judged_by_its_wall_step_and_says_so():
    a, b = make(probe=False), make(15.0, probe=False)
    for run in (a, b):  # a GPU run: its CPU time is not its work, and the probe measures CPUs
        del run.meta[schema.STEP_CPU_TIMES_S]
        run.meta[schema.DEVICE_KIND] = "NVIDIA H100 80GB HBM3"
    v = judge.compare(a, b)
    assert v.verdict == judge.REGRESSION and "no host speed probe" in v.message
    assert math.isnan(v.host_change)


def test_an_efficiency_drop_can_fail_a_run_the_step_alone_would_not():
    rule = judge.Rule(fail_on=(("step", 0.5), ("efficiency", 0.10)))
    v = judge.compare(make(), make(12.0, cpu=1.2, ops_scale=1.2), rule)
    assert v.verdict == judge.REGRESSION and "less efficient by 20%" in v.message
    assert judge.compare(make(), make(12.0, cpu=1.2, ops_scale=1.2),
                           judge.Rule(fail_on=(("step", 0.5),))).verdict == judge.OK


def test_each_step_figure_and_op_has_its_change():
    v = judge.compare(make(), make(15.0, cpu=1.5, ops_scale=1.5, work=1.0))
    f = v.figures.set_index(schema.FIGURE)
    assert list(f.index) == [schema.WALL_STEP_S, schema.STEP_S, schema.COMPUTE_S,
                             schema.EXPOSED_COMM_S, schema.IDLE_S]
    assert f.loc[schema.EXPOSED_COMM_S, schema.DELTA_S] == pytest.approx(1.5e-3)
    assert f.loc[schema.STEP_S, schema.CHANGE] == pytest.approx(0.5)
    ops = v.ops.set_index(schema.OP)
    assert list(ops.index) == ["fusion.1", "all-reduce.2", "fusion.3", "copy.4"]  # most lost first
    assert ops.loc["fusion.1", schema.CHANGE] == pytest.approx(0.5)
    assert ops.loc["fusion.1", schema.PREDICTED_CHANGE] == pytest.approx(0.0)
    assert ops.loc["fusion.1", schema.WORK_CHANGE] == pytest.approx(0.0)


def test_an_op_whose_roofline_time_grew_does_more_work():
    v = judge.compare(make(), make(20.0, cpu=2.0, ops_scale=2.0, work=2.0))
    line = v.message.split("most in ")[1]
    assert line == "fusion.1 (matmul, compute-bound) 6 ms -> 12 ms, +100%: it does more work (2x)"


@pytest.mark.parametrize("rule, word", [
    (dict(fail_on=(("latency", 0.1),)), "latency: unknown; valid: step, efficiency"),
    (dict(fail_on=(("step", -0.1),)), "must be in [0, 10)"),
    (dict(alpha=0.0), "alpha must be in (0, 1)"),
    (dict(host=-1.0), "host must be >= 0")])
def test_a_bad_rule_names_the_knob(rule, word):
    with pytest.raises(HarnessError, match=word.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        judge.Rule(**rule)


def test_the_overall_verdict_is_the_worst():
    ok, reg = judge.compare(make(), make()), judge.compare(make(), make(20.0, cpu=2.0))
    assert judge.overall([ok, reg]) == judge.REGRESSION
    assert judge.overall([ok]) == judge.OK and judge.overall([]) == judge.OK
