"""harness.step: the step decomposed from hand-drawn timelines (times in ns, worked by hand)."""
from __future__ import annotations

import pytest
from timelines import NS, events

from harness import schema
from harness.step import decompose, exposed_by_op, merged


def test_union_of_overlapping_nested_and_back_to_back_intervals():
    # [0,10) holds [2,5); [10,12) touches it; [20,25) stands apart: union [0,12), [20,25)
    s, e = merged([2, 0, 10, 20], [5, 10, 12, 25])
    assert list(s) == [0, 20] and list(e) == [12, 25]


def test_union_of_random_intervals_is_the_walk_over_them_in_order():
    import numpy as np

    rng = np.random.default_rng(0)
    starts = rng.integers(0, 1000, 300)
    ends = starts + rng.integers(0, 40, 300)  # empty ones too
    expected = []  # the union by hand: walk the intervals by start, extending the last piece
    for s, e in sorted(zip(starts.tolist(), ends.tolist())):
        if expected and s <= expected[-1][1]:
            expected[-1][1] = max(expected[-1][1], e)
        else:
            expected.append([s, e])
    s, e = merged(starts, ends)
    assert [[a, b] for a, b in zip(s.tolist(), e.tolist())] == expected


def test_communication_partly_under_compute():
    # device 0: dot [0,40), all-gather [30,70) (10 ns under the dot), gap [70,80), add [80,100)
    rows = [("dot", 0, 0, 0, 40), ("all-gather", 0, 0, 30, 40), ("add", 0, 0, 80, 20)]
    (row,) = decompose(events(rows), {"all-gather"}).to_dict("records")
    assert row[schema.TIMELINE_STEP_S] == pytest.approx(100 * NS)
    assert row[schema.COMPUTE_S] == pytest.approx(60 * NS)      # 40 + 20
    assert row[schema.COMM_S] == pytest.approx(40 * NS)
    assert row[schema.OVERLAPPED_COMM_S] == pytest.approx(10 * NS)  # [30,40)
    assert row[schema.EXPOSED_COMM_S] == pytest.approx(30 * NS)     # [40,70)
    assert row[schema.IDLE_S] == pytest.approx(10 * NS)             # [70,80)
    # measured apart, the terms add up: 60 + 30 + 10 = 100 and 10 + 30 = 40
    assert row[schema.COMPUTE_S] + row[schema.EXPOSED_COMM_S] + row[schema.IDLE_S] == \
        pytest.approx(row[schema.TIMELINE_STEP_S])


def test_fully_hidden_communication_and_two_lanes():
    # two compute streams cover [0,50) between them; the collective [10,40) hides under them
    rows = [("dot.1", 0, 0, 0, 30), ("dot.2", 0, 0, 20, 30), ("all-reduce", 0, 0, 10, 30)]
    (row,) = decompose(events(rows), {"all-reduce"}).to_dict("records")
    assert row[schema.COMPUTE_S] == pytest.approx(50 * NS)
    assert row[schema.EXPOSED_COMM_S] == 0 and row[schema.IDLE_S] == 0
    assert row[schema.OVERLAPPED_COMM_S] == pytest.approx(30 * NS)


def test_each_step_and_device_is_its_own_row_and_containers_stay_out():
    rows = [("while.1", 0, 0, 0, 100), ("dot", 0, 0, 10, 20), ("dot", 0, 0, 60, 20),
            ("dot", 1, 0, 0, 50), ("dot", 0, 1, 200, 10)]
    out = decompose(events(rows), set(), apart={"while.1"}).set_index(
        [schema.STEP, schema.DEVICE])
    # without the while: device 0 step 0 runs [10,30) and [60,80): step 70, idle 30
    assert out.loc[(0, 0), schema.TIMELINE_STEP_S] == pytest.approx(70 * NS)
    assert out.loc[(0, 0), schema.IDLE_S] == pytest.approx(30 * NS)
    assert out.loc[(0, 1), schema.TIMELINE_STEP_S] == pytest.approx(50 * NS)
    assert out.loc[(1, 0), schema.COMPUTE_S] == pytest.approx(10 * NS)


