"""harness.trace.completions: an op that completes after its own event (XLA:CPU's async kernels)
is timed from its start to its completion, on hand-made traces worked by arithmetic (the
``end: <op>`` marker, the executor's continuation before it), and on a real CPU trace against
the per-event reference decoder and the HLO's operand edges (no op ends after an op that reads
its result starts)."""
from __future__ import annotations

import pandas as pd
import pytest
from xspace_text import plane, serialize

from harness import schema
from harness.trace import completions
from harness.trace.load import read_events

US = 1000
RUN = {"hlo_module": "jit_f", "run_id": 7}
EXECUTE = "ThunkExecutor::Execute"


def op(name, start_us, dur_us, flow, device=0):
    return (name, start_us * US, dur_us * US, dict(RUN, hlo_op=name, device_ordinal=device,
                                                   _p=flow))


def mark(name, at_us, flow):
    return (f"end: {name}", int(at_us * US), 1, {"_c": flow})


def durations_us(lines: dict) -> dict:
    python = [("step", 0, 100_000 * US, {"step_num": 0}),
              ("CommonPjRtLoadedExecutable::Execute (jit_f)", 1, 5, {"run_id": 7})]
    ev = read_events(serialize(plane("/host:CPU", {"python": python, **lines}))).events
    return dict(zip(ev[schema.OP].astype(str), ev[schema.DURATION_NS] / US))


def test_an_op_completing_in_its_event_keeps_its_duration():
    # the marker right after the event (the kernel ran inline): 50 us as traced
    assert durations_us({"tf_a/1": [op("fusion.1", 0, 50, 11), mark("fusion.1", 50.5, 11)]}
                        ) == {"fusion.1": 50}


def test_an_async_op_runs_until_its_marker():
    # dot.3 dispatches in 120 us on thread a; its work completes on thread b at 5000 us, where
    # the thread recorded nothing just before: 5000 - 0 = 5000 us
    assert durations_us({"tf_a/1": [op("dot.3", 0, 120, 21)],
                         "tf_b/2": [("ThreadpoolListener::StartRegion", 4000 * US, 0, {}),
                                    mark("dot.3", 5000, 21)]}) == {"dot.3": 5000}


def test_an_async_op_completes_where_its_continuation_starts():
    # dot.3 [0, 100); on thread b the completion runs the executor's continuation [3000, 8000)
    # (all-reduce.2 inside it), then records the marker at 8001: dot.3 completed at 3000
    b = [(EXECUTE, 3000 * US, 5000 * US, {}), op("all-reduce.2", 3002, 4900, 23),
         mark("all-reduce.2", 7903, 23), mark("dot.3", 8001, 22)]
    got = durations_us({"tf_a/1": [op("dot.3", 0, 100, 22)], "tf_b/2": b})
    assert got == {"dot.3": 3000, "all-reduce.2": 4900}


def test_a_run_that_began_before_the_op_ended_is_no_continuation_of_it():
    # the run [50, 8000) on thread b began while dot.3 [0, 100) was dispatching: the marker at
    # 8001 stands, 8001 us
    b = [(EXECUTE, 50 * US, 7950 * US, {}), mark("dot.3", 8001, 24)]
    assert durations_us({"tf_a/1": [op("dot.3", 0, 100, 24)], "tf_b/2": b}) == {"dot.3": 8001}


def test_a_task_between_the_run_and_the_marker_means_the_marker_stands():
    # thread b ran [3000, 6000), stopped that task and started another before the marker at
    # 8000: the completion ran in the other task, at the marker: 8000 us
    b = [(EXECUTE, 3000 * US, 3000 * US, {}), ("ThreadpoolListener::StopRegion", 6001 * US, 0, {}),
         ("ThreadpoolListener::StartRegion", 6002 * US, 0, {}), mark("dot.3", 8000, 25)]
    assert durations_us({"tf_a/1": [op("dot.3", 0, 100, 25)], "tf_b/2": b}) == {"dot.3": 8000}


