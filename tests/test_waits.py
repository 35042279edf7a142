"""Why the devices wait (``harness.step.waits``, ``stragglers``, ``verdict``): each step's period
and its waiting split by cause on event tables whose answers are arithmetic; stragglers named
only when one unit is late in most steps; the verdict line; on the H100 fixtures, every cause
claimed cites the trace's events and goes when they go. The programs made to wait on CPU are in
``test_waits_cpu.py``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import schema
from harness.measure.arrivals import arrivals
from harness.measure.per_host import clock_offsets, host_columns
from harness.report.step import step_lines
from harness.step.stragglers import last_by_op, stragglers
from harness.step.verdict import verdict, wait_figures
from harness.step.waits import saturated, waits

NS = 1e-9
H100 = Path(__file__).parent / "fixtures" / "h100"


def _events(rows, host=None) -> pd.DataFrame:
    """EVENTS from (program, op, device, step, start, end) rows."""
    df = pd.DataFrame(rows, columns=[schema.PROGRAM, schema.OP, schema.DEVICE, schema.STEP,
                                     schema.START_NS, "end"])
    df[schema.DURATION_NS] = df.pop("end") - df[schema.START_NS]
    if host is not None:
        df[schema.HOST] = host
    return df


def _host(rows) -> pd.DataFrame:
    """HOST_EVENTS from (kind, device, start, end) rows, host 0."""
    df = pd.DataFrame(rows, columns=[schema.KIND, schema.DEVICE, schema.START_NS, "end"])
    df[schema.DURATION_NS] = df.pop("end") - df[schema.START_NS]
    return df.assign(**{schema.HOST: 0, schema.EVENT_NAME: ""})[list(schema.HOST_EVENTS)]


# two steps on one device: in each, two ops 10 ns apart inside the program; 70 ns between steps
TWO_STEPS = _events([("p", "a", 0, 0, 0, 10), ("p", "b", 0, 0, 20, 30),
                     ("p", "a", 0, 1, 100, 110), ("p", "b", 0, 1, 120, 130)])
LAUNCHES = [("dispatch", -1, 40, 45), ("dispatch", -1, 95, 99)]


def _row(table, step, device=0):
    return table[(table[schema.STEP] == step) & (table[schema.DEVICE] == device)].iloc[0]


def test_the_period_runs_to_the_next_steps_first_op_and_the_gap_between_is_the_hosts():
    table, untold = waits(TWO_STEPS, _host(LAUNCHES))
    first, last = _row(table, 0), _row(table, 1)
    assert first[schema.PERIOD_S] == pytest.approx(100 * NS)  # 0 -> 100
    # 30 -> 100 waits for the host: the launches' 40 -> 45 and 95 -> 99 are the runtime's,
    # the other 61 ns no runtime event covers (the host's own work)
    assert first[schema.WAIT_DISPATCH_S] == pytest.approx((5 + 4) * NS)
    assert first[schema.WAIT_PYTHON_S] == pytest.approx((70 - 9) * NS)
    assert first[schema.WAIT_UNEXPLAINED_S] == pytest.approx(10 * NS)  # 10 -> 20, in the program
    assert first[schema.WAITING_S] == pytest.approx(80 * NS)  # the period less its 20 ns of ops
    assert last[schema.PERIOD_S] == pytest.approx(30 * NS)  # the last: to its last op's end
    assert last[schema.WAIT_DISPATCH_S] == last[schema.WAIT_PYTHON_S] == 0 and untold == ""
    causes = table[list(schema.WAIT_CAUSES)].sum(axis=1)
    assert np.allclose(causes, table[schema.WAITING_S])


def test_copies_to_the_device_and_callbacks_take_their_part_first():
    host = _host([*LAUNCHES, ("input", -1, 40, 60), ("host", 0, 70, 80), ("host", 3, 80, 90)])
    row = _row(waits(TWO_STEPS, host)[0], 0)
    assert row[schema.WAIT_INPUT_S] == pytest.approx(20 * NS)
    assert row[schema.WAIT_HOST_S] == pytest.approx(10 * NS)  # device 3's callback is not 0's
    # the launch at 40 -> 45 lies under the copy (input's): 95 -> 99 is the runtime's own
    assert row[schema.WAIT_DISPATCH_S] == pytest.approx(4 * NS)
    assert row[schema.WAIT_PYTHON_S] == pytest.approx((70 - 20 - 10 - 4) * NS)


def test_without_launch_events_the_waits_between_executions_stay_unexplained():
    for host in (None, _host([("input", -1, 40, 60)])):
        table, untold = waits(TWO_STEPS, host)
        row = _row(table, 0)
        assert row[schema.WAIT_DISPATCH_S] == row[schema.WAIT_PYTHON_S] == 0
        assert row[schema.WAIT_UNEXPLAINED_S] == pytest.approx((80 - (20 if host is not None
                                                                       else 0)) * NS)
        assert "no host launch events" in untold
        assert "ProfileOptions().host_tracer_level = 1" in untold


def test_two_programs_in_a_step_wait_for_dispatch_between_them():
    ev = _events([("p", "a", 0, 0, 0, 10), ("q", "b", 0, 0, 25, 30), ("p", "a", 0, 1, 40, 50)])
    row = _row(waits(ev, _host([*LAUNCHES, ("dispatch", -1, 12, 14)]))[0], 0)
    # 10 -> 25 holds q's launch, 12 -> 14; 30 -> 40 ends where p's launch starts
    assert row[schema.WAIT_DISPATCH_S] == pytest.approx(2 * NS)
    assert row[schema.WAIT_PYTHON_S] == pytest.approx((15 - 2 + 10) * NS)
    # q's launch not in the trace: the gap before it is no claim
    row = _row(waits(ev, _host(LAUNCHES))[0], 0)
    assert row[schema.WAIT_DISPATCH_S] == 0
    assert row[schema.WAIT_PYTHON_S] == pytest.approx(10 * NS)  # 30 -> 40, p's launch at 40
    assert row[schema.WAIT_UNEXPLAINED_S] == pytest.approx(15 * NS)


def test_a_device_waits_for_its_peers_from_its_arrival_to_the_last():
    ev = _events([("p", "all-reduce.1", 0, 0, 20, 40), ("p", "all-reduce.1", 1, 0, 27, 40),
                  ("p", "f", 0, 0, 0, 20), ("p", "f", 1, 0, 0, 27)])
    table, _ = waits(ev, _host(LAUNCHES), collectives={"all-reduce.1"})
    assert _row(table, 0, 0)[schema.WAIT_PEERS_S] == pytest.approx(7 * NS)
    assert _row(table, 0, 1)[schema.WAIT_PEERS_S] == 0


def test_a_thread_idle_inside_its_program_while_the_cores_are_busy_waits_for_a_core():
    # device 0 idles 10 -> 20; device 1 runs 5 -> 15 on the host's one core
    ev = _events([("p", "a", 0, 0, 0, 10), ("p", "b", 0, 0, 20, 30), ("p", "c", 1, 0, 5, 15)])
    assert [list(x) for x in saturated(ev, 1)] == [[0, 20], [15, 30]]  # none 15 -> 20
    assert [list(x) for x in saturated(ev, 2)] == [[5], [10]]
    table, _ = waits(ev, _host(LAUNCHES), cores=1)
    row = _row(table, 0, 0)
    assert row[schema.WAIT_CORE_S] == pytest.approx(5 * NS)  # 10 -> 15
    assert row[schema.WAIT_UNEXPLAINED_S] == pytest.approx(5 * NS)  # 15 -> 20: none ran


# --- stragglers ----------------------------------------------------------------------------
def _collective_steps(late: dict, steps=10, devices=4, jitter=None, host=None, shift=None):
    """EVENTS of one all-reduce per step on each device, arriving at 100 + late[d] (+ jitter)
    and ending together at 200, the step's period 1000 ns; ``shift``: host -> its clock's
    offset."""
    rng = np.random.default_rng(0)
    rows, hosts = [], []
    for s in range(steps):
        for d in range(devices):
            at = s * 1000 + 100 + late.get(d, 0) + (int(rng.integers(0, jitter)) if jitter else 0)
            h = host(d) if host else 0
            off = (shift or {}).get(h, 0)
            rows += [("p", "f", d, s, s * 1000 + off, at + off),
                     ("p", "all-reduce.1", d, s, at + off, s * 1000 + 200 + off)]
            hosts += [h, h]
    return _events(rows, hosts if host else None)


def _arrivals(ev, offsets=None):
    return arrivals(ev, {"all-reduce.1"}, None, offsets)


def test_the_device_late_to_every_collective_is_named_by_its_lead_over_the_next_latest():
    ev = _collective_steps({3: 70, 2: 10})
    found = stragglers(_arrivals(ev), 1000 * NS)
    assert found == [{schema.STRAGGLER_UNIT: "device", schema.STRAGGLER_ID: 3,
                      schema.OP: "all-reduce.1", schema.LATE_S: pytest.approx(60 * NS),
                      schema.LAST_SHARE: 1.0}]


def test_each_collective_says_who_arrived_last_most_often_and_by_how_much():
    ev = _collective_steps({3: 70, 2: 10})
    assert last_by_op(_arrivals(ev)) == {"all-reduce.1": {
        schema.STRAGGLER_UNIT: "device", schema.STRAGGLER_ID: 3, schema.LAST_SHARE: 1.0,
        schema.LATE_S: pytest.approx(60 * NS)}}


def test_identical_devices_with_nothing_injected_name_no_straggler():
    ev = _collective_steps({}, jitter=30)
    assert stragglers(_arrivals(ev), 1000 * NS) == []
    # a device last every time but by less than 5% of the period is not named either
    assert stragglers(_arrivals(_collective_steps({1: 40})), 1000 * NS) == []


def test_a_device_launched_last_is_no_straggler_but_one_slow_from_its_own_start_is():
    """One host launches its devices one after another: device 3 started 70 ns after the
    others and arrived 70 ns after them is the launch order (dispatch), not a straggler; one
    that started with the others and still arrived 70 ns late is."""
    launched = _collective_steps({3: 70}, devices=4)
    starts = launched.groupby([schema.STEP, schema.DEVICE])[schema.START_NS].min()
    starts = starts + np.where(starts.index.get_level_values(schema.DEVICE) == 3, 70, 0)
    assert stragglers(_arrivals(launched), 1000 * NS, {}, starts) == []
    slow = stragglers(_arrivals(launched), 1000 * NS, {},
                      launched.groupby([schema.STEP, schema.DEVICE])[schema.START_NS].min())
    assert [(x[schema.STRAGGLER_ID], x[schema.LATE_S]) for x in slow] == \
        [(3, pytest.approx(70 * NS))]


def test_the_late_process_is_named_with_the_hosts_clocks_aligned_on_collective_ends():
    ev = _collective_steps({2: 80, 3: 80}, devices=4, host=lambda d: d // 2,
                           shift={1: 123_456})
    arr = _arrivals(ev)
    offsets = clock_offsets(arr)
    assert offsets == {0: 0, 1: -123_456}
    found = stragglers(_arrivals(ev, offsets), 1000 * NS, offsets)
    assert [(s[schema.STRAGGLER_UNIT], s[schema.STRAGGLER_ID]) for s in found] == [("process", 1)]
    assert found[0][schema.LATE_S] == pytest.approx(80 * NS)


# --- the verdict ---------------------------------------------------------------------------
def _figures(**causes):
    out = {c: 0.0 for c in schema.WAIT_CAUSES}
    out.update({f"wait_{k}_s": v for k, v in causes.items()})
    out[schema.WAITING_S] = sum(out[c] for c in schema.WAIT_CAUSES)
    out[schema.PERIOD_S] = 1e-3
    return out


def test_a_dominant_cause_gives_one_line_of_verdict_and_fix():
    line = verdict(_figures(dispatch=0.9e-3, unexplained=0.05e-3), [])
    assert line.startswith("dispatch-bound: the devices idle 900 us per step while the runtime "
                           "launches programs (90% of the 1 ms period)")
    assert "fewer, larger programs" in line
    line = verdict(_figures(python=0.9e-3, dispatch=0.05e-3), [])
    assert line.startswith("python-bound: the devices idle 900 us per step while the host runs "
                           "its own code between steps")
    assert "dispatch the next step before blocking on the last" in line
    assert "prefetch" in line and "larger programs" not in line
    assert verdict(_figures(input=0.38e-3), []).startswith("input-bound: 38% of the period")
    assert verdict(_figures(dispatch=0.3e-3, input=0.3e-3, peers=0.3e-3), []) == ""  # none
    assert verdict(_figures(dispatch=0.05e-3), []) == ""  # 5% of the period: not worth a line
    late = [{schema.STRAGGLER_UNIT: "device", schema.STRAGGLER_ID: 3, schema.OP: "all-reduce.1",
             schema.LATE_S: 0.4e-3, schema.LAST_SHARE: 0.9}]
    assert verdict(_figures(peers=0.8e-3), late) == \
        "device 3 reaches each all-reduce.1 400 us late (last in 90% of steps)"


def test_the_harness_paced_steps_wait_for_its_loop_not_for_dispatch():
    """The harness's own capture waits on each step before dispatching the next: the idle
    between steps is its measuring loop's, and the line says so instead of a fix."""
    for cause in ("dispatch", "python"):  # its launches, or its own Python between steps
        line = verdict(_figures(**{cause: 0.9e-3}), [], paced=True)
        assert line.startswith("paced by the harness: it waits on each step before dispatching "
                               "the next, so the devices idle 900 us between steps (90% of the "
                               "1 ms")
        assert "jit the loop body" not in line and "prefetch" not in line
    table, untold = waits(TWO_STEPS, _host(LAUNCHES))
    assert wait_figures(table, untold, [], paced=True)[schema.WAIT_BOUND] == \
        "paced by the harness"


