"""harness.step.replay: measured durations for the replay, from hand-drawn timelines (ns)."""
from __future__ import annotations

import pytest
from timelines import NS, events

from harness.step.replay import replay_durations


def test_gpu_a_start_is_its_transfer_and_gaps_go_to_the_op_after_them():
    # core: dot [0,40), gap [40,50), add [50,60); the all-gather's kernel [10,70) on its stream
    ev = events([("dot", 0, 0, 0, 40), ("all-gather-start", 0, 0, 10, 60), ("add", 0, 0, 50, 10),
                 ("dot", 1, 0, 0, 99)])  # another device: not replayed
    core, flight = replay_durations(
        ev, {"dot": 1, "add": 1, "all-gather-start": 1}, device=0, step=0, trace_names={},
        pairs={"all-gather-start": "all-gather-done"}, time_on="start")
    assert core["dot"] == pytest.approx(40 * NS)
    assert core["add"] == pytest.approx((10 + 10) * NS)  # its 10 ns and the 10 ns gap before it
    assert core["all-gather-start"] == core["all-gather-done"] == 0
    assert flight == {"all-gather-start": pytest.approx(60 * NS)}


def test_tpu_the_transfer_runs_from_the_start_to_the_dones_end():
    # XLA Ops: copy-start [0,2), dot [2,30), copy-done [30,50) (it waited 20 ns)
    ev = events([("copy-start.1", 0, 0, 0, 2), ("dot", 0, 0, 2, 28), ("copy-done.1", 0, 0, 30, 20)])
    core, flight = replay_durations(
        ev, {"copy-start.1": 1, "dot": 1, "copy-done.1": 1}, device=0, step=0, trace_names={},
        pairs={"copy-start.1": "copy-done.1"}, time_on="done")
    assert flight == {"copy-start.1": pytest.approx(50 * NS)}
    assert core["dot"] == pytest.approx(28 * NS) and core["copy-done.1"] == 0


def test_an_op_run_twice_per_step_gets_its_mean_and_trace_names_map_back():
    # a loop body op twice per step, 10 and 30 ns, renamed by the trace as GPU async ops are
    ev = events([("fusion_kernel", 0, 0, 0, 10), ("fusion_kernel", 0, 0, 10, 30),
                 ("fusion_kernel", 0, 1, 100, 50)])
    core, _ = replay_durations(ev, {"fusion_kernel": 2}, device=0, step=0,
                               trace_names={"fusion-start.1": "fusion_kernel"}, pairs={},
                               time_on="start")
    assert core == {"fusion-start.1": pytest.approx(20 * NS)}  # (10 + 30) / 2, step 0 only
