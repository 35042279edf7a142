"""The python part of the wait between steps named by what the trace holds of the user's
(``harness.trace.host_events``: the user's ``TraceAnnotation``s and Python frames on the thread
that launches programs; ``harness.step.between.python_names``): the outermost of nested ones,
none that holds a launch or lies in the runtime's own events, each name's time its events'
overlap with the python part alone (the gap less the runtime's launch, copies and callbacks),
a name on two threads at once counted once. On a trace made here, and on event tables whose
answers are arithmetic. (The same under ``harness profile``: tests/test_waits_host_time.py.)"""
from __future__ import annotations

import pandas as pd
import pytest

from harness import schema
from harness.report.step import waits_line
from harness.step.verdict import wait_figures
from harness.step.waits import waits, waits_named
from harness.trace.host_events import host_events
from harness.trace.load import read_xspace
from harness.trace.xplane import XSpace

NS = 1e-9
HELPER = "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice"


def _space(lines: dict[str, list[tuple[str, int, int]]]) -> XSpace:
    """A ``/host:CPU`` plane with ``lines``: name -> its events (name, start ns, end ns)."""
    space = XSpace()
    p = space.planes.add(id=1, name="/host:CPU")
    ids: dict[str, int] = {}
    for i, (line, events) in enumerate(lines.items()):
        out = p.lines.add(id=i + 1, name=line)
        for name, s, e in events:
            mid = ids.setdefault(name, len(ids) + 1)
            p.event_metadata[mid].name = name
            out.events.add(metadata_id=mid, offset_ps=1000 * s, duration_ps=1000 * (e - s))
    return space


def _rows(host: pd.DataFrame, kind: str) -> list[tuple[str, int, int]]:
    h = host[host[schema.KIND] == kind]
    return [(str(n), int(s), int(s + d)) for n, s, d in
            zip(h[schema.EVENT_NAME], h[schema.START_NS], h[schema.DURATION_NS])]


def test_the_users_outermost_annotations_on_the_launching_thread_are_read():
    space = _space({
        "python": [
            ("train", 0, 1000),  # a step marker around the launch: names no work between
            ("load_batch", 100, 500), ("inner", 200, 300), ("$time sleep", 210, 290),
            ("$profiler.py:417 wrapper", 550, 700), ("log_it", 560, 690),  # wrapper passed over
            ("PjitFunction(f)", 780, 950), ("foo", 785, 795),  # inside the runtime's: its own
            (HELPER, 800, 900), ("Handle inputs", 810, 820),
            ("Wait for usage holds", 960, 970),
        ],
        "loader": [("prefetch", 100, 400)],  # launches nothing: the runtime's or idle
        "tf_XLAPjRtCpuClient/1": [("load_batch", 0, 10)],  # the CPU devices' ops
    })
    host = host_events(read_xspace(space.SerializeToString())[0])
    assert list(host.columns) == list(schema.HOST_EVENTS)
    assert _rows(host, "annotation") == [("load_batch", 100, 500), ("log_it", 560, 690)]
    assert _rows(host, "dispatch") == [(HELPER, 800, 900)]  # no outer Execute: the helper
    assert len(host) == 3


def test_a_python_frame_outside_the_annotations_is_named_and_the_loop_around_is_not():
    # python_tracer_level 1: the loop's own frame holds the launches; a sleep at module level
    space = _space({"python": [
        ("$train.py:30 main", 0, 2000),
        ("$time sleep", 10, 90), ("CommonPjRtLoadedExecutable::Execute", 100, 120),
        ("$train.py:12 load_batch", 130, 190), ("$time sleep", 140, 180),
        ("CommonPjRtLoadedExecutable::Execute", 200, 220)]})
    host = host_events(read_xspace(space.SerializeToString())[0])
    assert _rows(host, "annotation") == [("$time sleep", 10, 90),
                                         ("$train.py:12 load_batch", 130, 190)]
    assert len(_rows(host, "dispatch")) == 2


# two steps on one device, 10 ns of work each: 10 -> 100 waits for the host
STEPS = pd.DataFrame({schema.PROGRAM: "p", schema.OP: "a", schema.DEVICE: 0, schema.STEP: [0, 1],
                      schema.START_NS: [0, 100], schema.DURATION_NS: 10})


