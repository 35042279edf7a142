"""Stats read by layouts learned per event kind (``harness.trace.statplans``), and the host's
step annotations found by their bytes (``Line.holding``), against protobuf's own parse of the
same bytes: every event laid out as its kind's first or otherwise, every kind of value; and the
CPU format's op events so read, against the previous decoder (``reference_decode``)."""
from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from reference_decode import host_steps as reference_host_steps
from reference_decode import reference_events, same_events

from harness import schema
from harness.trace import statplans, varint, wire
from harness.trace.load import read_events, read_xspace
from harness.trace.planes import host_steps
from harness.trace.varint import encode
from harness.trace.xplane import XEvent, XLine, XSpace, XStat

# stat ids: a two-byte one (300) and one too long for a step's 8 bytes (2**40) among them
CORR, SCOPE, DETAILS, OP, MODULE, PROGRAM, GRAPH = 1, 2, 3, 300, 5, 2**40, 6
ASKED = [OP, MODULE, PROGRAM, GRAPH, 99, None]  # 99: on no event; None: unnamed
KINDS = {wire.DOUBLE: "double_value", wire.UINT64: "uint64_value", wire.INT64: "int64_value",
         wire.STR: "str_value", wire.BYTES: "bytes_value", wire.REF: "ref_value"}
EVERY_KIND = [{"int64_value": 5}, {"uint64_value": 2**63 + 3}, {"double_value": 0.5},
              {"str_value": "x ü"}, {"bytes_value": b"\x00\xff\x22"}, {"ref_value": 4},
              {"int64_value": 0}, {"int64_value": -1}]


def _event(kind: int, i: int, stats: list[tuple[int, dict]]) -> bytes:
    ev = XEvent(metadata_id=kind, offset_ps=1000 * i + 7, duration_ps=500 + i)
    for stat_id, value in stats:
        ev.stats.add(metadata_id=stat_id, **value)
    return ev.SerializeToString()


def _kernel(i: int, details: str = "regs:32", op: dict | None = None,
            program: int = PROGRAM) -> list:
    """A kernel's stats as XLA lays them out, its correlation id growing."""
    return [(CORR, {"uint64_value": 10**9 + 977 * i}), (SCOPE, {"int64_value": i % 300}),
            (DETAILS, {"str_value": details}), (OP, op or {"ref_value": 7}),
            (MODULE, {"ref_value": 9}), (program, {"int64_value": 0})]


def _line(events: list[bytes]) -> bytes:
    """A line of the events' bytes (each an ``XLine.events`` record), in turn."""
    head = XLine(id=1, name="Stream #1(Compute)", timestamp_ns=1000).SerializeToString()
    return head + b"".join(b"\x22" + encode(len(e)) + e for e in events)


def _kinds_of_line() -> list[list[bytes]]:
    """Events of several kinds, each a few hundred strong, with events laid out otherwise."""
    plain = [_event(10, i, _kernel(i, op={"ref_value": 7 if i % 50 else 8}))
             for i in range(300)]
    plain[100] = _event(10, 100, _kernel(100)[:2] + [(GRAPH, {"uint64_value": 3})]
                        + _kernel(100)[2:])  # a stat more, in the middle
    plain[150] = _event(10, 150, _kernel(150) + [(OP, {"str_value": "fusion.9"})])  # twice
    plain[200] = _event(10, 200, [s for s in _kernel(200) if s[0] != OP])  # none
    plain[250] = _event(10, 250, [])
    long = [_event(11, i, _kernel(i, "d" * (150 + i % 3), {"str_value": f"fusion.{i % 3}"})
                   + [(GRAPH, {"uint64_value": 2**64 - 1})]) for i in range(200)]
    first_odd = [_event(12, 0, [s for s in _kernel(0) if s[0] != SCOPE])] + [
        _event(12, i, _kernel(i)) for i in range(1, 150)]
    every_kind = [_event(13, i, _kernel(i, op=EVERY_KIND[i % len(EVERY_KIND)]))
                  for i in range(160)]
    aggregated = [XEvent.FromString(_event(14, i, _kernel(i))) for i in range(80)]
    for i, ev in enumerate(aggregated):
        ev.num_occurrences = i + 1  # written after the stats
    value_first = b"\x38\x07" + b"\x08" + encode(OP)  # a stat with its id after its value
    turned = [_event(15, i, _kernel(i)[:3]) + b"\x22" + encode(len(value_first)) + value_first
              for i in range(70)]
    return [plain, long, first_odd, every_kind, [e.SerializeToString() for e in aggregated],
            turned]


