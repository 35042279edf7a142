"""The column decoder (``harness.trace.space``, ``harness.trace.wire``) against protobuf's own
parse of the same bytes, line by line, and the EVENTS it gives against the per-event decoder
this project used before (``tests/reference_decode.py``), on every trace fixture and on CPU
traces made here with plain ``jax.profiler``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reference_decode import reference_events, same_events

from harness import schema
from harness.trace import parallel, wire
from harness.trace.load import find_trace_file, read_events, read_xspace
from harness.trace.varint import encode
from harness.trace.xplane import XEvent, XLine, XSpace

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = sorted(p.parent for p in FIXTURES.rglob("*.xplane.pb"))
KINDS = {wire.DOUBLE: "double_value", wire.UINT64: "uint64_value", wire.INT64: "int64_value",
         wire.STR: "str_value", wire.BYTES: "bytes_value", wire.REF: "ref_value"}


def _same_as_protobuf(raw: bytes) -> int:
    """Check every event and stat of one line against protobuf's parse; returns the events."""
    line = XLine.FromString(raw)
    ev = wire.read_line(raw).events()
    assert len(ev) == len(line.events)
    for column in ("metadata_id", "offset_ps", "duration_ps"):
        expect = np.asarray([getattr(e, column) for e in line.events], np.int64)
        np.testing.assert_array_equal(getattr(ev, column), expect, err_msg=column)
    st = ev.stats()
    expect = [(i, s.metadata_id, s.WhichOneof("value")) for i, e in enumerate(line.events)
              for s in e.stats]
    assert [(int(r), int(m), KINDS.get(int(k))) for r, m, k in
            zip(st.row, st.metadata_id, st.kind)] == expect
    stats = [s for e in line.events for s in e.stats]
    for i, s in enumerate(stats):
        kind = s.WhichOneof("value")
        if kind in ("str_value", "bytes_value"):
            assert st.text(i) == getattr(s, kind)
        elif kind == "double_value":
            assert st.number[i] == s.double_value or np.isnan(s.double_value)
        elif kind:
            assert int(st.value[i]) % 2**64 == getattr(s, kind) % 2**64
    return len(ev)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name if p.name in (
    "profile", "trace") else p.name)
def test_every_line_of_every_fixture_decodes_as_protobuf_reads_it(trace):
    data = find_trace_file(trace).read_bytes()
    space, _ = read_xspace(data)
    reference = XSpace.FromString(data)
    assert [p.name for p in space.planes] == [p.name for p in reference.planes]
    events = 0
    for plane, ref in zip(space.planes, reference.planes):
        assert [line.name for line in plane.lines] == [line.name for line in ref.lines]
        assert dict(plane.event_metadata) == dict(ref.event_metadata)
        for line in plane.lines:
            events += _same_as_protobuf(bytes(line.raw()))
    assert events > 100


def _schedule_of(path):
    """What ``harness.trace.decode.decode`` gives the GPU format: each program's ops in
    schedule order, from the HLO the trace embeds."""
    from harness.hlo import schedule
    from harness.trace.decode import _Embedded

    embedded = _Embedded(read_xspace(path)[0])
    return lambda name: schedule(*found) if (found := embedded.get((name, ""))) else None


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name if p.name in (
    "profile", "trace") else p.name)
def test_fixture_events_equal_the_previous_decoders(trace):
    schedule_of = _schedule_of(trace)
    read = read_events(trace, schedule_of=schedule_of)
    expect, stepped = reference_events(trace, schedule_of)
    same_events(read.events, expect)
    assert read.stepped == stepped


def test_cpu_trace_events_equal_the_previous_decoders(cpu_traces):
    for trace in cpu_traces:
        read = read_events(trace)
        expect, stepped = reference_events(trace)
        assert read.format == "cpu" and read.stepped == stepped
        assert read.events[schema.DEVICE].nunique() == 8
        same_events(read.events, expect)