def _host(rows) -> pd.DataFrame:
    """HOST_EVENTS from (kind, name, start, end) rows, host 0, every device."""
    df = pd.DataFrame(rows, columns=[schema.KIND, schema.EVENT_NAME, schema.START_NS, "end"])
    df[schema.DURATION_NS] = df.pop("end") - df[schema.START_NS]
    return df.assign(**{schema.HOST: 0, schema.DEVICE: -1})[list(schema.HOST_EVENTS)]


RUNTIME = [("input", "TransferToDevice", 20, 30), ("dispatch", "Execute", 90, 102)]
ANNOTATED = [*RUNTIME,
             ("annotation", "load_batch", 12, 80), ("annotation", "load_batch", 40, 85),
             ("annotation", "log", 85, 95), ("annotation", "early", 0, 8)]


def test_each_name_takes_its_overlap_with_the_python_part_alone():
    table, untold, names = waits_named(STEPS, _host(ANNOTATED))
    plain, _ = waits(STEPS, _host(RUNTIME))
    pd.testing.assert_frame_equal(table, plain)  # the names change no cause's time
    row = table[table[schema.STEP] == 0].iloc[0]
    # the gap 10 -> 100 less the copy 20 -> 30 and the launch 90 -> 100
    assert row[schema.WAIT_PYTHON_S] == pytest.approx(70 * NS)
    got = {n: t for n, t in zip(names[schema.EVENT_NAME], names[schema.WAIT_PYTHON_S])}
    # load_batch on two threads, 12 -> 85 once, less the copy: 12 -> 20 and 30 -> 85
    assert got == pytest.approx({"load_batch": 63 * NS, "log": 5 * NS})  # log: 85 -> 90
    assert set(names[schema.STEP]) == {0} and set(names[schema.DEVICE]) == {0}
    figures = wait_figures(table, untold, [], names=names)
    assert figures[schema.WAIT_PYTHON_NAMES] == pytest.approx({"load_batch": 63 * NS,
                                                               "log": 5 * NS})
    assert "python 70 ns (load_batch 63 ns, log 5 ns)" in waits_line(figures)


def test_without_annotations_nothing_is_named_and_a_small_name_is_left_out():
    table, untold, names = waits_named(STEPS, _host(RUNTIME))
    assert names.empty and list(names.columns) == list(schema.WAIT_NAMES)
    figures = wait_figures(table, untold, [], names=names)
    assert schema.WAIT_PYTHON_NAMES not in figures
    assert "python 70 ns +" in waits_line(figures)
    # 3 ns of the 70: under the share named (verdict.NAMES_SHARE, 5%)
    table, untold, names = waits_named(STEPS, _host([*RUNTIME, ("annotation", "x", 40, 43)]))
    assert names[schema.WAIT_PYTHON_S].sum() == pytest.approx(3 * NS)
    assert schema.WAIT_PYTHON_NAMES not in wait_figures(table, untold, [], names=names)


def test_a_name_is_each_devices_mean_and_an_annotation_under_a_launch_is_not_python():
    # device 1 waits 10 -> 100 too; its launch is its own (device 1 alone): 50 -> 100
    ev = pd.concat([STEPS, STEPS.assign(**{schema.DEVICE: 1})], ignore_index=True)
    host = _host([("dispatch", "Execute", 90, 102), ("annotation", "load_batch", 10, 60)])
    host = pd.concat([host, _host([("dispatch", "Execute", 50, 101)]).assign(
        **{schema.DEVICE: 1})], ignore_index=True)
    table, untold, names = waits_named(ev, host)
    by = {d: t for d, t in zip(names[schema.DEVICE], names[schema.WAIT_PYTHON_S])}
    assert by == pytest.approx({0: 50 * NS, 1: 40 * NS})  # 10 -> 60; 10 -> 50
    figures = wait_figures(table, untold, [], names=names)
    assert figures[schema.WAIT_PYTHON_NAMES] == pytest.approx({"load_batch": 45 * NS})
