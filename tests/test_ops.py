"""The measured tables of ``harness.measure.ops`` against plain pandas groupbys over the same
EVENTS,
and the shortcuts under them (text of a categorical, the programs that ran)."""
import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.measure.ops import as_text, executions, op_sums, op_times, step_samples
from harness.measure.programs import programs_ran

OP = [schema.PROGRAM, schema.PROGRAM_ID, schema.OP]


def _events(seed: int = 0) -> pd.DataFrame:
    """Two compilations of one program and a second program on 3 devices over 5 steps; each
    op runs 0, 1 or 2 times in a step on a device (so medians fall between two values), op
    names and programs categorical with a category no row uses."""
    rng = np.random.default_rng(seed)
    rows = []
    for program, pid, ops in (("jit_f", "1", ["a", "b.1", "c"]), ("jit_f", "2", ["a", "d"]),
                              ("jit_g", "3", ["a", "e"])):
        for device in range(3):
            for step in range(5):
                for op in ops:
                    for _ in range(rng.integers(0, 3) if op != "a" else 1):
                        rows.append((program, pid, op, device, step,
                                     int(rng.integers(0, 10**6)), int(rng.integers(1, 5000))))
    ev = pd.DataFrame(rows, columns=[*OP, schema.DEVICE, schema.STEP, schema.START_NS,
                                     schema.DURATION_NS])
    for col, extra in ((schema.PROGRAM, "jit_h"), (schema.PROGRAM_ID, "9"), (schema.OP, "z")):
        ev[col] = pd.Categorical(ev[col], categories=sorted({*ev[col], extra}, reverse=True))
    ev[[schema.DEVICE, schema.STEP]] = ev[[schema.DEVICE, schema.STEP]].astype(np.int32)
    return ev.assign(**{schema.HOST_NS: ev[schema.DURATION_NS] * 3 // 2})


def _expected_op_times(ev: pd.DataFrame, time: str, over_devices: str) -> pd.DataFrame:
    """The measured OPS table by the module's definition, one pandas groupby per level."""
    per_step = ev.groupby([*OP, schema.DEVICE, schema.STEP], observed=True)[time].agg(
        ["sum", "size"])
    per_device = per_step.groupby(level=[0, 1, 2, 3], observed=True).median()
    out = per_device.reset_index().groupby(OP, observed=True).agg(**{
        schema.COUNT: ("size", "median"), schema.MEASURED_S: ("sum", over_devices),
        schema.MEASURED_MIN_S: ("sum", "min"), schema.MEASURED_MAX_S: ("sum", "max"),
        schema.DEVICES: (schema.DEVICE, "nunique")})
    for col in (schema.MEASURED_S, schema.MEASURED_MIN_S, schema.MEASURED_MAX_S):
        out[col] *= 1e-9
    out[schema.TOTAL_S] = ev.groupby(OP, observed=True)[schema.DURATION_NS].sum() * 1e-9
    return out.reset_index().astype({c: str for c in OP})


@pytest.mark.parametrize("shares", [False, True])
@pytest.mark.parametrize("once", [False, True])
def test_op_times_are_the_median_over_steps_then_over_devices(shares, once):
    ev = _events()
    if once:  # op "a" alone: once in every step on every device
        ev = ev[ev[schema.OP] == "a"]
    time, over = (schema.HOST_NS, "mean") if shares else (schema.DURATION_NS, "median")
    expected = _expected_op_times(ev, time, over)
    for sums in (None, op_sums(ev, shares)):  # made here or given by the caller: the same
        got = op_times(ev, shares, sums)
        assert list(got[schema.MEASURED_S]) == sorted(got[schema.MEASURED_S], reverse=True)
        got = got.sort_values(OP).reset_index(drop=True)[list(expected.columns)]
        pd.testing.assert_frame_equal(got, expected.sort_values(OP).reset_index(drop=True),
                                      check_exact=True)


@pytest.mark.parametrize("shares", [False, True])
def test_step_samples_are_each_steps_time_over_devices(shares):
    ev = _events(1)
    time, over = (schema.HOST_NS, "mean") if shares else (schema.DURATION_NS, "median")
    per_step = ev.groupby([*OP, schema.DEVICE, schema.STEP], observed=True)[time].sum()
    expected = (per_step.groupby(level=[0, 1, 2, 4], observed=True).agg(over) * 1e-9)
    expected = expected.rename(schema.MEASURED_S).reset_index().astype({c: str for c in OP})
    for sums in (None, op_sums(ev, shares)):
        pd.testing.assert_frame_equal(step_samples(ev, shares, sums), expected,
                                      check_exact=True)


def test_executions_from_the_sums_are_the_events_count():
    ev = _events(2)
    one = ev[(ev[schema.PROGRAM] == "jit_f") & (ev[schema.PROGRAM_ID] == "1")]
    # op "a" runs once per execution, 5 executions (steps) on every device
    assert executions(one) == executions(one, sums=op_sums(one)) == 5
    # told that "a" runs 5 times per execution, the program ran once
    assert executions(one, {"a": 5}) == executions(one, {"a": 5}, op_sums(one)) == 1


@pytest.mark.parametrize("values", [
    pd.Categorical(["b", "a", "b"], categories=["z", "b", "a"]),
    pd.Categorical([10, 12, 10]),
    pd.Categorical(["b", None, "a"]),
    ["x", "y"],
])
def test_as_text_is_astype_str(values):
    column = pd.Series(values, index=[7, 8, 9][:len(values)], name="op")
    pd.testing.assert_series_equal(as_text(column), column.astype(str), check_exact=True)


def test_programs_ran_most_device_time_first():
    ev = _events(3)
    ns = ev.groupby([schema.PROGRAM, schema.PROGRAM_ID], observed=True)[
        schema.DURATION_NS].sum()
    expected = [(str(p), str(i)) for p, i in ns.sort_values(ascending=False).index]
    assert programs_ran(ev) == expected
    # without program ids each name is one program; an unnamed program is left out
    f = ev.assign(**{schema.PROGRAM: ev[schema.PROGRAM].astype(str)
                     .replace("jit_g", "")}).drop(columns=schema.PROGRAM_ID)
    assert programs_ran(f) == [("jit_f", "")]
    assert programs_ran(f[f[schema.PROGRAM] == ""]) == [("", "")]


@pytest.mark.parametrize("rows", [0, 50, 5000])
def test_groups_are_numbered_as_groupby_sorts_them(rows):
    from harness.measure.grouping import groups, runs

    rng = np.random.default_rng(rows)
    frame = pd.DataFrame({
        # few of many categories used, and values spread over a wide range: more possible
        # tuples than rows, so only the values present are numbered
        "op": pd.Categorical(rng.choice(["c", "a", "b"], rows), categories=list("zyxcba")),
        "device": rng.choice([3, 70_000, 9], rows).astype(np.int32),
        "step": rng.integers(-5, 400, rows),
    })
    group, first = groups(frame, ["op", "device", "step"])
    expected = frame.groupby(["op", "device", "step"], observed=True).ngroup().to_numpy()
    np.testing.assert_array_equal(group, expected)
    np.testing.assert_array_equal(first, [np.flatnonzero(expected == g)[0]
                                          for g in range(expected.max() + 1 if rows else 0)])
    ordered = frame.take(np.argsort(group, kind="stable"))  # runs: a sorted frame's groups
    np.testing.assert_array_equal(runs(ordered, ["op", "device", "step"])[0], np.sort(group))