def _interleaved(kinds: list[list[bytes]]) -> list[bytes]:
    out, longest = [], max(map(len, kinds))
    for i in range(longest):
        out += [events[i] for events in kinds if i < len(events)]
    return out


def _as_protobuf(values, code: int):
    """An entry of ``values`` as protobuf gives a stat's value: (its oneof, the value)."""
    kind = int(values.kind[code])
    if kind in (wire.STR, wire.BYTES):
        return KINDS[kind], values.text(code)
    if kind == wire.DOUBLE:
        return KINDS[kind], float(values.number[code])
    value = int(values.value[code])
    return KINDS[kind], value % 2**64 if kind == wire.UINT64 else value


def _check(raw: bytes, asked: list = ASKED) -> tuple[np.ndarray, object]:
    """``planned_values`` of every event of the line ``raw`` equal the last stat of each id in
    protobuf's parse of it; returns them."""
    ev = wire.read_line(raw).events()
    codes, values = statplans.planned_values(ev, asked)
    parsed = XLine.FromString(raw).events
    assert codes.shape == (len(parsed), len(asked))
    for i, event in enumerate(parsed):
        last = {s.metadata_id: s for s in event.stats}
        for j, stat_id in enumerate(asked):
            stat = last.get(stat_id)
            got = None if codes[i, j] < 0 else _as_protobuf(values, codes[i, j])
            expect = None if stat is None else (stat.WhichOneof("value"), getattr(
                stat, stat.WhichOneof("value")))
            assert got == expect, (i, stat_id)
    return codes, values


def test_planned_stats_are_the_last_of_each_id_as_protobuf_reads_them():
    kinds = _kinds_of_line()
    codes, _ = _check(_line(_interleaved(kinds)))
    # the odd ones are there: a graph on one plain kernel, two ops read as the last
    assert (codes[:, ASKED.index(GRAPH)] >= 0).sum() == 1 + len(kinds[1])


def test_a_kind_repeating_its_first_event_has_its_values_read_once():
    """300 kernels of one op: a handful of values (each block's distinct records of 16 bytes
    or less), not one per kernel and stat."""
    raw = _line([_event(10, i, _kernel(i, program=4)) for i in range(300)])
    codes, values = _check(raw, [OP, MODULE, 4])
    assert (codes >= 0).all()
    assert len(values) < 12


def test_records_of_up_to_16_bytes_are_known_by_their_bytes():
    """Integer stats of 9 to 16 byte records (a 10-byte varint of a negative run id; values
    differing only in their 14th byte, k << 56) are read about once per distinct value (300
    events, 5 values), each the value protobuf reads."""
    values = [-245638905, -245638904, 1 << 56, 2 << 56, 3 << 56]
    raw = _line([_event(10, i, _kernel(i)[:4] + [(MODULE, {"int64_value": values[i % 5]})])
                 for i in range(300)])
    codes, read = _check(raw, [MODULE])
    assert (codes >= 0).all()
    assert len(read) < 12


def test_planned_stats_read_in_small_blocks_are_the_same(monkeypatch):
    raw = _line(_interleaved(_kinds_of_line()))
    whole = statplans.planned_values(wire.read_line(raw).events(), ASKED)[0]
    monkeypatch.setattr(varint, "BLOCK", 7)
    monkeypatch.setattr(statplans, "WALK", 3)
    monkeypatch.setattr(statplans, "MIN_EVENTS", 1)  # every layout walked, small or not
    codes, _ = _check(raw)
    assert np.array_equal(codes >= 0, whole >= 0)