def test_the_step_object_holds_the_median_steps_waits_and_reports_print_them():
    table, untold = waits(TWO_STEPS, _host(LAUNCHES))
    figures = wait_figures(table, untold, [])
    # the last step, with no gap after it, is left out of the median
    assert figures[schema.PERIOD_S] == pytest.approx(100 * NS)
    assert figures[schema.WAIT_DISPATCH_S] == pytest.approx(9 * NS)
    assert figures[schema.WAIT_PYTHON_S] == pytest.approx(61 * NS)
    assert figures[schema.WAIT_BOUND] == "python-bound"
    step = {schema.STEP_S: 30 * NS, schema.COMPUTE_S: 20 * NS, schema.IDLE_S: 10 * NS,
            **figures}
    lines = step_lines(step)
    assert lines[1] == ("waiting 80 ns of the 100 ns period = dispatch 9 ns + python 61 ns + "
                        "unexplained 10 ns")
    assert lines[2].startswith("verdict: python-bound")


# --- the H100 fixtures: a claim cites the trace's events ------------------------------------
@pytest.mark.parametrize("name", ["llama_train-100m", "matmul-B4096-8192x8192-bf16"])
def test_on_the_h100_fixtures_each_claim_cites_events_and_goes_with_them(name):
    from harness.runs.pipeline import analyze_trace
    from harness.step.figures import step_waits
    from harness.trace.load import read_events

    run = analyze_trace(H100 / name, chip="h100")
    trace = read_events(H100 / name / "trace")
    kinds = set(trace.host[schema.KIND])
    # PjRt's launches; no copies to the device, no callbacks (and the user's Python frames)
    assert kinds - {"annotation"} == {"dispatch"}
    step = run.step
    assert step[schema.WAIT_DISPATCH_S] > 0
    assert step[schema.WAIT_EVENTS] == {"dispatch": 5}  # one launch per step, 5 steps
    assert step[schema.WAIT_INPUT_S] == step[schema.WAIT_HOST_S] == 0  # none in the trace
    assert step[schema.WAIT_PEERS_S] == step[schema.WAIT_CORE_S] == 0  # one GPU, own cores
    assert not step[schema.STRAGGLERS]
    gone = step_waits(trace.events, run.ops, pairs=None, host=trace.host.iloc[0:0])
    assert gone[schema.WAIT_DISPATCH_S] == 0 and schema.WAIT_BOUND not in gone
    assert "no host launch events" in gone[schema.WAITS_UNTOLD]
    assert gone[schema.WAIT_EVENTS] == {}


