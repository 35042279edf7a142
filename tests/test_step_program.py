"""The step program leads: a training script in the public examples' pattern, traced here on 8
CPU devices with a ("data", "model") mesh, holds an initialisation program, an evaluation run
every ``EVAL_EVERY`` steps, a step function not named ``train_step`` and a step that compiles
again for a smaller last batch. The report, ``explain`` and ``compare`` are about the step.

The model (`training.md`'s MLP with a one-output head): h[B_data, F_model] = relu(x[B_data, D]
. w1[D, F_model]); y[B_data, 1] = h . w2[F_model, 1]. The forward's second matmul contracts
over F, sharded over "model" in both operands: partial sums all-reduced over "model" (book
§4.1 case 3), B/4 x 1 floats per device. The backward's weight gradients contract over the
batch, sharded over "data": each device's partial sums of dw1[D, F/2] and dw2[F/2, 1]
all-reduced over "data" (book §6.1), in one all-reduce (XLA combines them).
"""
from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness import report, schema
from harness.analysis.programs import STEP_EXECUTIONS, Measured, program_notes, step_program
from harness.cli import main
from harness.record import Run
from harness.regress import headline, side_by_side
from harness.report.tables import fmt_seconds
from harness.runs.pipeline import analyze_trace

B, D, F, STEPS, EVAL_EVERY = 64, 128, 256, 6, 3
MESH = {"data": 4, "model": 2}
FLOAT32 = 4  # bytes
STEP = "jit_sgd_update"  # the step function's program: not named train_step
LAYOUTS = {"tp": {"w1": P(None, "model"), "w2": P("model", None)},  # Megatron over "model"
           "replicated": {"w1": P(), "w2": P()}}                  # every parameter replicated


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (D, F)) / math.sqrt(D),
            "w2": jax.random.normal(k2, (F, 1)) / math.sqrt(F)}


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@jax.jit
def sgd_update(params, x, y):
    grads = jax.grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


@jax.jit
def evaluate(params, x, y):
    return loss_fn(params, x, y)


def _train(out, specs) -> None:
    """The script, run under the profiler as ``harness profile`` runs one: every compile in the
    trace."""
    mesh = jax.make_mesh(tuple(MESH.values()), tuple(MESH), axis_types=(AxisType.Auto,) * 2)
    data = NamedSharding(mesh, P("data", None))
    rng = np.random.default_rng(0)
    with jax.profiler.trace(str(out)):
        shardings = {k: NamedSharding(mesh, s) for k, s in specs.items()}
        params = jax.jit(init, out_shardings=shardings)(jax.random.key(0))
        for step in range(STEPS + 1):
            rows = B if step < STEPS else B // 2  # the last batch is smaller: a recompile
            x = jax.device_put(rng.standard_normal((rows, D), np.float32), data)
            y = jax.device_put(rng.standard_normal((rows, 1), np.float32), data)
            params = sgd_update(params, x, y)
            if step % EVAL_EVERY == 0 and step < STEPS:
                evaluate(params, x, y).block_until_ready()
        jax.block_until_ready(params)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("step_program")
    for name, specs in LAYOUTS.items():
        _train(root / name, specs)
    return root


@pytest.fixture(scope="module")
def runs(traces):
    """Each layout's trace analysed by default (its step program) and stored."""
    return {name: Run.load(analyze_trace(traces / name, chip="cpu", mesh=MESH).save(
        traces / f"{name}-run")) for name in LAYOUTS}


def _keys(table: pd.DataFrame) -> set[tuple[str, str]]:
    return set(zip(table[schema.PROGRAM].astype(str), table[schema.PROGRAM_ID].astype(str)))


def _id(run: Run, program: str, executions: int) -> str:
    p = run.programs
    (pid,) = p[(p[schema.PROGRAM] == program) & (p[schema.EXECUTIONS] == executions)][
        schema.PROGRAM_ID]
    return str(pid)


# --- which program is the step ---------------------------------------------------------------

def _measured(total_s: float, executions: int) -> Measured:
    ops = pd.DataFrame({schema.TOTAL_S: [total_s / 2, total_s / 2]})
    return Measured(ops, pd.DataFrame(), executions, pd.DataFrame())


def test_the_step_is_the_most_device_time_among_programs_run_three_times():
    per = {("jit_init", "1"): _measured(9.0, 1),        # one-off: the most time of all
           ("jit_eval", "2"): _measured(5.0, STEP_EXECUTIONS - 1),
           ("jit_step", "3"): _measured(2.0, 40), ("jit_data", "4"): _measured(1.0, 40),
           ("jit_step", "5"): _measured(4.0, 1)}        # the step compiled again, once
    assert step_program(per) == ("jit_step", "3")
    # none ran three times: the most device time
    assert step_program({(k, ""): _measured(t, 1) for k, t in (("a", 1.0), ("b", 3.0))}) == (
        "b", "")