def test_a_stat_running_past_its_event_is_a_decode_error():
    events = [_event(10, i, _kernel(i)) for i in range(100)]
    bad = bytearray(events[60])
    last = bad.rindex(b"\x22\x09\x08" + encode(PROGRAM))  # the program id's stat: longer
    bad[last + 1] = 40
    events[60] = bytes(bad)
    raw = _line(events)
    with pytest.raises(DecodeError):
        wire.read_line(raw).events().stats()
    with pytest.raises(DecodeError):
        statplans.planned_values(wire.read_line(raw).events(), ASKED)


STEP = 10


def test_an_events_bytes_holding_a_step_num_are_found_in_any_encoding():
    """A step stat written plainly, with its id in two bytes (0x8a 0x00: valid, as protobuf
    reads it), or as the only stat: each one's event is found; an event whose own metadata
    id is the step's number is not, nor one without stats."""
    minimal = XStat(metadata_id=STEP, int64_value=3).SerializeToString()
    padded = b"\x08\x8a\x00\x20\x04"
    events = [_event(STEP, 0, []),  # its own id is 10: no stat
              _event(2, 1, [(CORR, {"uint64_value": 5})]),
              XEvent(metadata_id=2, offset_ps=9).SerializeToString() + b"\x22"
              + encode(len(minimal)) + minimal,
              XEvent(metadata_id=2, offset_ps=9).SerializeToString() + b"\x22"
              + encode(len(padded)) + padded,
              _event(3, 4, [(CORR, {"uint64_value": 1}), (STEP, {"int64_value": 7})])]
    raw = _line(events)
    with_step = [i for i, e in enumerate(XLine.FromString(raw).events)
                 if any(s.metadata_id == STEP for s in e.stats)]
    assert with_step == [2, 3, 4]
    held = wire.read_line(raw).holding(STEP).tolist()
    assert set(with_step) <= set(held)
    assert 0 not in held and 1 not in held


def test_a_line_with_no_events_holds_no_step_whatever_its_header_looks_like():
    """A line whose header bytes look like a step stat (its id field: tag 0x08, then the step's
    id) and that holds no event: none found (a Flax NNX program's trace had such a line)."""
    for events in ([], [_event(3, 4, [(STEP, {"int64_value": 7})])]):
        head = XLine(id=STEP, name="python", timestamp_ns=1000).SerializeToString()
        raw = head + b"".join(b"\x22" + encode(len(e)) + e for e in events)
        assert head[:2] == bytes([0x08, STEP])  # the header itself reads as a hit
        assert wire.read_line(raw).holding(STEP).tolist() == list(range(len(events)))


def test_a_step_annotation_is_found_where_its_kinds_first_event_had_no_step(tmp_path):
    """The host's annotations and Execute events, as the per-event decoder reads them: a
    ``train`` event with a ``step_num`` after two without, a step id that an event kind's id
    shares, Execute events with their run ids."""
    from xspace_text import plane, serialize

    us = 1000
    python = [("train", 10 * us, 5 * us, {}), ("train", 20 * us, 5 * us, {"other": 1})]
    for step in range(3):
        t = (100 + 100 * step) * us
        python += [("train", t, 90 * us, {"step_num": step, "other": step}),
                   ("CommonPjRtLoadedExecutable::Execute (jit_f)", t + us, 5 * us,
                    {"run_id": 40 + step})]
    python += [("CommonPjRtLoadedExecutable::Execute (jit_f)", 900 * us, us, {"run_id": 9})]
    space = serialize(plane("/host:CPU", {"python": python, "tf_XLA/1": python}))
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space)
    steps, run_step = host_steps(read_xspace(path)[0])
    expect, expect_runs = reference_host_steps(XSpace.FromString(space))
    assert (steps.starts, steps.ends, steps.steps) == (expect.starts, expect.ends, expect.steps)
    assert steps.steps == [0, 1, 2] and run_step == expect_runs == {40: 0, 41: 1, 42: 2, 9: -1}


# the stats XLA's CPU runtime writes on an op event, in its order (_src twice)
CPU_OP = ("hlo_op", "hlo_module", "program_id", "run_id", "device_ordinal", "_src", "_pt", "_p",
          "_src")