@pytest.mark.filterwarnings("ignore:os.fork")  # jax ran here; the workers only decode
def test_lines_read_in_worker_processes_give_the_same_events(cpu_traces, monkeypatch):
    if not parallel._can_fork():
        pytest.skip("no fork here: lines are read in this process")
    assert parallel.workers(64 << 20, 8) == 1  # jax is imported: no workers unless asked
    serial = read_events(cpu_traces[0]).events
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    assert parallel.workers(0, 8) == 2
    pd.testing.assert_frame_equal(read_events(cpu_traces[0]).events, serial)


def test_a_line_of_every_field_kind_decodes_as_protobuf_reads_it():
    """proto3 leaves zero metadata ids and durations out, keeps a oneof offset of 0, writes a
    negative int64 in 10 bytes; events may hold no stats, or many of every kind."""
    line = XLine(id=3, name="stream", timestamp_ns=5)
    values = [{"int64_value": -1}, {"uint64_value": 2**64 - 1}, {"double_value": 0.25},
              {"str_value": "fusion.1 ü"}, {"bytes_value": b"\x00\xff\x22"},
              {"ref_value": 7}, {"int64_value": 0}, {}]
    for i, (mid, off, dur) in enumerate([(1, 0, 7), (0, 3_000, 0), (2, 9_000, 0), (0, 0, 0),
                                         (3, 2**40, 11_000), (3, 1, 1)]):
        ev = line.events.add(metadata_id=mid, offset_ps=off, duration_ps=dur)
        for k, value in enumerate(values[:i * 2]):
            ev.stats.add(metadata_id=k, **value)
    line.events.add(metadata_id=4, num_occurrences=2)  # an aggregated event: no offset
    line.display_name = "after the events"
    assert _same_as_protobuf(line.SerializeToString()) == 7


def test_events_not_written_back_to_back_are_read_all_the_same():
    """A writer may put a line's own fields between its events: the events are then laid out
    anew, not found by their sizes."""
    a, b = XLine(name="x", timestamp_ns=1), XLine(duration_ps=9)
    a.events.add(metadata_id=1, offset_ps=10, duration_ps=20).stats.add(metadata_id=2,
                                                                         int64_value=5)
    b.events.add(metadata_id=2, offset_ps=30, duration_ps=40)
    raw = a.SerializeToString() + b.SerializeToString()  # fields interleaved: valid protobuf
    assert _same_as_protobuf(raw) == 2


@pytest.mark.parametrize("cut", [3, 20, 41])
def test_a_line_cut_short_is_a_decode_error(cut):
    from google.protobuf.message import DecodeError

    line = XLine()
    for i in range(4):
        line.events.add(metadata_id=i + 1, offset_ps=1000 * i, duration_ps=5).stats.add(
            metadata_id=1, str_value="abc")
    with pytest.raises(DecodeError):
        wire.read_line(line.SerializeToString()[:cut]).events().stats()


def test_lines_read_in_small_blocks_give_the_same_events(cpu_traces, monkeypatch):
    """A line of millions of events is read ``BLOCK`` events at a time: blocks of 7 events
    give what one block gives."""
    from harness.trace import varint

    whole = read_events(cpu_traces[0]).events
    gpu = read_events(TRACES[0]).events
    monkeypatch.setattr(varint, "BLOCK", 7)
    pd.testing.assert_frame_equal(read_events(cpu_traces[0]).events, whole)
    pd.testing.assert_frame_equal(read_events(TRACES[0]).events, gpu)
    for plane in read_xspace(TRACES[0])[0].planes:
        for line in plane.lines:
            _same_as_protobuf(bytes(line.raw()))


@pytest.mark.filterwarnings("ignore:os.fork")
def test_large_results_come_back_from_workers_through_files(cpu_traces, monkeypatch):
    if not parallel._can_fork():
        pytest.skip("no fork here: lines are read in this process")
    serial = read_events(cpu_traces[0]).events
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    monkeypatch.setattr(parallel, "SPILL_BYTES", 0)  # every array through a file
    pd.testing.assert_frame_equal(read_events(cpu_traces[0]).events, serial)


