"""The simulated step (harness.step.simulate): hand-written scheduled HLO with hand-computed
timelines, then TPU programs compiled by libtpu (tests/fixtures/tpu/), whose schedules hold
async copies, collective-permutes and collective chains."""
import gzip
import json
from pathlib import Path

import pytest

from harness import schema
from harness.errors import HarnessError
from harness.hlo import category, executed, hlo_costs, parse_module
from harness.step.play import COMM, COMPUTE, CORE
from harness.step.simulate import critical_ops, simulate
from harness.step.transfers import roofline_durations, transfers
from predictions.rules import CONTAINERS, STRUCTURAL

TPU = Path(__file__).parent / "fixtures" / "tpu"
TPU_NAMES = sorted(p.name.split(".hlo")[0] for p in TPU.glob("*.hlo.txt*"))

HEAD = "HloModule step_{name}, is_scheduled=true, num_partitions=4\n\n" \
       "%add (x: f32[], y: f32[]) -> f32[] {{\n  %x = f32[] parameter(0)\n" \
       "  %y = f32[] parameter(1)\n  ROOT %sum = f32[] add(%x, %y)\n}}\n\n"


def module(name: str, entry: str, computations: str = ""):
    """A scheduled module: the ``%add`` reduction, ``computations``, then the ENTRY body."""
    return parse_module(HEAD.format(name=name) + computations +
                        "ENTRY %main (p0: f32[8], p1: f32[8]) -> f32[8] {\n"
                        "  %p0 = f32[8]{0} parameter(0)\n  %p1 = f32[8]{0} parameter(1)\n"
                        + entry + "}\n")


def run(m, core: dict, transfer: dict | None = None, **kw):
    """Simulate with ``core`` seconds for the named ops and 0 s for every other executed op."""
    every = {i.name: 0.0 for i, _ in executed(m)
             if i.opcode not in STRUCTURAL and i.opcode not in CONTAINERS}
    return simulate(m, {**every, **core}, transfer or {}, **kw)


def path(sim) -> list[tuple[str, str, float]]:
    """The critical path without the ops that added nothing."""
    return [(op, kind, pytest.approx(s)) for op, kind, s in sim.critical_path if s > 0]


# --- one computation: compute, async pairs, synchronous collectives --------------------------

BACK_TO_BACK = """  %a = f32[8]{0} negate(%p0)
  %b = f32[8]{0} exponential(%a)
  ROOT %c = f32[8]{0} add(%b, %p1)
"""


def test_back_to_back_compute_adds_up():
    sim = run(module("b2b", BACK_TO_BACK), {"a": 2.0, "b": 3.0, "c": 1.0})
    assert (sim.step_s, sim.compute_s, sim.comm_s, sim.exposed_comm_s) == (6.0, 6.0, 0.0, 0.0)
    assert path(sim) == [("a", COMPUTE, 2.0), ("b", COMPUTE, 3.0), ("c", COMPUTE, 1.0)]
    spans = sim.spans.set_index(schema.OP)
    assert list(spans[schema.START_S]) == [0.0, 2.0, 5.0]
    assert list(spans[schema.END_S]) == [2.0, 5.0, 6.0]
    assert set(spans[schema.LANE]) == {CORE} and sim.serial_s == 6.0


# the all-gather is issued, f1 runs beside it, its -done waits, f2 needs its result
ALL_GATHER = """  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(%p0), replica_groups={{0,1,2,3}}, dimensions={0}
  %f1 = f32[8]{0} negate(%p1)
  %all-gather-done = f32[32]{0} all-gather-done(%all-gather-start)
  %f2 = f32[32]{0} exponential(%all-gather-done)
  ROOT %out = (f32[32]{0}, f32[8]{0}) tuple(%f2, %f1)
"""  # noqa: E501 (HLO as XLA prints it)


def test_all_gather_hidden_under_compute():
    # transfer 0 -> 3 s under f1 0 -> 4 s; the -done at 4 s finds it landed; f2 4 -> 5 s
    sim = run(module("hidden", ALL_GATHER), {"f1": 4.0, "f2": 1.0}, {"all-gather-start": 3.0})
    assert sim.step_s == 5.0 and sim.compute_s == 5.0
    assert (sim.comm_s, sim.overlapped_comm_s, sim.exposed_comm_s) == (3.0, 3.0, 0.0)
    assert path(sim) == [("f1", COMPUTE, 4.0), ("f2", COMPUTE, 1.0)]
    assert (sim.critical_compute_s, sim.critical_comm_s) == (5.0, 0.0)
    link = sim.spans[sim.spans[schema.LANE] != CORE]
    assert list(link[schema.OP]) == ["all-gather-start"]
    assert (link[schema.START_S].item(), link[schema.END_S].item()) == (0.0, 3.0)
    assert sim.serial_s == 8.0  # 4 + 1 + 3: the no-overlap bound


