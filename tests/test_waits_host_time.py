"""The host's time between steps, named by what the trace shows (``harness.step.between``):
a device idle between two executions while its host launched the next waited for the runtime's
launch (its ``Execute`` events: dispatch, or a core where the host's cores all ran ops), for
copies and callbacks (input, host), or for the host's own work that no runtime event covers
(python). On event tables whose answers are arithmetic, then on two programs made to wait, run
under ``harness profile`` as a user runs them (``tests/programs/``): a 20 ms sleep between steps
is python within 10% of the sleep as the host's clock measured it, named by the
``TraceAnnotation`` it sleeps in where it sleeps in one; a fresh 64 MB input each step is input
or python, never dispatch with the dispatch fix."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiling import harness, report_of

from harness import schema
from harness.step.verdict import wait_figures
from harness.step.waits import waits

NS = 1e-9
PROGRAMS = Path(__file__).parent / "programs"


def _events(rows) -> pd.DataFrame:
    """EVENTS from (program, op, device, step, start, end) rows."""
    df = pd.DataFrame(rows, columns=[schema.PROGRAM, schema.OP, schema.DEVICE, schema.STEP,
                                     schema.START_NS, "end"])
    df[schema.DURATION_NS] = df.pop("end") - df[schema.START_NS]
    return df


def _host(rows) -> pd.DataFrame:
    """HOST_EVENTS from (kind, device, start, end) rows, host 0."""
    df = pd.DataFrame(rows, columns=[schema.KIND, schema.DEVICE, schema.START_NS, "end"])
    df[schema.DURATION_NS] = df.pop("end") - df[schema.START_NS]
    return df.assign(**{schema.HOST: 0, schema.EVENT_NAME: ""})[list(schema.HOST_EVENTS)]


def _row(table, step, device=0):
    return table[(table[schema.STEP] == step) & (table[schema.DEVICE] == device)].iloc[0]


def _adds_up(table, events):
    """The causes add up to the waiting, and the waiting and the ops' time to the period."""
    causes = table[list(schema.WAIT_CAUSES)].sum(axis=1)
    assert np.allclose(causes, table[schema.WAITING_S], rtol=0, atol=1e-15)
    for _, r in table.iterrows():
        mine = events[(events[schema.DEVICE] == r[schema.DEVICE])
                      & (events[schema.STEP] == r[schema.STEP])]
        busy = mine[schema.DURATION_NS].sum() * NS  # (no two ops of a device overlap here)
        assert r[schema.WAITING_S] + busy == pytest.approx(r[schema.PERIOD_S], abs=1e-15)


# two steps on one device, 10 ns of work each, 90 ns apart: 10 -> 100 waits for the host
STEPS = _events([("p", "a", 0, 0, 0, 10), ("p", "a", 0, 1, 100, 110)])


def test_the_launch_is_dispatch_and_the_rest_of_the_gap_the_hosts_own_work():
    # the runtime launches step 1 from 90 (its Execute runs past the first op's start)
    table, untold = waits(STEPS, _host([("dispatch", -1, 90, 102)]))
    row = _row(table, 0)
    assert row[schema.PERIOD_S] == pytest.approx(100 * NS)
    assert row[schema.WAIT_DISPATCH_S] == pytest.approx(10 * NS)  # 90 -> 100
    assert row[schema.WAIT_PYTHON_S] == pytest.approx(80 * NS)  # 10 -> 90: no runtime event
    assert row[schema.WAIT_UNEXPLAINED_S] == 0 and untold == ""
    _adds_up(table, STEPS)
    figures = wait_figures(table, untold, [])
    assert figures[schema.WAIT_BOUND] == "python-bound"
    assert "dispatch the next step before blocking on the last" in figures[schema.WAIT_VERDICT]


def test_a_launch_that_fills_the_gap_is_dispatch_bound():
    table, untold = waits(STEPS, _host([("dispatch", -1, 12, 101)]))
    row = _row(table, 0)
    assert row[schema.WAIT_DISPATCH_S] == pytest.approx(88 * NS)  # 12 -> 100
    assert row[schema.WAIT_PYTHON_S] == pytest.approx(2 * NS)  # 10 -> 12
    figures = wait_figures(table, untold, [])
    assert figures[schema.WAIT_BOUND] == "dispatch-bound"
    assert "fewer, larger programs" in figures[schema.WAIT_VERDICT]


def test_copies_and_callbacks_take_their_part_and_a_launch_under_them_is_not_counted_twice():
    host = _host([("input", -1, 20, 40), ("dispatch", -1, 30, 50), ("host", -1, 60, 70),
                  ("dispatch", -1, 95, 102)])
    table, _ = waits(STEPS, host)
    row = _row(table, 0)
    assert row[schema.WAIT_INPUT_S] == pytest.approx(20 * NS)  # 20 -> 40
    assert row[schema.WAIT_HOST_S] == pytest.approx(10 * NS)  # 60 -> 70
    assert row[schema.WAIT_DISPATCH_S] == pytest.approx((10 + 5) * NS)  # 40 -> 50, 95 -> 100
    assert row[schema.WAIT_PYTHON_S] == pytest.approx((90 - 20 - 10 - 15) * NS)
    _adds_up(table, STEPS)
    # a copy that holds most of the gap: input-bound, prefetch
    table, untold = waits(STEPS, _host([("input", -1, 10, 90), ("dispatch", -1, 95, 102)]))
    figures = wait_figures(table, untold, [])
    assert figures[schema.WAIT_BOUND] == "input-bound"


