"""The TPU format on hand-made planes: op names from the instruction text or an hlo_op stat,
device time from device_duration_ps, self time less nested ops (xprof's rules, see
harness.trace.tpu). Times worked out by hand."""
import numpy as np
import pytest
from xspace_text import plane, serialize

from harness import schema
from harness.measure.ops import op_times
from harness.trace.load import read_events
from harness.trace.tpu import op_name, self_times

US, PS = 1000, 1000  # ns per us, ps per ns


def test_op_name_prefers_display_name_then_hlo_op_then_the_text():
    text = "%copy-done.2 = f32[5,1024]{1,0:T(8,128)} copy-done((f32[5,1024]) %copy-start.2)"
    assert op_name(text, "copy-done.2") == "copy-done.2"
    assert op_name(text, "", "copy-done.9") == "copy-done.9"
    assert op_name(text) == "copy-done.2"
    assert op_name("ROOT %tuple.1 = (f32[]) tuple(%a)") == "tuple.1"
    assert op_name("fusion.3") == "fusion.3"  # already short


def test_self_time_subtracts_direct_children_only():
    # while [0, 100) holds fusion [10, 40), which holds copy [20, 30); add [50, 60) follows
    begin = np.array([50, 0, 20, 10])
    dur = np.array([10, 100, 10, 30])
    # while: 100 - 30 - 10 (fusion and add, its direct children); fusion: 30 - 10; leaves whole
    assert self_times(begin, dur).tolist() == [10, 60, 10, 20]
    # overlapping but not nested: nothing subtracted
    assert self_times(np.array([0, 5]), np.array([10, 10])).tolist() == [10, 10]


def _self_times_walked(begin, dur) -> list[int]:
    """Self times the plain way: walk the events by start (longest first) with a stack of the
    spans still open; each one's duration goes to the innermost open span it ends inside."""
    order = sorted(range(len(begin)), key=lambda i: (begin[i], -dur[i]))
    self, stack = [int(d) for d in dur], []
    for i in order:
        while stack and begin[i] + dur[i] > begin[stack[-1]] + dur[stack[-1]]:
            stack.pop()
        if stack:
            self[stack[-1]] -= int(dur[i])
        stack.append(i)
    return self


@pytest.mark.parametrize("seed", range(40))
def test_self_times_of_random_nested_and_overlapping_spans_match_a_walk(seed):
    """Random spans: nested, overlapping, equal, empty, deep chains (found all at once)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    begin = rng.integers(0, 50 if seed % 2 else 1000, n)
    dur = rng.integers(0, 400, n)
    if seed % 5 == 0:  # one chain, each span inside the one before
        begin, dur = np.arange(n), 2 * n - 2 * np.arange(n)
    assert self_times(begin, dur).tolist() == _self_times_walked(begin.tolist(), dur.tolist())


def _device(n):
    """One execution of jit_step(7): a while loop holding two fusions, then an all-reduce.
    Host offsets and durations differ from the device's (device_*_ps stats), as on a v6e."""
    def dev(start_us, dur_us):
        return {"device_offset_ps": start_us * US * PS, "device_duration_ps": dur_us * US * PS}
    ops = [
        ("%while.1 = (s32[], f32[8]{0}) while(%tuple), condition=%c, body=%b", 100 * US,
         900 * US, dev(100, 400)),
        ("%fusion.2 = f32[8]{0} fusion(%p), kind=kLoop, calls=%f", 150 * US, 10 * US,
         dev(150, 100)),
        ("%fusion.3 = f32[8]{0} fusion(%p), kind=kLoop, calls=%g", 300 * US, 10 * US,
         dev(300, 50 + n)),
        ("%x = f32[8]{0} all-reduce(%p)", 700 * US, 10 * US, {"hlo_op": "all-reduce.4"}),
    ]
    return plane(f"/device:TPU:{n}", {"XLA Modules": [("jit_step(7)", 0, 1000 * US, {})],
                                      "XLA Ops": ops}, plane_id=n + 1)