def _cpu_space(steps: int = 3, per_step: int = 30) -> bytes:
    """A ``/host:CPU`` plane as XLA's CPU runtime writes it: step annotations holding the
    ``Execute`` event of each device's run (negative run ids: 10-byte varints), and two
    thread-pool lines of op events (two kinds, each ``per_step`` times a step, then its ``end:``
    marker), a few laid out otherwise: a stat repeated after the others (protobuf keeps the
    last), an extra stat (on a kind's first event too), one missing, none."""
    space = XSpace()
    p = space.planes.add(id=1, name="/host:CPU")
    names = ["step_num", "run_id", *CPU_OP[:5], "_src", "_pt", "_p", "extra", "jit_f",
             "dot.1", "tanh.2", "thunk.cc"]
    sid = {n: i for i, n in enumerate(names, start=1)}
    for n, i in sid.items():
        p.stat_metadata[i].name = n
    kinds = {"train": 1, "CommonPjRtLoadedExecutable::Execute (jit_f)": 2, "dot.1": 3,
             "tanh.2": 4, "end: dot.1": 5}
    for n, i in kinds.items():
        p.event_metadata[i].name = n
    run = {(s, d): -245638905 + 8 * s + d for s in range(steps) for d in range(2)}
    python = p.lines.add(id=1, name="python")
    for s in range(steps):
        t = 10**9 * (s + 1)
        python.events.add(metadata_id=1, offset_ps=t, duration_ps=9 * 10**8).stats.add(
            metadata_id=sid["step_num"], int64_value=s)
        for d in range(2):
            python.events.add(metadata_id=2, offset_ps=t + 1000 * (d + 1),
                              duration_ps=500).stats.add(metadata_id=sid["run_id"],
                                                         int64_value=run[s, d])
    for d in range(2):
        line = p.lines.add(id=10 + d, name=f"tf_XLAPjRtCpuClient/{d}")
        i = 0
        for s in range(steps):
            for k in range(per_step):
                for op in ("dot.1", "tanh.2"):
                    i += 1
                    ev = line.events.add(metadata_id=kinds[op], duration_ps=2000 + i,
                                         offset_ps=10**9 * (s + 1) + 10**6 * (k + 1) + 10 * i)
                    stats = [(sid["hlo_op"], "ref_value", sid[op]),
                             (sid["hlo_module"], "ref_value", sid["jit_f"]),
                             (sid["program_id"], "int64_value", 10),
                             (sid["run_id"], "int64_value", run[s, d]),
                             (sid["device_ordinal"], "int64_value", d),
                             (sid["_src"], "ref_value", sid["thunk.cc"]),
                             (sid["_pt"], "int64_value", 0), (sid["_p"], "int64_value", 5 << 32),
                             (sid["_src"], "ref_value", sid["thunk.cc"])]
                    odd = i % 37
                    if odd == 11:  # the device again, last: protobuf keeps this one
                        stats.append((sid["device_ordinal"], "int64_value", 5))
                    elif odd == 12:  # the run again, last: another step's run
                        stats.append((sid["run_id"], "int64_value", run[(s + 1) % steps, d]))
                    elif odd == 13 or i == 2:  # an extra stat among them (on tanh's first)
                        stats.insert(2, (sid["extra"], "uint64_value", 2**64 - 1))
                    elif odd == 14:  # the device missing
                        del stats[4]
                    elif odd == 15:  # no stats
                        stats = []
                    for stat_id, kind, value in stats:
                        ev.stats.add(metadata_id=stat_id, **{kind: value})
                    line.events.add(metadata_id=5, offset_ps=ev.offset_ps + 2000).stats.add(
                        metadata_id=sid["_src"], ref_value=sid["thunk.cc"])
    return space.SerializeToString()


def test_cpu_op_events_with_a_stat_repeated_or_extra_read_as_protobuf_keeps_them(tmp_path):
    """The CPU format's op events, each kind's stats read where its first event lays them
    out: an event with a stat repeated after the others, an extra or a missing one, or none,
    gives the last of each id, as the previous decoder's dict of protobuf's parse does."""
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(_cpu_space())
    expect, _ = reference_events(path)
    # the odd events are there: a device of 5, a run of the next step's, a device of -1
    assert {5, -1} < set(expect[schema.DEVICE]) and len(expect) == 2 * 3 * 30 * 2
    got = read_events(path)
    assert got.format == "cpu"
    same_events(got.events, expect)