def test_a_launch_while_the_cores_all_ran_ops_waited_for_a_core():
    # device 1 runs 20 -> 60 on the host's one core while device 0 waits for step 1, launched
    # from 40; device 1 then waits 60 -> 100 under the launch with the core free
    ev = _events([("p", "a", 0, 0, 0, 10), ("p", "b", 1, 0, 20, 60),
                  ("p", "a", 0, 1, 100, 110), ("p", "b", 1, 1, 100, 110)])
    table, _ = waits(ev, _host([("dispatch", -1, 40, 101)]), cores=1)
    zero, one = _row(table, 0, 0), _row(table, 0, 1)
    assert zero[schema.WAIT_CORE_S] == pytest.approx(20 * NS)  # 40 -> 60: device 1 ran
    assert zero[schema.WAIT_DISPATCH_S] == pytest.approx(40 * NS)  # 60 -> 100
    assert zero[schema.WAIT_PYTHON_S] == pytest.approx(30 * NS)  # 10 -> 40
    assert one[schema.WAIT_DISPATCH_S] == pytest.approx(40 * NS)  # 60 -> 100
    assert one[schema.WAIT_CORE_S] == one[schema.WAIT_PYTHON_S] == 0
    _adds_up(table, ev)


def test_without_launch_events_nothing_is_claimed_for_the_host():
    table, untold = waits(STEPS, _host([("input", -1, 20, 40)]))
    row = _row(table, 0)
    assert row[schema.WAIT_PYTHON_S] == row[schema.WAIT_DISPATCH_S] == 0
    assert row[schema.WAIT_UNEXPLAINED_S] == pytest.approx(70 * NS)  # 90 less the copy's 20
    assert "(dispatch, python, input, host callbacks) is unexplained" in untold


# --- two programs made to wait, under harness profile ----------------------------------------
def _profile(tmp_path: Path, script: str, *args: str) -> dict:
    """``harness profile --format json SCRIPT ARGS`` (the script's own device count: one CPU
    device), its JSON report's step object."""
    shutil.copy(PROGRAMS / script, tmp_path / script)
    done = harness(tmp_path, "profile", "--chip", "cpu", "--format", "json", script, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return report_of(done.stdout)["step"]


def _line(step: dict) -> str:
    return ", ".join(f"{c} {step[c] * 1e3:.2f} ms" for c in schema.WAIT_CAUSES if step.get(c))


def test_a_sleep_between_steps_is_the_hosts_own_work_not_dispatch(tmp_path):
    step = _profile(tmp_path, "sleep_between_steps.py", "0.020", "12", "took.json")
    took = float(np.median(json.loads((tmp_path / "took.json").read_text())))
    print(f"between steps {took * 1e3:.2f} ms by the host's clock: period "
          f"{step[schema.PERIOD_S] * 1e3:.2f} ms = {_line(step)}; {step.get(schema.WAIT_VERDICT)}")
    # the host's time between steps as its clock measured it (a 20 ms sleep asked; a loaded
    # host oversleeps)
    assert abs(step[schema.WAIT_PYTHON_S] - took) <= 0.1 * took
    assert step[schema.WAIT_PYTHON_S] >= 0.9 * 0.020
    assert step[schema.WAIT_DISPATCH_S] < 0.1 * step[schema.WAIT_PYTHON_S]
    assert step[schema.WAIT_BOUND] == "python-bound"
    assert "prefetch" in step[schema.WAIT_VERDICT]
    assert "larger programs" not in step[schema.WAIT_VERDICT]
    assert schema.WAIT_PYTHON_NAMES not in step  # no annotation of the user's: none named


def test_a_sleep_inside_a_trace_annotation_names_the_python_wait(tmp_path):
    step = _profile(tmp_path, "sleep_between_steps.py", "0.020", "12", "took.json", "load_batch")
    took = float(np.median(json.loads((tmp_path / "took.json").read_text())))
    names = step.get(schema.WAIT_PYTHON_NAMES, {})
    print(f"between steps {took * 1e3:.2f} ms by the host's clock: {_line(step)}; named "
          f"{ {k: round(v * 1e3, 2) for k, v in names.items()} }")
    python = step[schema.WAIT_PYTHON_S]
    assert list(names)[:1] == ["load_batch"]
    assert abs(names["load_batch"] - python) <= 0.1 * python  # the sleep is the python wait
    assert names["load_batch"] >= 0.9 * 0.020


def test_a_fresh_64mb_input_each_step_is_input_or_the_hosts_own_work_never_dispatch(tmp_path):
    step = _profile(tmp_path, "fresh_input_each_step.py", "64", "8")
    print(f"period {step[schema.PERIOD_S] * 1e3:.2f} ms = {_line(step)}; "
          f"{step.get(schema.WAIT_VERDICT)}")
    host = step[schema.WAIT_INPUT_S] + step[schema.WAIT_PYTHON_S]
    assert host >= 0.8 * step[schema.WAITING_S]
    assert step[schema.WAIT_DISPATCH_S] < 0.1 * host
    assert step.get(schema.WAIT_BOUND) in ("python-bound", "input-bound")
    assert "larger programs" not in step[schema.WAIT_VERDICT]