def test_device_times_self_times_and_short_names():
    read = read_events(serialize(_device(0), _device(1)))
    assert read.format == "tpu" and read.async_time_on == "done"
    assert set(read.events[schema.PROGRAM_ID]) == {""}  # these ops name no program id
    ops = op_times(read.events).set_index(schema.OP)
    assert set(ops.index) == {"while.1", "fusion.2", "fusion.3", "all-reduce.4"}
    # device 0: while 400 - 100 - 50 = 250 us (its fusions are nested in it); device 1: 249 us
    assert ops.loc["while.1", schema.MEASURED_S] == pytest.approx(249.5e-6)
    assert ops.loc["fusion.2", schema.MEASURED_S] == pytest.approx(100e-6)
    assert ops.loc["fusion.3", schema.MEASURED_S] == pytest.approx(50.5e-6)
    assert ops.loc["all-reduce.4", schema.MEASURED_S] == pytest.approx(10e-6)  # event duration


def test_xla_ops_with_a_device_stat_repeated_or_extra_read_as_protobuf_keeps_them(tmp_path):
    """``XLA Ops`` events read by their kind's layout (``harness.trace.statplans``): where an
    event repeats ``device_duration_ps`` after its others, or holds an extra stat, its time is
    the last one protobuf's parse keeps, as the previous decoder reads it."""
    from reference_decode import reference_events, same_events

    from harness.trace.xplane import XSpace

    space = XSpace()
    p = space.planes.add(id=1, name="/device:TPU:0")
    for i, name in enumerate(("device_offset_ps", "device_duration_ps", "extra"), start=1):
        p.stat_metadata[i].name = name
    p.event_metadata[1].name = "%fusion.1 = f32[8]{0} fusion(%p), kind=kLoop, calls=%f"
    p.event_metadata[2].name = "jit_step(7)"
    p.lines.add(id=1, name="XLA Modules").events.add(metadata_id=2, duration_ps=10**9)
    ops = p.lines.add(id=2, name="XLA Ops")
    for i in range(100):
        ev = ops.events.add(metadata_id=1, offset_ps=10**6 * i, duration_ps=10**5)
        if i % 23 == 7:
            ev.stats.add(metadata_id=3, str_value="x")
        ev.stats.add(metadata_id=1, int64_value=10**6 * i + 5000)
        ev.stats.add(metadata_id=2, int64_value=1000 * (2 + i % 5))
        if i % 17 == 5:
            ev.stats.add(metadata_id=2, int64_value=50_000)  # 50 ns: the one kept
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(space.SerializeToString())
    expect, _ = reference_events(path)
    got = read_events(path).events
    assert got[schema.DURATION_NS].tolist() == [
        50 if i % 17 == 5 else 2 + i % 5 for i in range(100)]
    same_events(got, expect)


def test_xla_ops_naming_their_module_per_event_are_each_given_it():
    """Where the ops' metadata names no module and no ``XLA Modules`` line encloses them,
    each ``XLA Ops`` event's own ``hlo_module`` stat names its program (two programs here,
    interleaved, one of them also on an event whose kind's first event had the other)."""
    from harness.trace.xplane import XSpace

    space = XSpace()
    p = space.planes.add(id=1, name="/device:TPU:0")
    p.stat_metadata[1].name = "hlo_module"
    p.event_metadata[1].name = "%fusion.1 = f32[8]{0} fusion(%p), kind=kLoop, calls=%f"
    p.event_metadata[2].name = "%fusion.2 = f32[8]{0} fusion(%q), kind=kLoop, calls=%g"
    ops = p.lines.add(id=2, name="XLA Ops")
    expect = []
    for i in range(90):
        module = "jit_a" if i % 3 else "jit_b"
        ev = ops.events.add(metadata_id=1 + i % 2, offset_ps=10**6 * i, duration_ps=10**5)
        ev.stats.add(metadata_id=1, str_value=module)
        expect.append(module)
    got = read_events(space).events
    assert got[schema.PROGRAM].astype(str).tolist() == expect