def test_all_gather_half_exposed():
    # transfer 0 -> 4 s, f1 0 -> 2 s: the -done waits 2 -> 4 s (exposed), f2 4 -> 5 s
    sim = run(module("half", ALL_GATHER), {"f1": 2.0, "f2": 1.0}, {"all-gather-start": 4.0})
    assert sim.step_s == 5.0 and sim.compute_s == 3.0
    assert (sim.comm_s, sim.overlapped_comm_s, sim.exposed_comm_s) == (4.0, 2.0, 2.0)
    assert path(sim) == [("all-gather-start", COMM, 4.0), ("f2", COMPUTE, 1.0)]
    done = sim.spans.set_index(schema.OP).loc["all-gather-done"]
    assert (done[schema.START_S], done[schema.END_S]) == (2.0, 4.0)  # the core's wait


TWO_TRANSFERS = """  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(%p0), replica_groups={{0,1,2,3}}, dimensions={0}
  %all-reduce-start = f32[8]{0} all-reduce-start(%p1), replica_groups={{0,1},{2,3}}, to_apply=%add
  %f1 = f32[8]{0} negate(%p1)
  %all-gather-done = f32[32]{0} all-gather-done(%all-gather-start)
  %all-reduce-done = f32[8]{0} all-reduce-done(%all-reduce-start)
  %f2 = f32[8]{0} add(%all-reduce-done, %f1)
  ROOT %out = (f32[32]{0}, f32[8]{0}) tuple(%all-gather-done, %f2)
"""  # noqa: E501 (HLO as XLA prints it)
TWO = ({"f1": 4.0, "f2": 1.0}, {"all-gather-start": 3.0, "all-reduce-start": 2.0})


@pytest.mark.parametrize("links", ["groups", "parallel"])
def test_two_transfers_over_different_groups_fly_at_once(links):
    # all-gather 0 -> 3 s and all-reduce 0 -> 2 s on two links, both under f1 0 -> 4 s
    sim = run(module("two", TWO_TRANSFERS), *TWO, links=links)
    assert sim.step_s == 5.0 and sim.exposed_comm_s == 0.0 and sim.comm_s == 3.0
    link = sim.spans[sim.spans[schema.LANE] != CORE]
    assert link[schema.LANE].nunique() == 2 and set(link[schema.START_S]) == {0.0}


def test_two_transfers_on_one_link_queue():
    # "shared": the all-reduce waits for the all-gather (0 -> 3 s) and flies 3 -> 5 s; its
    # -done waits 4 -> 5 s; f2 5 -> 6 s
    sim = run(module("queue", TWO_TRANSFERS), *TWO, links="shared")
    assert sim.step_s == 6.0 and sim.compute_s == 5.0
    assert (sim.comm_s, sim.overlapped_comm_s, sim.exposed_comm_s) == (5.0, 4.0, 1.0)
    # the path runs through the busy link: the all-gather set the all-reduce's start
    assert path(sim) == [("all-gather-start", COMM, 3.0), ("all-reduce-start", COMM, 2.0),
                         ("f2", COMPUTE, 1.0)]
    # "groups" queues them too once they span the same devices
    same = TWO_TRANSFERS.replace("{{0,1},{2,3}}", "{{0,1,2,3}}")
    assert run(module("same", same), *TWO).step_s == 6.0


SYNC = """  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(%p0), replica_groups={{0,1,2,3}}, dimensions={0}
  %f1 = f32[8]{0} negate(%p1)
  %all-reduce = f32[8]{0} all-reduce(%f1), replica_groups={{0,1,2,3}}, to_apply=%add
  %all-gather-done = f32[32]{0} all-gather-done(%all-gather-start)
  %f2 = f32[8]{0} negate(%all-reduce)
  ROOT %out = (f32[32]{0}, f32[8]{0}) tuple(%all-gather-done, %f2)
"""  # noqa: E501 (HLO as XLA prints it)