def test_the_report_is_of_the_step_program(runs):
    run = runs["tp"]
    step = _id(run, STEP, STEPS)
    # the step program by the rule, from the programs table: most total_s among >= 3 executions
    p = run.programs[run.programs[schema.EXECUTIONS] >= STEP_EXECUTIONS]
    chosen = p.loc[p[schema.TOTAL_S].idxmax()]
    assert (chosen[schema.PROGRAM], str(chosen[schema.PROGRAM_ID])) == (STEP, step)
    # its ops alone; the init, evaluation and the other compilation are in the programs table
    assert _keys(run.ops) == {(STEP, step)}
    assert (run.meta[schema.PROGRAM], run.meta[schema.PROGRAM_ID]) == (STEP, step)
    assert {"jit_init", "jit_evaluate"} <= set(run.programs[schema.PROGRAM])
    assert run.programs.set_index(schema.PROGRAM_ID).loc[step, schema.EXECUTIONS] == STEPS
    assert any("--program NAME|ID|all" in n for n in run.notes)
    text = report.render(run, "text", top=20)
    assert text.startswith(f"{STEP} on 8x cpu")


def test_a_recompiled_step_says_which_parameters_changed(runs):
    run = runs["tp"]
    again = _id(run, STEP, 1)
    (note,) = [n for n in run.notes if n.startswith(f"{STEP} compiled again")]
    assert f"program {again} (1 execution)" in note
    # the last batch: x[B, D] and y[B, 1] became half as long, by name
    assert f"'x': f32[{B},{D}] -> f32[{B // 2},{D}]" in note
    assert f"'y': f32[{B},1] -> f32[{B // 2},1]" in note
    assert "params" not in note  # the weights did not change


