"""harness.measure.shares: an op's share of a host whose devices share cores, worked by hand."""
from __future__ import annotations

import pandas as pd
import pytest

from harness import schema
from harness.measure.ops import op_times
from harness.measure.shares import apart, apart_by_opcode, host_shares
from harness.trace.load import TraceEvents


def events(rows) -> pd.DataFrame:
    """EVENTS from (op, device, start_ns, duration_ns), one program, one step."""
    return pd.DataFrame([{schema.PROGRAM: "p", schema.OP: op, schema.DEVICE: d, schema.STEP: 0,
                          schema.START_NS: s, schema.DURATION_NS: t} for op, d, s, t in rows])


def shares(rows, keep=(), collectives=None) -> dict:
    out = host_shares(events(rows), keep, collectives)
    return dict(zip(zip(out[schema.OP], out[schema.DEVICE]), out[schema.SHARE_NS]))


def test_the_same_op_on_every_device_at_once_keeps_its_duration():
    # n = 2 throughout: share = D * 10 / 2 = 10
    assert shares([("dot", 0, 0, 10), ("dot", 1, 0, 10)]) == {("dot", 0): 10, ("dot", 1): 10}


def test_an_op_running_alone_had_the_devices_host_to_itself():
    # a on device 0 over [0, 10), b on device 1 over [5, 15): n = 1, 2, 1 on 5 ns each.
    # a: 2 * (5/1 + 5/2) = 15; b: 2 * (5/2 + 5/1) = 15
    s = shares([("a", 0, 0, 10), ("b", 1, 5, 10)])
    assert s == {("a", 0): 15, ("b", 1): 15}
    # the shares add up to D x the time any op ran: 2 * 15
    assert sum(s.values()) == 2 * 15


def test_a_staggered_op_measures_as_its_span_over_devices():
    # the same op 2 ms on device 0 and 18 ms on device 1 (one thread got the cores later):
    # [0, 2) n = 2, [2, 18) n = 1. Shares 2 * 2/2 = 2 and 2 * (2/2 + 16) = 34 ms, each a slice
    # or more; mean 18, the span in which the host ran the op, where the median of raw
    # durations says 10
    ms = 1_000_000
    rows = [("dot", 0, 0, 2 * ms), ("dot", 1, 0, 18 * ms)]
    raw = op_times(events(rows))
    assert raw[schema.MEASURED_S].iloc[0] == pytest.approx(10e-3)
    shared = op_times(host_shares(events(rows)), shares=True)
    assert shared[schema.MEASURED_S].iloc[0] == pytest.approx(18e-3)
    assert shared[schema.MEASURED_MIN_S].iloc[0] == pytest.approx(2e-3)
    assert shared[schema.MEASURED_MAX_S].iloc[0] == pytest.approx(34e-3)


def test_a_short_execution_beside_idle_cores_is_timed_by_its_duration():
    us = 1_000
    # "a" 100 us on device 0, alone; then "b" 1 ms on device 1, alone. Shares: 2 * 100 = 200 us,
    # below a slice (750 us): "a" ran to completion on one core and is timed by its 100 us;
    # 2 * 1000 us = 2 ms, a slice or more: "b" keeps its share
    out = host_shares(events([("a", 0, 0, 100 * us), ("b", 1, 200 * us, 1000 * us)]))
    assert list(out[schema.SHARE_NS]) == [200 * us, 2000 * us]
    assert list(out[schema.HOST_NS]) == [100 * us, 2000 * us]
    # three ops at once on two devices (two on device 0, as an async op beside its caller):
    # n = 3, each share 2 * 100/3 = 67 us, less than its duration: the share
    out = host_shares(events([("x", 0, 0, 100 * us), ("y", 0, 0, 100 * us),
                              ("z", 1, 0, 100 * us)]))
    assert list(out[schema.HOST_NS]) == list(out[schema.SHARE_NS]) == [round(200 * us / 3)] * 3
    # measured: the mean over devices of the host times, not of the shares
    t = op_times(out.assign(**{schema.OP: "x"}), shares=True)[schema.MEASURED_S].iloc[0]
    assert t == pytest.approx((2 * round(200 * us / 3) + round(200 * us / 3)) / 2 * 1e-9)


def test_collectives_count_like_any_op_once_their_group_has_arrived():
    # a thread in a collective holds its device: with every device in the all-reduce or in a
    # matmul, n = 2 and each keeps its duration (one device in it: its own arrival is the last)
    assert shares([("all-reduce.1", 0, 0, 10), ("dot", 1, 0, 10)]) == {
        ("all-reduce.1", 0): 10, ("dot", 1): 10}


def test_a_matmul_beside_a_waiting_device_gets_its_full_share():
    # device 0 enters all-gather.1 at 0 and waits for device 1, which runs a dot over [0, 20)
    # and then arrives: the all-gather runs on both over [20, 30). Waiting is not running: on
    # [0, 20) n = 1 (the dot had the host): dot 2 * 20 = 40; each all-gather 2 * 10/2 = 10.
    # The shares add up to D x the 30 ns ops ran: 40 + 10 + 10 = 2 * 30
    rows = [("all-gather.1", 0, 0, 30), ("dot", 1, 0, 20), ("all-gather.1", 1, 20, 10)]
    assert shares(rows) == {("all-gather.1", 0): 10, ("dot", 1): 40, ("all-gather.1", 1): 10}
    # counted from its arrival, the waiting thread took half the host: the dot 2 * 20/2 = 20,
    # the all-gather 2 * (20/2 + 10/2) = 30
    plain = shares(rows, collectives=())
    assert plain == {("all-gather.1", 0): 30, ("dot", 1): 20, ("all-gather.1", 1): 10}