def test_synchronous_collective_blocks_the_core():
    sim = run(module("sync", SYNC), {"f1": 2.0, "all-reduce": 3.0, "f2": 1.0})
    assert sim.step_s == 6.0 and sim.compute_s == 3.0
    assert (sim.comm_s, sim.exposed_comm_s, sim.sync_comm_s) == (3.0, 3.0, 3.0)  # alone
    assert path(sim) == [("f1", COMPUTE, 2.0), ("all-reduce", COMM, 3.0), ("f2", COMPUTE, 1.0)]
    assert sim.spans.set_index(schema.OP).loc["all-reduce", schema.KIND] == COMM


def test_synchronous_collective_waits_for_its_link():
    # the all-gather holds the link 0 -> 5 s; the all-reduce over the same devices runs 5 -> 7 s
    # (the core waits 1 -> 5 s), then f2 7 -> 8 s; comm [0, 7] of which f1's 0 -> 1 s is hidden
    durations = ({"f1": 1.0, "all-reduce": 2.0, "f2": 1.0}, {"all-gather-start": 5.0})
    sim = run(module("sync_link", SYNC), *durations)
    assert sim.step_s == 8.0 and (sim.comm_s, sim.exposed_comm_s) == (7.0, 6.0)
    assert sim.sync_comm_s == 2.0  # the core's wait for the link is no collective's own time
    assert path(sim) == [("all-gather-start", COMM, 5.0), ("all-reduce", COMM, 2.0),
                         ("f2", COMPUTE, 1.0)]
    # with a link of its own it runs 1 -> 3 s; the -done waits to 5 s; f2 5 -> 6 s
    assert run(module("own", SYNC), *durations, links="parallel").step_s == 6.0


# --- control flow ------------------------------------------------------------------------------

LOOP = """%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %c.i = s32[] get-tuple-element(%c), index=0
  %c.n = s32[] constant(3)
  ROOT %lt = pred[] compare(%c.i, %c.n), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %b.i = s32[] get-tuple-element(%b), index=0
  %x = f32[8]{0} get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%b.i, %one)
  %all-reduce-start = f32[8]{0} all-reduce-start(%x), replica_groups={{0,1,2,3}}, to_apply=%add
  %f = f32[8]{0} negate(%x)
  %all-reduce-done = f32[8]{0} all-reduce-done(%all-reduce-start)
  %y = f32[8]{0} add(%all-reduce-done, %f)
  ROOT %t = (s32[], f32[8]{0}) tuple(%next, %y)
}

"""
LOOP_ENTRY = """  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p0)
  %while = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = f32[8]{0} get-tuple-element(%while), index=1
"""  # noqa: E501 (HLO as XLA prints it)


def test_while_loop_with_trip_count_three():
    # cond 0.5 s four times; each iteration: transfer 3 s under f 2 s, the -done waits 1 s.
    # cond 0 -> .5 | .5 -> 3.5 | cond -> 4 | 4 -> 7 | cond -> 7.5 | 7.5 -> 10.5 | cond -> 11
    sim = run(module("loop", LOOP_ENTRY, LOOP), {"lt": 0.5, "f": 2.0},
              {"all-reduce-start": 3.0})
    assert sim.step_s == pytest.approx(11.0)
    assert sim.compute_s == pytest.approx(4 * 0.5 + 3 * 2.0)
    assert (sim.comm_s, sim.exposed_comm_s) == (pytest.approx(9.0), pytest.approx(3.0))
    assert path(sim) == [("lt", COMPUTE, 0.5), ("all-reduce-start", COMM, 3.0)] * 3 + \
        [("lt", COMPUTE, 0.5)]
    assert (sim.critical_compute_s, sim.critical_comm_s) == (2.0, 9.0)
    per_op = critical_ops(sim).set_index(schema.OP)
    assert per_op.loc["all-reduce-start", schema.CRITICAL_S] == pytest.approx(9.0)
    assert per_op.loc["all-reduce-start", schema.COUNT] == 3
    spans = sim.spans[sim.spans[schema.OP] == "f"]
    assert list(spans[schema.START_S]) == pytest.approx([0.5, 4.0, 7.5])