def test_an_op_without_a_marker_keeps_its_duration():
    assert durations_us({"tf_a/1": [op("dot.3", 0, 100, 26), mark("dot.9", 9000, 99)]}
                        ) == {"dot.3": 100}


def test_a_marker_never_shortens_an_op():
    # the durations arithmetic alone. Two ops over [0, 100): the first's marker at 90, inside
    # its event (two threads' clocks a few ns apart): it keeps 100; the second's at 300 after
    # a run from 250: 250
    import numpy as np

    none = np.array([-1, 250])
    got = completions.durations(np.array([0, 0]), np.array([100, 100]), np.array([1, 2]),
                                np.array([True, True]), np.array([1, 2]), np.array([90, 300]),
                                none, np.array([-1, 290]), np.array([False, True]))
    assert got.tolist() == [100, 250]


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory):
    """A two-layer MLP's gradient step over 8 CPU devices (batch-sharded): its weight
    gradients are Eigen dots, which XLA:CPU runs asynchronously."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from harness.capture.steps import capture

    mesh = jax.make_mesh((8,), ("d",))

    def loss(w, x):
        return jnp.mean((jax.nn.relu(x @ w[0]) @ w[1]) ** 2)

    @jax.jit
    def step(w, x):
        return [a - 1e-3 * g for a, g in zip(w, jax.grad(loss)(w, x))]

    rep = NamedSharding(mesh, P())
    w = [jax.device_put(jnp.full((256, 512), 0.01), rep),
         jax.device_put(jnp.full((512, 256), 0.01), rep)]
    x = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("d")))
    out = tmp_path_factory.mktemp("mlp")
    cap = capture(step, (w, x), warmup=1, steps=2, out_dir=out, carry=lambda a, o: (o, a[1]))
    return cap


def test_a_real_trace_times_async_ops_to_completion(mlp_trace, monkeypatch):
    from reference_decode import reference_events, same_events

    from harness.hlo import parse_module
    from predictions.rules import STRUCTURAL

    read = read_events(mlp_trace.trace_dir).events
    same_events(read, reference_events(mlp_trace.trace_dir)[0])  # per event, in plain Python
    monkeypatch.setattr(completions, "durations", lambda start, duration, *rest: duration)
    dispatch = read_events(mlp_trace.trace_dir).events
    longer = read[schema.DURATION_NS] > dispatch[schema.DURATION_NS]
    assert (read[schema.DURATION_NS] >= dispatch[schema.DURATION_NS]).all()
    assert longer.any(), "no op completed after its own event: no async kernel in the trace"
    # no op completes after an op reading its result started (same device, step, execution)
    entry = parse_module(mlp_trace.hlo_text).entry

    def producers(name):
        for o in entry.by_name[name].operand_names:
            p = entry.by_name[o]
            yield from producers(o) if p.opcode in STRUCTURAL else (o,)

    ev = read.assign(**{schema.OP: read[schema.OP].astype(str),
                        "end": read[schema.START_NS] + read[schema.DURATION_NS]})
    ev["k"] = ev.groupby([schema.DEVICE, schema.STEP, schema.OP]).cumcount()
    at = [schema.DEVICE, schema.STEP, "k"]
    names = set(ev[schema.OP])
    checked = 0
    for consumer in names & set(entry.by_name):
        for producer in set(producers(consumer)) & names:
            pair = ev[ev[schema.OP] == consumer].merge(ev[ev[schema.OP] == producer], on=at)
            assert (pair["end_y"] <= pair[f"{schema.START_NS}_x"]).all(), (producer, consumer)
            checked += len(pair)
    assert checked >= 8 * 2 * 5  # five edges or more on every device in both steps
    assert set(longer[longer].index.map(ev[schema.OP].get)) <= names
    pd.testing.assert_index_equal(read.index, dispatch.index)
