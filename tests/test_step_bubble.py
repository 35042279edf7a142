"""The pipeline bubble in the step (``harness.step.bubble``, issue 53): counted from the schedule
the program ran against (S − 1)/(M + S − 1) for GPipe and 1F1B at two (S, M), slots by
arithmetic; priced as the schedule's share of the measured stage loop (the ``while`` run once a
step whose trip count is the schedule's ticks); the line the report prints. On 8 CPU devices
sharing 2 cores the time is an estimate (docs/step.md): the count is what is checked; a real
pipelined run is behind ``-m slow``."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from profiling import env_for, harness

from harness import schema
from harness.hlo import parse_module
from harness.report.step import step_lines
from harness.step.bubble import bubble, count, loop_s, stage_loops


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S, M", [(4, 8), (2, 4)])
def test_the_bubble_is_counted_from_the_schedule_as_the_formula_says(schedule, S, M):
    c = count(schedule, S, M)
    # M + S − 1 ticks of forwards (and as many of backwards), each stage working in M of them:
    # S − 1 idle slots a stage in each
    assert c["slots"] == 2 * S * (M + S - 1)
    assert c["idle_slots"] == 2 * S * (S - 1)
    assert c[schema.BUBBLE_SHARE] == pytest.approx((S - 1) / (M + S - 1))
    assert c["predicted_share"] == pytest.approx((S - 1) / (M + S - 1))
    # the loop the program runs: GPipe's forward (and its transpose), 1F1B's one loop
    assert c["ticks"] == (M + S - 1 if schedule == "gpipe" else M + 2 * S - 2)


def test_the_counts_at_four_stages_and_eight_microbatches():
    assert count("1f1b", 4, 8)["idle_slots"] == 24 and count("1f1b", 4, 8)["slots"] == 88
    assert count("gpipe", 4, 8)[schema.BUBBLE_SHARE] == pytest.approx(3 / 11)  # 27%
    c = count("circular", 4, 8, 2)  # v = 2: 2·8 + 3 = 19 ticks, 3 of them a stage's bubble
    assert (c["idle_slots"], c["slots"]) == (2 * 4 * 3, 2 * 4 * 19)
    assert c[schema.BUBBLE_SHARE] == pytest.approx(3 / 19)


# a module whose entry runs a loop of N trips once, and inside it a loop of 11 trips
TRIPS = 'backend_config={{"known_trip_count":{{"n":"{}"}}}}'
HLO = """HloModule m, is_scheduled=true

c {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] constant(11)
  ROOT lt = pred[] compare(i, k), direction=LT
}

inner {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[]) tuple(n)
}

outer {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  z = s32[] constant(0)
  t0 = (s32[]) tuple(z)
  w2 = (s32[]) while(t0), condition=c, body=inner, INNER
  ROOT t = (s32[]) tuple(n)
}

ENTRY e {
  z = s32[] constant(0)
  t = (s32[]) tuple(z)
  ROOT w = (s32[]) while(t), condition=c, body=outer, OUTER
}
"""


def _module(trips: int):
    return parse_module(HLO.replace("INNER", TRIPS.format(11))
                        .replace("OUTER", TRIPS.format(trips)))


def test_the_stage_loop_is_the_while_run_once_a_step_with_the_schedules_trips():
    module = _module(11)
    assert stage_loops(module, 11) == {"w"}  # w2 runs 11 times a step: not the stage loop
    assert stage_loops(module, 14) == set()
    assert stage_loops(None, 11) == set()


def _loops(rows) -> pd.DataFrame:
    """EVENTS of (op, device, step, duration) rows."""
    return pd.DataFrame(rows, columns=[schema.OP, schema.DEVICE, schema.STEP,
                                       schema.DURATION_NS]).assign(**{schema.START_NS: 0})


def test_the_loop_time_is_the_median_over_steps_then_devices():
    ev = _loops([("w", 0, 0, 100), ("w", 0, 1, 120), ("w", 0, 2, 110), ("f", 0, 0, 999),
                 ("w", 1, 0, 200), ("w", 1, 1, 220), ("v", 1, 1, 20)])
    # device 0: median of 100, 120, 110 = 110; device 1: of 200 and 240 (w + v) = 220
    assert loop_s(ev, {"w", "v"}) == pytest.approx((110 + 220) / 2 * 1e-9)
    assert loop_s(ev, set()) is None


CONFIG = {"stages": 4, "microbatches": 8, "schedule": "1f1b", "repeats": 1}


def test_the_step_object_holds_the_bubble_priced_on_the_stage_loop():
    module = _module(14)  # 1F1B at S = 4, M = 8: M + 2S − 2 = 14 ticks
    ev = _loops([("w", d, s, 200_000_000) for d in range(2) for s in range(3)])
    out = bubble(CONFIG, module, ev, {schema.STEP_S: 0.25})
    assert out[schema.BUBBLE_SHARE] == pytest.approx(24 / 88)
    assert out[schema.BUBBLE_S] == pytest.approx(3 / 11 * 0.2)  # 1F1B's time share, 3/11
    assert out[schema.BUBBLE_LINE] == (
        "pipeline bubble: 27% of stage iterations carry no microbatch (24 of 88; predicted 27%), "
        "4 stages x 8 microbatches, 1f1b: 54.5 ms of the 200 ms stage loop (27% of its "
        "stage-time, 22% of the step), computed on invalid microbatches")
    lines = step_lines({schema.STEP_S: 0.25, schema.COMPUTE_S: 0.25, schema.IDLE_S: 0.0, **out})
    assert out[schema.BUBBLE_LINE] in lines


def test_a_run_that_does_not_pipeline_has_no_bubble_and_one_without_hlo_is_not_priced():
    assert bubble(None, None, _loops([]), {}) == {}
    assert bubble({**CONFIG, "stages": 1}, None, _loops([]), {}) == {}
    assert bubble({**CONFIG, "schedule": "zb-h2"}, None, _loops([]), {}) == {}  # predicted only
    out = bubble(CONFIG, None, _loops([("w", 0, 0, 10)]), {})
    assert schema.BUBBLE_S not in out and out[schema.BUBBLE_SHARE] == pytest.approx(3 / 11)
    assert out[schema.BUBBLE_LINE].endswith("not priced (the stage loop is not in the trace's HLO)")


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_pipelined_run_reports_its_bubble(tmp_path, schedule):
    """``harness run llama_train --preset tiny_pp``: 4 stages x 8 microbatches on 8 CPU
    devices (two to five minutes on a loaded 2-core host)."""
    done = harness(tmp_path, "run", "llama_train", "--preset", "tiny_pp", "--set",
                   f"schedule={schedule}", "--out", str(tmp_path), "--format", "json",
                   env=env_for(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    step = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{"):])[0]["step"]
    c = step[schema.BUBBLE]
    assert (c["idle_slots"], c["slots"]) == (24, 88)
    assert step[schema.BUBBLE_SHARE] == pytest.approx(3 / 11)
    assert 0 < step[schema.BUBBLE_S] < c["loop_s"]  # priced on the stage loop found
    assert step[schema.BUBBLE_LINE].startswith("pipeline bubble: 27% of stage iterations")
