"""harness.measure.arrivals: when each device entered a collective and how long it waited for
its group, on event tables worked by hand (executions matched by order, replica groups, hosts
on their own clocks or aligned)."""
from __future__ import annotations

import pandas as pd
import pytest

from harness import schema
from harness.measure.arrivals import arrivals, collective_ops, opcode_of_name
from harness.schema import SchemaError

US = 1000


def events(rows, hosts=None) -> pd.DataFrame:
    """EVENTS from (op, device, step, start_ns, duration_ns), one program; ``hosts``: device ->
    host, for a HOST column."""
    df = pd.DataFrame([{schema.PROGRAM: "p", schema.OP: op, schema.DEVICE: d, schema.STEP: s,
                        schema.START_NS: t, schema.DURATION_NS: n} for op, d, s, t, n in rows])
    if hosts is not None:
        df[schema.HOST] = df[schema.DEVICE].map(hosts)
    return df


def column(table: pd.DataFrame, name: str) -> dict:
    return dict(zip(zip(table[schema.OP], table[schema.DEVICE], table[schema.EXECUTION]),
                    table[name]))


def test_four_devices_arriving_ten_us_apart_wait_for_the_last():
    # arrivals at 0, 10, 20, 30 us, every device leaving at 40 us: the last arrival is 30 us
    rows = [("all-gather.1", d, 0, d * 10 * US, (40 - d * 10) * US) for d in range(4)]
    out = arrivals(events(rows))
    assert list(out.columns) == list(schema.ARRIVALS)
    assert list(out[schema.ARRIVE_NS]) == [0, 10 * US, 20 * US, 30 * US]
    assert list(out[schema.LAST_ARRIVE_NS]) == [30 * US] * 4
    assert list(out[schema.WAIT_NS]) == [30 * US, 20 * US, 10 * US, 0]
    assert list(out[schema.END_NS]) == [40 * US] * 4


def test_executions_match_by_their_order_in_the_step():
    # all-reduce.2 runs twice in step 0 on each device: device 0 at 0 and 100, device 1 at 50
    # and 60. First execution: arrivals 0, 50 -> last 50; second: 100, 60 -> last 100.
    # In step 1 it runs once, at 500 and 520: a third execution, matched apart
    rows = [("all-reduce.2", 0, 0, 0, 5), ("all-reduce.2", 0, 0, 100, 5),
            ("all-reduce.2", 1, 0, 60, 50), ("all-reduce.2", 1, 0, 50, 5),
            ("all-reduce.2", 0, 1, 500, 30), ("all-reduce.2", 1, 1, 520, 10)]
    out = arrivals(events(rows))
    assert list(out[schema.EXECUTION]) == [0, 1, 1, 0, 0, 0]
    assert list(out[schema.LAST_ARRIVE_NS]) == [50, 100, 100, 50, 520, 520]
    assert list(out[schema.WAIT_NS]) == [50, 0, 40, 0, 20, 0]
    assert list(out.index) == list(range(6))  # the events' rows, in their order


def test_a_device_waits_only_for_its_own_replica_group():
    # groups {0, 1} and {2, 3}: arrivals 0, 10, 20, 30 -> last 10, 10, 30, 30
    rows = [("all-reduce.5", d, 0, d * 10, 50) for d in range(4)]
    out = arrivals(events(rows), groups={"all-reduce.5": [(0, 1), (2, 3)]})
    assert list(out[schema.LAST_ARRIVE_NS]) == [10, 10, 30, 30]
    assert list(out[schema.WAIT_NS]) == [10, 0, 10, 0]
    # without the groups, every device of the execution: the last is 30 for all
    assert list(arrivals(events(rows))[schema.WAIT_NS]) == [30, 20, 10, 0]


def test_only_collectives_are_arrivals_and_the_caller_may_name_them():
    rows = [("dot.1", 0, 0, 0, 10), ("all-to-all.3", 0, 0, 10, 10), ("all-to-all.3", 1, 0, 15, 5),
            ("ag_fusion", 0, 0, 30, 9), ("ag_fusion", 1, 0, 36, 3)]
    assert list(arrivals(events(rows))[schema.OP]) == ["all-to-all.3", "all-to-all.3"]
    named = arrivals(events(rows), collectives={"ag_fusion"})
    assert list(named[schema.WAIT_NS]) == [6, 0]
    assert collective_ops(["all-gather-start.2", "all-gather-done.2", "fusion.1", "x"],
                          {"x": "reduce-scatter", "fusion.1": "fusion"}) == {
        "all-gather-start.2", "x"}
    assert opcode_of_name("all-gather-start.3") == "all-gather-start"
    assert opcode_of_name("all-gather") == "all-gather"