def test_four_devices_arriving_apart_share_only_the_time_all_are_in():
    # arrivals 0, 10, 20, 30, all leaving at 40: each runs [30, 40) with n = 4 -> 4 * 10/4
    rows = [("all-gather.2", d, d * 10, 40 - d * 10) for d in range(4)]
    assert set(shares(rows).values()) == {10}
    # a collective the caller names (a name that implies none) waits the same way
    named = [("ag", d, d * 10, 40 - d * 10) for d in range(4)]
    assert set(shares(named, collectives={"ag"}).values()) == {10}
    # not named, it runs from its arrival: device 0 alone on [0, 10), with 2, 3, 4 after
    assert shares(named)[("ag", 0)] == round(4 * (10 / 1 + 10 / 2 + 10 / 3 + 10 / 4))  # 83


def test_containers_neither_share_nor_count():
    # while on device 0 over [0, 20) around its body op over [2, 8); c on device 1 over [0, 20).
    # n leaves the while out: 1 on [0, 2), 2 on [2, 8), 1 on [8, 20).
    # c: 2 * (2 + 6/2 + 12) = 34; body: 2 * 6/2 = 6; the while keeps 20
    s = shares([("while", 0, 0, 20), ("body", 0, 2, 6), ("c", 1, 0, 20)], keep={"while"})
    assert s == {("while", 0): 20, ("body", 0): 6, ("c", 1): 34}


def test_one_device_ops_back_to_back_keep_their_durations():
    assert shares([("a", 0, 0, 7), ("b", 0, 7, 3)]) == {("a", 0): 7, ("b", 0): 3}


def test_what_is_apart_and_which_traces_share():
    predicted = pd.DataFrame({schema.OP: ["while.1", "all-reduce.2", "dot.3"],
                              schema.OPCODE: ["while", "all-reduce", "dot"]})
    assert apart(predicted) == {"while.1"}
    assert apart_by_opcode({"while.1": "while", "dot.3": "dot", "c.4": "conditional"}) == {
        "while.1", "c.4"}
    def shares_cores(trace_format):
        return TraceEvents(events([("a", 0, 0, 1)]), trace_format, "<test>").shares_cores

    assert shares_cores("cpu") and not shares_cores("gpu") and not shares_cores("tpu")
    assert not shares_cores("merged")  # a multi-host merge: clocks differ per process


def test_shares_are_a_column_beside_the_durations_the_trace_gave():
    rows = [("a", 0, 0, 10), ("b", 1, 5, 10)]
    out = host_shares(events(rows))
    assert list(out[schema.DURATION_NS]) == [10, 10]  # as traced
    assert list(out[schema.SHARE_NS]) == [15, 15]     # 2 * (5/1 + 5/2) each, as above




def test_a_calibration_probe_times_long_ops_as_shares_and_short_ones_as_durations_where_less():
    from harness.chip.probes import _per_op
    from harness.measure.shares import SLICE_NS

    ms = 1_000_000
    assert SLICE_NS == 0.75 * ms

    def probe(rows):
        t = _per_op(events(rows), shared=True, codes={op: "fusion" for op, *_ in rows})
        return {op: v for (op, _), v in t.items()}

    # two devices, each op dispatched after the other's: "long" 3 ms on device 0 over [0, 3),
    # then on device 1 over [3, 6); alone on the host, each share is D x 3 = 6 ms, a slice or
    # more: the share (the host ran the two in 6 ms)
    # "short": 0.1 ms alone on each likewise: share 0.2 ms, below a slice: the duration
    assert probe([("long", 0, 0, 3 * ms), ("long", 1, 3 * ms, 3 * ms),
                  ("short", 0, 10 * ms, ms // 10),
                  ("short", 1, 10 * ms + ms // 10, ms // 10)]) == {"long": 6 * ms,
                                                                   "short": ms // 10}
    # the same op at once on both devices: share = duration
    assert probe([("long", 0, 0, 3 * ms), ("long", 1, 0, 3 * ms)]) == {"long": 3 * ms}
    # a program timed by durations (not shared): the median over devices
    t = _per_op(events([("dot", 0, 0, 3), ("dot", 1, 3, 5)]), shared=False, codes={})
    assert t[("dot", 0)] == 4


def test_a_chain_is_timed_by_its_best_step_not_each_op_by_its_own():
    from harness.chip.probes import best_step

    # a and b share the host: whichever ran beside fewer others took 2, the other 10, by turns;
    # each op's own best step says 2, the best step (median over the chain) 6
    per = pd.Series({("a", 0): 10, ("a", 1): 2, ("b", 0): 2, ("b", 1): 10})
    assert best_step(per, chain=True) == 6
    # not a chain: the longest op's best step
    assert best_step(per, chain=False) == 2