def test_program_id_and_name_give_the_same_rows_for_a_program_compiled_once(traces, runs):
    eval_id = _id(runs["tp"], "jit_evaluate", STEPS // EVAL_EVERY)
    by_name = analyze_trace(traces / "tp", chip="cpu", mesh=MESH, program="jit_evaluate")
    by_id = analyze_trace(traces / "tp", chip="cpu", mesh=MESH, program=eval_id)
    assert _keys(by_name.ops) == _keys(by_id.ops) == {("jit_evaluate", eval_id)}
    cols = [schema.OP, schema.COUNT, schema.PREDICTED_S]
    assert by_name.ops.sort_values(schema.OP)[cols].reset_index(drop=True).equals(
        by_id.ops.sort_values(schema.OP)[cols].reset_index(drop=True))
    # a name compiled twice: both compilations, each row naming its own
    both = analyze_trace(traces / "tp", chip="cpu", mesh=MESH, program=STEP)
    assert {pid for _, pid in _keys(both.ops)} == {_id(runs["tp"], STEP, STEPS),
                                                   _id(runs["tp"], STEP, 1)}


# --- explain -------------------------------------------------------------------------------------

def test_explain_lists_the_steps_collectives_by_mesh_axis_with_gradients_named(runs):
    run = runs["tp"]
    table = run.collectives
    assert _keys(table) == {(STEP, run.meta[schema.PROGRAM_ID])}
    grad = table[table[schema.REASON] == "gradient reduction"]
    (g,) = grad.itertuples(index=False)
    g = g._asdict()
    # dw1[D, F/2] and dw2[F/2, 1], each device's share of the model axis, summed over "data"
    assert g[schema.MESH_AXES] == "data"
    assert g[schema.DEVICE_BYTES] == (D * F // 2 + F // 2) * FLOAT32
    assert g[schema.WHY].startswith("the weight gradients of params['w1'], params['w2']: ")
    assert "reduce-scatter the gradients" in g[schema.FIX] and "overlap" in g[schema.FIX]
    (fwd,) = table[table[schema.REASON] == "case 3: partial sums"].itertuples(index=False)
    fwd = fwd._asdict()
    assert fwd[schema.MESH_AXES] == "model"
    assert fwd[schema.DEVICE_BYTES] == B // 4 * 1 * FLOAT32
    # w2's only non-contracting dimension has size 1: nothing to shard there
    assert "non-contracting" not in fwd[schema.FIX] and "reduce-scatter" in fwd[schema.FIX]
    assert len(table) == 2


def test_explain_figures_are_each_compilations_own(runs):
    run = runs["tp"]
    ops = run.ops.set_index(schema.OP)
    for _, row in run.collectives.iterrows():  # predicted once per execution, not summed
        assert row[schema.PREDICTED_S] == ops.loc[row[schema.OP], schema.PREDICTED_S]
        assert row[schema.COUNT] == 1


def test_explain_cli_program_id_and_name_on_the_stored_run(runs, tmp_path, capsys):
    run = runs["tp"]
    eval_id = _id(run, "jit_evaluate", STEPS // EVAL_EVERY)
    tables = {}
    for which in ("jit_evaluate", eval_id):
        out = tmp_path / f"{which}.json"
        assert main(["explain", str(run.path), "--program", which, "--json", str(out)]) == 0
        tables[which] = json.loads(out.read_text())
    capsys.readouterr()
    by_name, by_id = tables["jit_evaluate"], tables[eval_id]
    assert by_name and [r[schema.OP] for r in by_name] == [r[schema.OP] for r in by_id]
    assert {(r[schema.PROGRAM], r[schema.PROGRAM_ID]) for r in by_id} == {
        ("jit_evaluate", eval_id)}
    # the scalar loss's all-reduce over "data": 4 bytes, nothing a reduce-scatter could split
    loss = [r for r in by_id if r[schema.DEVICE_BYTES] == FLOAT32]
    assert loss and loss[0][schema.MESH_AXES] == "data" and loss[0][schema.FIX] == ""
    # every program: each row names its program and compilation
    assert main(["explain", str(run.path), "--program", "all"]) == 0
    out = capsys.readouterr().out
    assert "program_id" in out and STEP in out and "jit_evaluate" in out


# --- compare of two layouts ----------------------------------------------------------------------

def test_compare_of_two_layouts_is_of_the_step_programs_and_its_parts_add_up(runs):
    a, b = runs["tp"], runs["replicated"]
    lay = side_by_side.two_layouts(a, b)
    # the collectives side by side are the step programs' alone (no evaluation's loss sum)
    steps = {k: r.collectives[schema.SOURCE_OP].map(side_by_side.source_key)
             for k, r in runs.items()}
    assert set(lay.collectives[schema.SOURCE_OP]) == set(steps["tp"]) | set(steps["replicated"])
    ta, tb = a.step[schema.STEP_S], b.step[schema.STEP_S]
    assert sum(s for _, s in lay.attribution) == pytest.approx(abs(tb - ta))
    shown = headline.parts(lay.attribution, abs(tb - ta))
    assert sum(s for _, s in shown) == pytest.approx(abs(tb - ta))
    # each part in the headline with its sign, negative ones too
    for what, s in shown:
        assert f"{'+' if s >= 0 else '-'}{fmt_seconds(abs(s))} {what}" in lay.headline


def _double(x):
    return x * 2


def test_a_sharding_change_is_named_by_the_mesh_axes():
    from harness.analysis.recompiles import differences
    from harness.hlo import parse_module

    mesh = jax.make_mesh(tuple(MESH.values()), tuple(MESH), axis_types=(AxisType.Auto,) * 2)

    def compiled(spec):
        x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, spec))
        return parse_module(jax.jit(_double).lower(x).compile().as_text())

    a, b, c = compiled(P("data", None)), compiled(P(None, "model")), compiled(P())
    assert differences(a, b, MESH) == ["parameter 0 'x': P('data', None) -> P(None, 'model')"]
    assert differences(b, c, MESH) == ["parameter 0 'x': P(None, 'model') -> replicated"]
    assert differences(a, a, MESH) == []


def _triple(x):
    return x * 3 + 1


def test_a_different_function_of_the_same_name_is_said_so():
    from harness.analysis.recompiles import note
    from harness.hlo import parse_module

    def module(fn, x):
        fn.__name__ = "step"  # two functions of one name, as two scripts' `step`s
        return parse_module(jax.jit(fn).lower(x).compile().as_text())

    x = jnp.ones((B, D))
    a, b = module(_double, x), module(_triple, x)  # same parameter: no shape or sharding moved
    keys = (("jit_step", "1"), ("jit_step", "2"))
    runs = dict(zip(keys, (3, 2)))
    said = note("jit_step", keys[0], keys[1], runs, dict(zip(keys, (a, b))))
    assert "a different function of the same name: its ops come from other lines" in said
    same = note("jit_step", keys[0], keys[1], runs, dict(zip(keys, (a, module(_double, x)))))
    assert "a static argument or a compile option differs" in same


def test_a_program_asked_for_by_name_is_said_to_be_so():
    """A report of a program the caller named (``--program``, the generation loop's generate)
    says so, not that it had the most device time (here it has the least)."""
    per = {("jit_prefill", "1"): _measured(9.0, 9), ("jit_generate", "2"): _measured(2.0, 9)}
    ran, main = list(per), ("jit_generate", "2")
    (asked,) = program_notes(ran, [main], per, {}, main, asked="jit_generate")[:1]
    assert "(the program asked for)" in asked and "most device time" not in asked
    (default,) = program_notes(ran, [main], per, {}, main)[:1]
    assert "(the most device time among the programs run 3 or more times)" in default