NESTED = """%in_cond (ic: (s32[], f32[8])) -> pred[] {
  %ic = (s32[], f32[8]{0}) parameter(0)
  %ic.i = s32[] get-tuple-element(%ic), index=0
  %ic.n = s32[] constant(3)
  ROOT %ic.lt = pred[] compare(%ic.i, %ic.n), direction=LT
}

%in_body (ib: (s32[], f32[8])) -> (s32[], f32[8]) {
  %ib = (s32[], f32[8]{0}) parameter(0)
  %ib.i = s32[] get-tuple-element(%ib), index=0
  %ib.x = f32[8]{0} get-tuple-element(%ib), index=1
  %ib.one = s32[] constant(1)
  %ib.next = s32[] add(%ib.i, %ib.one)
  %g = f32[8]{0} negate(%ib.x)
  ROOT %ib.t = (s32[], f32[8]{0}) tuple(%ib.next, %g)
}

%out_cond (oc: (s32[], f32[8])) -> pred[] {
  %oc = (s32[], f32[8]{0}) parameter(0)
  %oc.i = s32[] get-tuple-element(%oc), index=0
  %oc.n = s32[] constant(2)
  ROOT %oc.lt = pred[] compare(%oc.i, %oc.n), direction=LT
}

%out_body (ob: (s32[], f32[8])) -> (s32[], f32[8]) {
  %ob = (s32[], f32[8]{0}) parameter(0)
  %ob.i = s32[] get-tuple-element(%ob), index=0
  %ob.x = f32[8]{0} get-tuple-element(%ob), index=1
  %ob.one = s32[] constant(1)
  %ob.next = s32[] add(%ob.i, %ob.one)
  %ob.zero = s32[] constant(0)
  %ob.init = (s32[], f32[8]{0}) tuple(%ob.zero, %ob.x)
  %inner = (s32[], f32[8]{0}) while(%ob.init), condition=%in_cond, body=%in_body
  %ob.r = f32[8]{0} get-tuple-element(%inner), index=1
  %h = f32[8]{0} exponential(%ob.r)
  ROOT %ob.t = (s32[], f32[8]{0}) tuple(%ob.next, %h)
}

"""
NESTED_ENTRY = """  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p0)
  %outer = (s32[], f32[8]{0}) while(%init), condition=%out_cond, body=%out_body
  ROOT %r = f32[8]{0} get-tuple-element(%outer), index=1
"""


def test_nested_loops_multiply_through():
    # trip counts from the induction pattern: outer 2, inner 3 per outer iteration;
    # conditions: the outer 3 times, the inner (3 + 1) x 2 = 8 times
    sim = run(module("nested", NESTED_ENTRY, NESTED),
              {"g": 1.0, "h": 0.5, "ic.lt": 0.25, "oc.lt": 0.125})
    assert sim.step_s == pytest.approx(2 * (3 * 1.0 + 0.5) + 8 * 0.25 + 3 * 0.125)
    ops = sim.spans[schema.OP].value_counts()
    assert (ops["g"], ops["h"], ops["ic.lt"], ops["oc.lt"]) == (6, 2, 8, 3)
    assert sim.critical_compute_s == pytest.approx(sim.step_s)  # no communication at all


CALLS = """%called (q: f32[8]) -> f32[8] {
  %q = f32[8]{0} parameter(0)
  ROOT %k = f32[8]{0} negate(%q)
}

%yes (t: f32[8]) -> f32[8] {
  %t = f32[8]{0} parameter(0)
  ROOT %then = f32[8]{0} exponential(%t)
}

%no (e: f32[8]) -> f32[8] {
  %e = f32[8]{0} parameter(0)
  ROOT %else = f32[8]{0} negate(%e)
}

"""
CALLS_ENTRY = """  %call = f32[8]{0} call(%p0), to_apply=%called
  %pred = pred[] constant(true)
  ROOT %cond = f32[8]{0} conditional(%pred, %call, %p1), true_computation=%yes, false_computation=%no
"""  # noqa: E501 (HLO as XLA prints it)


def test_call_inlined_and_every_branch_played():
    sim = run(module("calls", CALLS_ENTRY, CALLS), {"k": 1.0, "then": 2.0, "else": 3.0})
    assert sim.step_s == 6.0  # 1 + 2 + 3: both branches, an upper bound as executed() counts
    assert list(sim.spans[schema.OP]) == ["k", "then", "else"]  # the constant is structural


# --- what the caller is told --------------------------------------------------------------------