def test_hosts_compare_apart_unless_their_clocks_are_aligned():
    # devices 0, 1 on host 0 arrive at 0 and 10; devices 2, 3 on host 1 at 100 and 5 on its
    # own clock. Apart: host 0's last arrival is 10, host 1's is 100.
    hosts = {0: 0, 1: 0, 2: 1, 3: 1}
    rows = [("all-reduce.1", 0, 0, 0, 200), ("all-reduce.1", 1, 0, 10, 200),
            ("all-reduce.1", 2, 0, 100, 200), ("all-reduce.1", 3, 0, 5, 200)]
    apart = arrivals(events(rows, hosts))
    assert list(apart[schema.HOST]) == [0, 0, 1, 1]
    assert list(apart[schema.LAST_ARRIVE_NS]) == [10, 10, 100, 100]
    # host 1's clock 90 ns ahead (offset -90): it arrived at 10 and -85 on host 0's clock, so
    # the last is 10 on host 0's clock, 100 on host 1's
    aligned = arrivals(events(rows, hosts), clock_offsets_ns={1: -90})
    assert list(aligned[schema.LAST_ARRIVE_NS]) == [10, 10, 100, 100]
    assert list(aligned[schema.WAIT_NS]) == [10, 0, 0, 95]
    # host 1 90 ns behind instead (offset +90): it arrived at 190 and 95; last 190 there
    behind = arrivals(events(rows, hosts), clock_offsets_ns={1: 90})
    assert list(behind[schema.LAST_ARRIVE_NS]) == [190, 190, 100, 100]


def test_no_collective_gives_an_empty_table_and_bad_input_is_named():
    out = arrivals(events([("dot.1", 0, 0, 0, 10)]))
    assert out.empty and list(out.columns) == list(schema.ARRIVALS)
    with pytest.raises(SchemaError, match="arrivals"):
        arrivals(pd.DataFrame({schema.OP: ["all-reduce.1"]}))


def _module(groups: str, opcode: str = "all-reduce"):
    from harness.hlo import parse_module

    apply = ", to_apply=%add" if opcode == "all-reduce" else ", dimensions={0}"
    return parse_module("\n".join([
        "HloModule m, num_partitions=8",
        "%add (a: f32[], b: f32[]) -> f32[] {",
        "  %a = f32[] parameter(0)", "  %b = f32[] parameter(1)",
        "  ROOT %s = f32[] add(%a, %b)", "}",
        "ENTRY %main (p: f32[8]) -> f32[8] {",
        "  %p = f32[8]{0} parameter(0)",
        f"  ROOT %c.1 = f32[8]{{0}} {opcode}(%p), channel_id=1, replica_groups={groups}, "
        f"use_global_device_ids=true{apply}", "}", ""]))


@pytest.mark.parametrize("groups, expected", [
    # as printed
    ("{{0,1,2,3},{4,5,6,7}}", ((0, 1, 2, 3), (4, 5, 6, 7))),
    # iota: [2,4]<=[4,2]T(1,0): iota(8) as 4x2, transposed to 2x4: rows 0,2,4,6 and 1,3,5,7
    ("[2,4]<=[4,2]T(1,0)", ((0, 2, 4, 6), (1, 3, 5, 7))),
    # mesh a=2 x b=4, groups over b: ids row-major, so {0..3} and {4..7}; over a: {0,4}, ...
    ("mesh['a'=2,'b'=4] {'b'}", ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("mesh['a'=2,'b'=4] {'a'}", ((0, 4), (1, 5), (2, 6), (3, 7))),
])
def test_replica_groups_of_a_module_in_each_form(groups, expected):
    from harness.measure.arrivals import replica_groups

    assert replica_groups(_module(groups)) == {"c.1": expected}


def test_one_group_is_every_device_and_names_none():
    from harness.measure.arrivals import replica_groups

    assert replica_groups(_module("{{0,1,2,3,4,5,6,7}}")) == {}
    assert replica_groups(_module("{}")) == {}


def test_a_device_waits_for_its_group_in_the_host_shares_too():
    # all-reduce.5 in groups {0, 1} and {2, 3}, arrivals 0, 10, 20, 30, every one leaving at
    # 40: group {0, 1} runs from 10, group {2, 3} from 30, so n = 2 on [10, 30) and 4 on
    # [30, 40). Devices 0, 1: 4 * (20/2 + 10/4) = 50; devices 2, 3: 4 * 10/4 = 10
    from harness.measure.shares import host_shares

    rows = [("all-reduce.5", d, 0, d * 10, 40 - d * 10) for d in range(4)]
    out = host_shares(events(rows), groups={"all-reduce.5": [(0, 1), (2, 3)]})
    assert list(out[schema.SHARE_NS]) == [50, 50, 10, 10]
    # without the groups every device waits for device 3: 4 * 10/4 each
    assert list(host_shares(events(rows))[schema.SHARE_NS]) == [10, 10, 10, 10]
