"""The step path's analyses without Python per group (issue 50): ``harness.step.runs`` sorts and
cuts many devices' rows at once as ``np.lexsort`` and a loop per run would, and the stragglers'
``leads`` name the same unit, lead and order as the per-execution rule they replace (a
``groupby`` with the next-latest arrival taken per group), on random tables with ties."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.step import runs
from harness.step.stragglers import leads
from harness.step.timeline import merged


@pytest.mark.parametrize("seed", range(40))
def test_order_and_runs_are_lexsort_and_a_loop_per_run(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    keys = [rng.integers(-3, 3, n).astype(np.int8), rng.integers(0, 4, n),
            rng.integers(-2**40, 2**40, n), rng.integers(-2**62, 2**62, n)]
    keys = keys[:int(rng.integers(1, 5))]
    assert np.array_equal(runs.order(*keys), np.lexsort(keys[::-1]))
    device = np.sort(rng.integers(0, 3, n))
    s = rng.integers(0, 50, n)
    by = np.lexsort((s, device))
    device, s = device[by], s[by]
    e = s + rng.integers(0, 8, n)
    new = runs.starts(device)
    first = np.append(np.flatnonzero(new), n)
    each = list(zip(first[:-1], first[1:]))
    assert np.array_equal(runs.reach(new, e),
                          np.concatenate([np.maximum.accumulate(e[a:b]) for a, b in each]))
    us, ue = runs.unions(new, s, e)
    pieces = [merged(s[a:b], e[a:b]) for a, b in each]
    assert np.array_equal(us, np.concatenate([p[0] for p in pieces]))
    assert np.array_equal(ue, np.concatenate([p[1] for p in pieces]))
    js, je = runs.joined(*merged(s, e))
    assert np.array_equal(js, merged(s, e)[0]) and np.array_equal(je, merged(s, e)[1])


def _leads_per_group(arr: pd.DataFrame, unit: str) -> pd.DataFrame:
    """``leads`` as a rule per group: each unit's latest arrival at each execution, the units
    in arrival order, the last one's lead over the one before it."""
    key = [schema.PROGRAM, schema.OP, schema.STEP, schema.EXECUTION]
    a = arr.assign(_t=arr[schema.ARRIVE_NS], _g=arr[schema.LAST_ARRIVE_NS])
    per = a.groupby([*key, "_g", unit], observed=True)["_t"].max().reset_index()
    per = per.sort_values([*key, "_g", "_t"], kind="stable")
    g = per.groupby([*key, "_g"], observed=True, sort=False)
    n = g["_t"].transform("size")
    second = g["_t"].transform(lambda t: t.iloc[-2] if len(t) > 1 else t.iloc[-1])
    last = per[(g.cumcount(ascending=False) == 0) & (n > 1)]
    return pd.DataFrame({schema.STEP: last[schema.STEP], schema.OP: last[schema.OP],
                         "unit": last[unit], "lead_ns": (last["_t"] - second[last.index])})