def test_ops_without_a_duration_are_counted_and_take_no_time():
    m = module("missing", ALL_GATHER)
    sim = simulate(m, {"f1": 4.0}, {})
    assert set(sim.missing) == {"f2", "all-gather-start"}  # a -done's own core time is optional
    assert sim.step_s == 4.0


def test_unscheduled_module_and_bad_link_rule():
    m = parse_module(HEAD.format(name="plain").replace(", is_scheduled=true", "") +
                     "ENTRY %main (p0: f32[8]) -> f32[8] {\n  %p0 = f32[8]{0} parameter(0)\n"
                     "  ROOT %a = f32[8]{0} negate(%p0)\n}\n")
    assert not simulate(m, {"a": 1.0}, {}).scheduled
    assert module("s", BACK_TO_BACK).scheduled
    with pytest.raises(HarnessError, match="valid: groups, shared, parallel"):
        simulate(m, {}, {}, links="mesh")


def test_a_loop_too_long_to_play_is_refused_before_playing():
    m = module("long", LOOP_ENTRY.replace('"n":"3"', '"n":"10000000"'), LOOP)
    with pytest.raises(HarnessError, match="op executions per step"):
        simulate(m, {}, {})


# --- TPU programs compiled by libtpu ------------------------------------------------------------

def tpu(name: str):
    path = next(TPU.glob(f"{name}.hlo.txt*"))
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    return parse_module(text), json.loads((TPU / f"{name}.json").read_text())["chip"]


def roofline(name: str, async_on: str = "start"):
    m, chip = tpu(name)
    table = hlo_costs(m, chip, async_on=async_on)
    d = roofline_durations(m, table)
    return m, table, d, simulate(m, d.core_s, d.transfer_s)


@pytest.mark.parametrize("name", TPU_NAMES)
def test_tpu_programs_keep_the_invariants(name):
    m, table, d, sim = roofline(name)
    assert m.scheduled and not sim.missing
    # serial bound >= step >= max(compute, the busiest link's transfers one after another)
    links = sim.spans[sim.spans[schema.LANE] != CORE]
    busiest = (links[schema.END_S] - links[schema.START_S]).groupby(
        links[schema.LANE], observed=True).sum().max() if len(links) else 0.0
    assert sim.serial_s * (1 + 1e-9) >= sim.step_s >= max(sim.compute_s, busiest) * (1 - 1e-9)
    # the serial bound is the sum of the ops' predictions, every op once per execution, but
    # for a TPU chain's start, whose core and transfer parts count apart instead of their max
    rows = table.set_index(schema.OP).loc[sorted(transfers(m).chains)]
    core_part = rows[[schema.T_COMPUTE_S, schema.T_MEMORY_S]].max(axis=1)
    apart = (core_part + rows[schema.T_COMM_S] - rows[schema.PREDICTED_S]).sum()
    assert sim.serial_s == pytest.approx(table[schema.PREDICTED_S].sum() + apart, rel=1e-9)
    # compute_s: every compute op's time x its executions per step (walk.executed's counts)
    pairs = transfers(m)
    compute = sum(n * d.core_s[i.name] for i, n in executed(m)
                  if i.opcode not in STRUCTURAL and i.opcode not in CONTAINERS
                  and i.name not in pairs.done_of and i.name not in pairs.start_of
                  and category(m, i) != schema.CAT_COLLECTIVE)
    assert sim.compute_s == pytest.approx(compute, rel=1e-9, abs=1e-15)
    assert sim.exposed_comm_s + sim.overlapped_comm_s == pytest.approx(sim.comm_s)
    assert sim.compute_s + sim.exposed_comm_s == pytest.approx(sim.step_s)  # the core never idles
    assert sim.critical_compute_s + sim.critical_comm_s == pytest.approx(sim.step_s)


def test_tpu_permute_needed_at_once_is_fully_exposed():
    # collective-permute-start, then its -done right away: nothing to hide it under
    m, table, d, sim = roofline("collective_ppermute")
    t = table.set_index(schema.OP)[schema.PREDICTED_S]
    assert t["collective-permute-start"] > 0
    assert sim.exposed_comm_s == pytest.approx(t["collective-permute-start"])
    assert sim.step_s == pytest.approx(t.sum())