@pytest.mark.parametrize("name, launches", [("mi300x-gemm", 42), ("mi300x-attention", 81)])
def test_where_no_outer_execute_is_recorded_its_helpers_are_the_launches(name, launches):
    """ROCm's StreamExecutor (and XLA:CPU on one device) record only the per-execution helper
    (``...::ExecuteHelper``): 42 and 81 of them on these hosts' planes, each a launch; on the
    H100 (above) the helper sits inside PjRt's Execute and is not counted again."""
    from harness.trace.load import read_events

    host = read_events(H100.parent / "external" / name).host
    assert (host[schema.KIND] == "dispatch").sum() == launches


def test_a_collectives_host_skew_leaves_out_the_wait_for_the_late_process():
    # process 0 reaches the all-reduce at 100, process 1 (its clock 5 us ahead) at 180; both
    # leave at 200: 100 ns moving data each, process 0 waited 80 ns more
    ev = _collective_steps({1: 80}, devices=2, host=lambda d: d, shift={1: 5000}, steps=3)
    skew = host_columns(ev).set_index(schema.OP).loc["all-reduce.1"]
    assert skew[schema.HOST_MIN_S] == pytest.approx(20 * NS)
    assert skew[schema.HOST_SKEW_S] == pytest.approx(0)


def test_a_peer_late_for_want_of_a_core_is_the_cores_cause():
    # device 0 reaches the all-reduce at 10 and waits for device 1, busy in g until 30
    ev = _events([("p", "f", 0, 0, 0, 10), ("p", "all-reduce.1", 0, 0, 10, 40),
                  ("p", "g", 1, 0, 0, 30), ("p", "all-reduce.1", 1, 0, 30, 40)])
    one = _row(waits(ev, _host(LAUNCHES), collectives={"all-reduce.1"}, cores=1)[0], 0, 0)
    assert one[schema.WAIT_CORE_S] == pytest.approx(20 * NS)  # g had the one core
    assert one[schema.WAIT_PEERS_S] == 0
    two = _row(waits(ev, _host(LAUNCHES), collectives={"all-reduce.1"}, cores=2)[0], 0, 0)
    assert two[schema.WAIT_PEERS_S] == pytest.approx(20 * NS)  # a core was free: g was late
    assert two[schema.WAIT_CORE_S] == 0