def test_a_plane_with_its_metadata_before_its_lines_reads_the_same():
    """Writers put a plane's lines before its metadata; a plane written the other way round
    (two partial messages, one after the other: valid protobuf) is scanned record by record."""
    data = find_trace_file(TRACES[0]).read_bytes()
    turned = b"".join(b"\x0a" + encode(len(p)) + p  # XSpace.planes (field 1), each
                      for p in map(_meta_first, XSpace.FromString(data).planes))
    assert turned != data
    pd.testing.assert_frame_equal(read_events(turned).events, read_events(data).events)


def _meta_first(plane) -> bytes:
    """A plane's bytes with its metadata fields first, its lines last."""
    meta = XSpace().planes.add()
    meta.CopyFrom(plane)
    del meta.lines[:]
    lines = XSpace().planes.add()
    lines.lines.extend(plane.lines)
    return meta.SerializeToString() + lines.SerializeToString()


@pytest.mark.filterwarnings("ignore:os.fork")  # jax ran here; the workers only decode
def test_an_event_kind_is_planned_from_its_first_event_in_line_order(tmp_path, monkeypatch):
    """A kind whose first event (on the first line) has no ``hlo_op`` is no op anywhere, even
    where a later line's events of it have one; a kind whose first event is an op stays one
    where a later event lacks its stats (device and run -1). Lines read apart (in workers, each
    planning its own kinds) give what lines read in order give."""
    from xspace_text import plane, serialize

    us = 1000
    python = [("step", 1000 * us, 900 * us, {"step_num": 0}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 1001 * us, 5 * us, {"run_id": 7})]
    op = {"hlo_module": "jit_f", "device_ordinal": 0, "run_id": 7}
    first = [("fusion.1", 1100 * us, 10 * us, {}),                      # fusion.1: no op
             ("dot.2", 1200 * us, 20 * us, {"hlo_op": "dot.2", **op})]  # dot.2: an op
    second = [("fusion.1", 1300 * us, 30 * us, {"hlo_op": "fusion.1", **op}),
              ("dot.2", 1400 * us, 40 * us, {}),
              ("dot.2", 1500 * us, 50 * us, {"hlo_op": "dot.2", **op, "device_ordinal": 1})]
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(serialize(plane("/host:CPU", {"python": python, "tf_XLA/1": first,
                                                   "tf_XLA/2": second})))
    expect, _ = reference_events(path)
    assert expect[schema.OP].tolist() == ["dot.2", "dot.2", "dot.2"]
    assert expect[schema.DURATION_NS].tolist() == [20 * us, 40 * us, 50 * us]
    same_events(read_events(path).events, expect)
    if parallel._can_fork():
        monkeypatch.setenv(parallel.WORKERS_ENV, "2")
        same_events(read_events(path).events, expect)


def test_stats_asked_for_by_id_are_those_protobuf_reads():
    """Asked for by id: a stat written with its id after its value (valid protobuf) and ids
    of 2**24 or more are found like any other; the others are left out."""
    turned = b"\x20\x05\x08\x07"  # int64_value 5, then metadata_id 7
    event = XEvent(metadata_id=1, offset_ps=10)
    event.stats.add(metadata_id=2**40, int64_value=-3)
    event.stats.add(metadata_id=3, str_value="left out")
    raw_event = event.SerializeToString() + b"\x22" + encode(len(turned)) + turned
    raw = XLine(name="x").SerializeToString() + b"\x22" + encode(len(raw_event)) + raw_event
    ev = wire.read_line(raw).events()
    st = ev.stats(ids=[7, 2**40])
    expect = [(s.metadata_id, s.int64_value) for s in XLine.FromString(raw).events[0].stats
              if s.metadata_id in (7, 2**40)]
    assert [(int(m), int(v)) for m, v in zip(st.metadata_id, st.value)] == expect == [
        (2**40, -3), (7, 5)]