@pytest.mark.parametrize("seed", range(30))
def test_leads_are_the_rule_per_execution(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    coarse = int(rng.choice([1, 10]))  # coarse times: ties between units
    arrive = rng.integers(0, 20, n) * coarse
    arr = pd.DataFrame({
        schema.PROGRAM: rng.choice(["p", "q"], n), schema.PROGRAM_ID: "1",
        schema.OP: rng.choice(["all-reduce.1", "all-gather.2", "reduce-scatter"], n),
        schema.STEP: rng.integers(0, 3, n).astype(np.int32),
        schema.EXECUTION: rng.integers(0, 2, n), schema.HOST: rng.integers(0, 2, n),
        schema.DEVICE: rng.integers(0, 6, n).astype(np.int32), schema.ARRIVE_NS: arrive,
        schema.LAST_ARRIVE_NS: rng.choice([20, 40], n) * coarse})
    for unit in (schema.DEVICE, schema.HOST):
        pd.testing.assert_frame_equal(leads(arr, {}, unit), _leads_per_group(arr, unit),
                                      check_exact=True)


def test_a_devices_own_late_start_times_its_arrival_not_its_group():
    """Four devices of one host in one group (one last arrival, 1900 ns), started 0, 100, 200
    and 300 ns into the step: timed from their own starts they arrive at 1000, 1000, 1000 and
    1600 ns, so device 3 is the last by 600 ns. The launch shift must not move the group's
    key: each device would be a group of its own, and no device named."""
    arr = pd.DataFrame({
        schema.PROGRAM: "p", schema.PROGRAM_ID: "1", schema.OP: "all-reduce.1",
        schema.STEP: np.zeros(4, np.int32), schema.EXECUTION: 0, schema.HOST: 0,
        schema.DEVICE: np.arange(4, dtype=np.int32),
        schema.ARRIVE_NS: [1000, 1100, 1200, 1900], schema.LAST_ARRIVE_NS: 1900})
    starts = pd.Series([0, 100, 200, 300], index=pd.MultiIndex.from_arrays(
        [[0] * 4, [0, 1, 2, 3]], names=[schema.STEP, schema.DEVICE]))
    found = leads(arr, {}, schema.DEVICE, starts)
    assert found["unit"].tolist() == [3] and found["lead_ns"].tolist() == [1600 - 1000]


def _paired_per_pair(events: pd.DataFrame, pairs: dict) -> tuple[pd.DataFrame, np.ndarray]:
    """``inflight.paired`` as a rule per pair: on each device the k-th start meets the k-th
    done; the rows of no pair first, then pair by pair its dones and its lone starts."""
    op = events[schema.OP].astype(str)
    keep = ~op.isin(set(pairs) | set(pairs.values()))
    spans, own = [events[keep]], [events.loc[keep, schema.DURATION_NS].to_numpy()]
    for start, done in pairs.items():
        s = events[op == start].sort_values([schema.DEVICE, schema.START_NS], kind="stable")
        d = events[op == done].sort_values([schema.DEVICE, schema.START_NS], kind="stable")
        s = s.assign(_k=s.groupby(schema.DEVICE).cumcount())
        d = d.assign(_k=d.groupby(schema.DEVICE).cumcount())
        both = d.merge(s[[schema.DEVICE, "_k", schema.START_NS]], on=[schema.DEVICE, "_k"],
                       how="left", suffixes=("", "_s"))
        first = both[schema.START_NS + "_s"].fillna(both[schema.START_NS]).astype(np.int64)
        first = np.minimum(first, both[schema.START_NS])
        end = both[schema.START_NS] + both[schema.DURATION_NS]
        spans.append(both.assign(**{schema.START_NS: first, schema.DURATION_NS: end - first})
                     .drop(columns=["_k", schema.START_NS + "_s"]))
        own.append(both[schema.DURATION_NS].to_numpy())
        lone = s.merge(d[[schema.DEVICE, "_k"]], how="left", indicator=True)
        lone = lone[lone["_merge"] == "left_only"].drop(columns=["_k", "_merge"])
        spans.append(lone)
        own.append(lone[schema.DURATION_NS].to_numpy())
    return pd.concat(spans, ignore_index=True), np.concatenate(own)


@pytest.mark.parametrize("seed", range(30))
def test_async_pairs_are_the_rule_per_pair(seed):
    from harness.step.inflight import paired

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    names = ["copy-start.1", "copy-done.1", "ag-start", "ag-done", "fusion.2", "dot.3"]
    events = pd.DataFrame({
        schema.OP: rng.choice(names, n), schema.DEVICE: rng.integers(0, 3, n),
        schema.START_NS: rng.integers(0, 30, n) * 10, schema.DURATION_NS: rng.integers(1, 9, n)})
    pairs = {"copy-start.1": "copy-done.1", "ag-start": "ag-done"}
    got, own = paired(events, pairs)
    want, want_own = _paired_per_pair(events, pairs)
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_dtype=False)
    assert np.array_equal(own, want_own)