def test_tpu_prefetch_runs_under_the_all_gather():
    # copy-start (a prefetch to VMEM), a synchronous all-gather, copy-done, the matmul fusion:
    # the copy flies under the all-gather, so step = max(all-gather, copy) + fusion
    m, table, d, sim = roofline("matmul_allgather")
    t = table.set_index(schema.OP)[schema.PREDICTED_S]
    ag, copy, fusion = t["all-gather.5"], t["copy-start"], t["fusion"]
    assert sim.step_s == pytest.approx(max(ag, copy) + fusion)
    assert sim.exposed_comm_s == pytest.approx(max(ag, copy))
    assert sim.step_s < t.sum()  # what the overlap hides: min(ag, copy)
    assert sim.serial_s - sim.step_s == pytest.approx(min(ag, copy))


@pytest.mark.parametrize("name", ["llama_train", "matmul_allgather", "collective_ppermute"])
def test_a_pairs_time_is_its_transfer_whichever_half_carries_it(name):
    assert roofline(name, "done")[3].step_s == pytest.approx(roofline(name, "start")[3].step_s)


def test_offloaded_activations_travel_on_the_host_link_not_the_core():
    # libtpu offloads saved activations with async dynamic-update-slices into host memory
    # (S(5)) and reads them back with async dynamic-slices: each is a transfer on the host
    # link's lane for its direction (PCIe carries both at once), not core time
    from harness.step.play import CORE as core_lane
    m, table, d, sim = roofline("llama_train_offload")
    pairs = transfers(m)
    host = {s: m.instruction(s) for s in pairs.done_of
            if s.startswith(("dynamic-slice-start", "dynamic-update-slice-start"))}
    assert len(host) == 12
    spans = sim.spans.assign(t=sim.spans[schema.END_S] - sim.spans[schema.START_S])
    lanes = {}
    for name in host:
        assert d.core_s[name] == 0.0 and d.transfer_s[name] > 0
        own = spans[spans[schema.OP] == name]
        assert (own.loc[own[schema.LANE] == core_lane, "t"] == 0).all()  # issued, not run
        flying = own[own[schema.LANE] != core_lane]
        assert len(flying) and flying["t"].iloc[0] == pytest.approx(d.transfer_s[name])
        lanes[name] = flying[schema.LANE].iloc[0]
    writes = {n for n in host if n.startswith("dynamic-update-slice")}
    assert {lanes[n] for n in writes} == {"d2h"}
    assert {lanes[n] for n in set(host) - writes} == {"h2d"}


def test_tpu_collective_chain_overlaps_its_continuations():
    # llama_train holds five async collective chains (harness.hlo.tpu): the start fusion keeps
    # its compute and memory terms on the core and sends its communication term as a transfer
    m, table, d, sim = roofline("llama_train")
    chains = transfers(m).chains
    assert len(chains) == 5
    rows = table.set_index(schema.OP)
    for name in chains:
        r = rows.loc[name]
        assert d.transfer_s[name] == pytest.approx(r[schema.T_COMM_S] / r[schema.COUNT])
        assert d.core_s[name] == pytest.approx(
            max(r[schema.T_COMPUTE_S], r[schema.T_MEMORY_S]) / r[schema.COUNT])
    assert sim.overlapped_comm_s > 0 and sim.step_s < sim.serial_s


def test_real_v6e_trace_waits_on_the_copies_the_simulation_exposes():
    # tests/fixtures/external/tpu-v6e-inference (a real TPU v6e run, see test_tpu_fixture.py):
    # three arrays come in from host memory, x + 1 each, and go back. The chip waited ~190 ms
    # on copy-done, .2, .4 and .5 and 3 ns on .1 and .3. At the roofline, with one host-link
    # lane per direction: in-copies land at T, 2T, 3T (T = 5.37 GB / 32 GB/s = 167.8 ms); the
    # out-copies of the first two land while the third array still comes in; the last waits.
    from harness.trace.hlo_proto import trace_program
    from harness.trace.load import load_events, read_xspace

    fixture = Path(__file__).parent / "fixtures" / "external" / "tpu-v6e-inference"
    m = parse_module(trace_program(read_xspace(fixture)[0], "jit_f")[0])
    d = roofline_durations(m, hlo_costs(m, "tpu-v6e", async_on="done"))
    sim = simulate(m, d.core_s, d.transfer_s)
    spans = sim.spans[sim.spans[schema.OP].str.startswith("copy-done")].set_index(schema.OP)
    wait = spans[schema.END_S] - spans[schema.START_S]
    events = load_events(fixture)
    measured = events[events[schema.OP].astype(str).str.startswith("copy-done")].groupby(
        schema.OP, observed=True)[schema.DURATION_NS].median() * 1e-9
    assert set(wait[wait > 1e-3].index) == set(measured[measured > 1e-3].index) == {
        "copy-done", "copy-done.2", "copy-done.4", "copy-done.5"}
    array = 5 * 1024 * 1024 * 256 * 4  # one f32[5,1024,1024,256]
    t, fusion = array / 3.2e10, 2 * array / 1.6e12  # tpus.md: v6e PCIe, HBM
    assert sim.exposed_comm_s == pytest.approx(4 * t - 2 * fusion)
    # the exposed waits at the roofline against the chip's: the host link ran at 80-95% of
    # its 32 GB/s (test_tpu_fixture.py's efficiency of the same copies)
    assert 0.8 < sim.exposed_comm_s / measured[measured > 1e-3].sum() < 0.95
    # with every copy on a link of its own, the in-copies would not queue: .2 and .4, which
    # the chip waited on, would land in time
    alone = simulate(m, d.core_s, d.transfer_s, links="parallel").spans.set_index(schema.OP)
    alone_wait = (alone[schema.END_S] - alone[schema.START_S])[wait.index]
    assert alone_wait["copy-done.2"] == alone_wait["copy-done.4"] == 0