def test_each_collective_says_how_much_of_it_was_exposed():
    # all-gather [30,70) with the dot over [0,40): 30 of its 40 ns exposed; all-reduce
    # [85,95) inside add [80,100): hidden
    rows = [("dot", 0, 0, 0, 40), ("all-gather", 0, 0, 30, 40), ("add", 0, 0, 80, 20),
            ("all-reduce", 0, 0, 85, 10)]
    out = exposed_by_op(events(rows), {"all-gather", "all-reduce"}).set_index(schema.OP)
    assert out.loc["all-gather", schema.COMM_S] == pytest.approx(40 * NS)
    assert out.loc["all-gather", schema.EXPOSED_COMM_S] == pytest.approx(30 * NS)
    assert out.loc["all-reduce", schema.EXPOSED_COMM_S] == 0


def test_an_async_pair_is_exposed_for_its_own_wait_not_for_the_others_under_its_span():
    # TPU XLA Ops, as in the v6e fixture: copy-start.a and copy-start.b issued at 0 and 1;
    # the core waits on copy-done.a over [2,50), runs fusion [50,60), then copy-done.b waits
    # [60,61): b's transfer landed while the core waited on a. b is in flight [1,61), 60 ns, but
    # the step waited on it 1 ns; the 48 ns of a's wait under b's span are a's. The step's
    # exposed communication is the 61 ns less the fusion's 10: the two waits (48 + 1) and the
    # 2 ns the -starts took to issue, which are no -done's wait
    from harness.step.timeline import measure

    rows = [("copy-start.a", 0, 0, 0, 1), ("copy-start.b", 0, 0, 1, 1),
            ("copy-done.a", 0, 0, 2, 48), ("fusion", 0, 0, 50, 10),
            ("copy-done.b", 0, 0, 60, 1)]
    comm = {"copy-start.a", "copy-start.b", "copy-done.a", "copy-done.b"}
    step, _ = measure(events(rows), comm,
                      pairs={"copy-start.a": "copy-done.a", "copy-start.b": "copy-done.b"})
    listed = {r[schema.OP]: r for r in step[schema.STEP_COLLECTIVES]}
    assert listed["copy-done.a"][schema.COMM_S] == pytest.approx(50 * NS)  # [0,50)
    assert listed["copy-done.a"][schema.EXPOSED_COMM_S] == pytest.approx(48 * NS)
    assert listed["copy-done.b"][schema.COMM_S] == pytest.approx(60 * NS)  # [1,61)
    assert listed["copy-done.b"][schema.EXPOSED_COMM_S] == pytest.approx(1 * NS)
    assert step[schema.EXPOSED_COMM_S] == pytest.approx((61 - 10) * NS)  # [0,50) and [60,61)
    assert [r[schema.OP] for r in step[schema.STEP_COLLECTIVES]] == ["copy-done.a",
                                                                    "copy-done.b"]


def test_an_ops_exposed_part_is_a_median_over_steps_per_device_then_over_devices():
    # all-gather exposed 10, 20, 90 ns in steps 0-2 on device 0 (median 20) and 30, 40, 50 on
    # device 1 (median 40): the op's figure is the median of 20 and 40 = 30 ns, as measured_s
    # takes it (the median of all six, 35 ns, could exceed the op's own measured time)
    rows = [("all-gather", d, k, 100 * k, t) for d, ts in ((0, (10, 20, 90)), (1, (30, 40, 50)))
            for k, t in enumerate(ts)]
    out = exposed_by_op(events(rows), {"all-gather"}).set_index(schema.OP)
    assert out.loc["all-gather", schema.EXPOSED_COMM_S] == pytest.approx(30 * NS)
    assert out.loc["all-gather", schema.COMM_S] == pytest.approx(30 * NS)