# --- LLaMA-3 70B on v5p 16x16 (issue "The step": the predicted step's check) -------------------

@pytest.mark.slow
@pytest.mark.libtpu
def test_llama3_70b_fsdp_step_on_v5p_16x16():
    """FSDP, per-device batch 4 (B = 1024 over 256 chips), sequence 4096, remat full."""
    from types import SimpleNamespace

    import workloads
    from harness.plan.compiles import aot_cache_dir
    from harness.plan.predict import predict_module
    from workloads.aot import start_compile

    overrides = {"parallelism": "fsdp", "B": "1024", "T": "4096", "remat": "full"}
    aot = start_compile("llama_train", "70b", overrides, "16x16", tpu_chip="tpu-v5p",
                        cache_dir=aot_cache_dir()).result()
    m = parse_module(aot.hlo_text)
    cfg = workloads.make_config("llama_train", "70b", overrides)
    book = workloads.get("llama_train").book(cfg, SimpleNamespace(shape={"X": 16, "Y": 16}),
                                             "tpu-v5p")
    pred = predict_module(m, "tpu-v5p", devices=256, model_flops=book.model_flops,
                          analytic_s=book.analytic_s)
    sim, ops = pred.step, pred.ops
    assert m.scheduled and not sim.missing and aot.devices == 256
    # two loops of 80 layers (forward, backward): bodies played 80 times, conditions 81
    assert set(ops[schema.COUNT]) == {1, 80, 81}
    # T_math and T_comms of the HLO, from the per-op table alone: communication is the
    # collectives and the async copies (their time on the -start), the rest is compute
    comm = (ops[schema.CATEGORY] == schema.CAT_COLLECTIVE) | ops[schema.OPCODE].isin(
        ["copy-start", "copy-done"])
    t_comms, t_math = ops.loc[comm, schema.PREDICTED_S].sum(), ops.loc[~comm,
                                                                      schema.PREDICTED_S].sum()
    assert max(t_math, t_comms) <= sim.step_s <= (t_math + t_comms) * (1 + 1e-9)
    assert sim.compute_s == pytest.approx(t_math)
    assert sim.comm_s == pytest.approx(t_comms, rel=0.05)  # copies may overlap each other
    assert 0 < sim.exposed_comm_s <= sim.comm_s
    # libtpu emits this program's collectives without start/done (the weight all-gathers as
    # all-reduces of zero-padded buffers), so the core runs them: all of them are exposed
    sync = ops.loc[ops[schema.CATEGORY] == schema.CAT_COLLECTIVE, schema.PREDICTED_S].sum()
    assert sim.sync_comm_s == pytest.approx(sync) and sim.exposed_comm_s >= sync * (1 - 1e-9)
    assert sim.critical_compute_s + sim.critical_comm_s == pytest.approx(sim.step_s)
    assert pred.totals[schema.MFU_AT_ROOFLINE] == pytest.approx(
        book.model_flops / (sim.step_s * 256 * 4.59e14))
    # the book's step hides every collective under the matmuls; it is below the simulated one
    assert book.analytic_s < sim.step_s
