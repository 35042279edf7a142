"""``harness compare A B`` of two layouts of one model: a two-layer MLP on a 4x2 mesh (X: the
batch; Y: the weights), run through the harness on 8 CPU devices.

- A, the good layout (Megatron): W_in[D, F_Y], W_out[F_Y, D]. The first matmul contracts over D,
  unsharded: local; the second contracts over F, sharded over Y in both operands: partial sums,
  then an all-reduce over Y (`sharding.md`, case 3) of the output, B_X x D.
- B, the bad one: W_in[D_Y, F], W_out[F, D_Y]. The first matmul contracts over D, sharded over Y
  in W_in only: XLA multiplies the local block of D and all-reduces the partial sums over Y,
  B_X x F; the second contracts over F, unsharded: local.

Both programs name their one collective ``all-reduce``: joined by name they would be one op
present in both; by source op they are two, each in one layout.
"""
import json
from pathlib import Path

import pytest

from harness import schema
from harness.cli import main
from harness.record import Run
from harness.regress import changes, judge, side_by_side

B, D, F, X, Y = 64, 128, 256, 4, 2
FIRST, SECOND = "bd,df->bf/dot_general", "bf,fd->bd/dot_general"
FLOAT32 = 4  # bytes


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import harness

    mesh = Mesh(np.array(jax.devices()).reshape(X, Y), ("X", "Y"))

    @jax.jit
    def mlp(x_BD, w_in_DF, w_out_FD):
        h_BF = jnp.tanh(jnp.einsum("bd,df->bf", x_BD, w_in_DF))
        return jnp.einsum("bf,fd->bd", h_BF, w_out_FD)

    def put(a, spec):
        return jax.device_put(a, NamedSharding(mesh, spec))

    x, w_in, w_out = jnp.ones((B, D)), jnp.full((D, F), 0.01), jnp.full((F, D), 0.01)
    root = tmp_path_factory.mktemp("layouts")
    out = {}
    for name, (s_in, s_out) in {"good": (P(None, "Y"), P("Y", None)),
                                "bad": (P("Y", None), P(None, "Y"))}.items():
        run = harness.analyze(mlp, put(x, P("X", None)), put(w_in, s_in), put(w_out, s_out),
                              steps=3, warmup=1, out_dir=root / f"{name}-trace")
        out[name] = Run.load(run.save(root / name))
    return out["good"], out["bad"]


def _line_of(text: str) -> str:
    """``tests/test_layouts.py:42``: where this file calls ``jnp.einsum(text, ...)``."""
    lines = Path(__file__).read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if f"jnp.einsum({text}" in line)
    return f"tests/{Path(__file__).name}:{at}"


def _own(run: Run, source: str, category: str):
    """The run's own ops of a source op and category: their measured time and number."""
    o = run.ops[(run.ops[schema.SOURCE_OP].str.endswith(source))
                & (run.ops[schema.CATEGORY] == category)]
    return o[schema.MEASURED_S].sum(), len(o)


def _row(frame, source, category):
    rows = frame[(frame[schema.OP] == source) & (frame[schema.CATEGORY] == category)]
    assert len(rows) == 1, frame[[schema.OP, schema.CATEGORY]]
    return rows.iloc[0]


def test_matmuls_are_matched_by_source_op_not_by_name(runs):
    a, b = runs
    lay = side_by_side.two_layouts(a, b)
    assert lay is not None and lay.matched_by == side_by_side.SOURCE
    for source in (FIRST, SECOND):
        row = _row(lay.ops, source, schema.CAT_MATMUL)
        (ta, na), (tb, nb) = (_own(r, source, schema.CAT_MATMUL) for r in (a, b))
        assert (row[schema.OPS_MATCHED + "_a"], row[schema.OPS_MATCHED + "_b"]) == (na, nb)
        assert (na, nb) == (1, 1)
        assert row[schema.BASELINE_S] == pytest.approx(ta)
        assert row[schema.CANDIDATE_S] == pytest.approx(tb)
        assert row[schema.SIDE] == side_by_side.BOTH


def test_the_collective_of_each_layout_is_its_own(runs):
    a, b = runs
    # by name, the two all-reduces are one op in both runs ...
    by_name = changes.ops(a, b)
    named = by_name[by_name[schema.COLLECTIVE] == "all-reduce"]
    assert len(named) == 1 and named.iloc[0][[schema.BASELINE_S, schema.CANDIDATE_S]].notna().all()
    # ... by source op, the bad layout's all-reduce (of the first matmul's partial sums over Y)
    # is only in B and the good one's (of the second's) only in A
    c = side_by_side.two_layouts(a, b).collectives.set_index(schema.SOURCE_OP)
    assert set(c.index) == {FIRST, SECOND}
    only_b, only_a = c.loc[FIRST], c.loc[SECOND]
    assert only_b[schema.SIDE] == side_by_side.ONLY_B and only_a[schema.SIDE] == side_by_side.ONLY_A
    assert (only_b[schema.COLLECTIVE], only_b[schema.GROUP_SIZE]) == ("all-reduce", Y)
    # bytes per device: the partial sums each device holds, B_X x F in B and B_X x D in A
    assert only_b[schema.COMM_BYTES + "_b"] == B // X * F * FLOAT32
    assert only_a[schema.COMM_BYTES + "_a"] == B // X * D * FLOAT32


def test_step_decomposition_side_by_side_is_each_runs_step_object(runs):
    a, b = runs
    figs = judge.compare(a, b).figures.set_index(schema.FIGURE)
    for name in (schema.STEP_S, schema.COMPUTE_S, schema.EXPOSED_COMM_S, schema.IDLE_S,
                 schema.PREDICTED_STEP_S):
        assert figs.loc[name, schema.BASELINE_S] == pytest.approx(a.step[name])
        assert figs.loc[name, schema.CANDIDATE_S] == pytest.approx(b.step[name])


def test_the_verdict_names_the_slower_layout_and_what_its_step_is_made_of(runs):
    a, b = runs
    ta, tb = a.step[schema.STEP_S], b.step[schema.STEP_S]
    slow, fast = ("B", "A") if tb >= ta else ("A", "B")
    lay = side_by_side.two_layouts(a, b)
    # on CPU the two all-reduces mostly measure the devices' rendezvous: either may be slower
    ratio = max(ta, tb) / min(ta, tb)
    assert lay.headline.startswith(f"{slow} is {ratio:.3g}x slower than {fast}" if ratio >= 1.005
                                   else "A and B take the same step (within 0.5%)")
    # the contributions add up to the step difference: compute + exposed communication + idle
    assert sum(s for _, s in lay.attribution) == pytest.approx(abs(tb - ta))
    exposed = {w: s for w, s in lay.attribution if w.startswith("exposed all-reduce")}
    sign = 1 if slow == "B" else -1
    # each named by its source line (the einsum's, in this file) and the axis it runs over:
    # the weights are sharded over Y (the module docstring), the arguments' mesh names it
    first, second = (f"{_line_of(spec)}) over axis Y ({Y} devices)"
                     for spec in ('"bd,df->bf"', '"bf,fd->bd"'))
    assert exposed[f"exposed all-reduce from {FIRST} ({first}, only in B"] == pytest.approx(
        sign * b.step[schema.EXPOSED_COMM_S])
    assert exposed[f"exposed all-reduce from {SECOND} ({second}, only in A"] == pytest.approx(
        -sign * a.step[schema.EXPOSED_COMM_S])
    # two runs named explicitly: the message opens with it, as the verdict qualifies it ("B
    # measured 1.1x slower than A, within the noise of one run a side" beside anything but a
    # regression or an improvement: never "B is slower" beside ok)
    v = judge.compare(a, b, layouts_first=True)
    assert v.layouts is not None and v.message.startswith(v.layouts.headline)
    plain = v.verdict == judge.IMPROVEMENT or (v.verdict == judge.REGRESSION
                                              and v.change > 0)
    assert (v.layouts.headline == lay.headline) == (plain or ratio < 1.005)


def test_cli_json_and_text(runs, capsys):
    a, b = runs
    code = main(["compare", str(a.path), str(b.path), "--format", "json"])
    obj = json.loads(capsys.readouterr().out)
    assert code == (1 if obj[schema.VERDICT] == judge.REGRESSION else 0)
    lay = obj["pairs"][0]["layouts"]
    assert lay[schema.MATCHED_BY] == side_by_side.SOURCE
    assert {c[schema.SOURCE_OP]: c[schema.SIDE] for c in lay["collectives"]} == {
        FIRST: side_by_side.ONLY_B, SECOND: side_by_side.ONLY_A}
    assert [r[schema.OP] for r in lay["unmatched"]["A"]] == [SECOND]
    main(["compare", str(a.path), str(b.path)])
    out = capsys.readouterr().out
    assert f"only in A: {SECOND} (all-reduce, 1 op(s)" in out and lay["headline"] in out


def test_a_trace_is_a_side(runs, capsys):
    a, b = runs
    trace = next((a.path / "trace").rglob("*.xplane.pb"))
    main(["compare", str(trace), str(b.path), "--format", "json"])
    pair = json.loads(capsys.readouterr().out)["pairs"][0]
    assert pair["baseline"] == str(trace)
    assert {c[schema.SOURCE_OP] for c in pair["layouts"]["collectives"]} == {FIRST, SECOND}


def test_the_same_program_is_joined_by_name_and_an_old_run_falls_back_to_names(runs):
    a, b = runs
    assert side_by_side.two_layouts(a, a) is None and judge.compare(a, a).layouts is None
    old = Run(meta=b.meta, ops=b.ops.drop(columns=[schema.SOURCE_OP]), step=b.step)
    assert side_by_side.matched_by(a, old) == side_by_side.NAME
    assert side_by_side.two_layouts(a, old) is None


def _made(fingerprint: str, jit: str, names: tuple[str, str], matmul_s: float, gather_s: float,
          gather_bytes: float, step: tuple[float, float, float]) -> Run:
    """A hand-made run: one matmul and the all-gather over X that feeds it, both from the
    source op ``jit(<jit>)/x/dot_general``; ``step``: compute, exposed comm and idle seconds,
    the all-gather all exposed."""
    import pandas as pd

    compute, exposed, idle = step
    ops = pd.DataFrame({
        schema.PROGRAM: "jit_f", schema.OP: list(names),
        schema.CATEGORY: [schema.CAT_MATMUL, schema.CAT_COLLECTIVE], schema.COUNT: 1.0,
        schema.MEASURED_S: [matmul_s, gather_s], schema.PREDICTED_S: [matmul_s / 2, gather_s / 4],
        schema.EFFICIENCY: [0.5, 0.25], schema.FLOPS: [1e9, 0.0], schema.HBM_BYTES: [1e6, 1e6],
        schema.COMM_BYTES: [0.0, gather_bytes], schema.BOUND: ["compute", "comm"],
        schema.COLLECTIVE: ["", "all-gather"], schema.GROUP_SIZE: [1, 4],
        schema.SOURCE_OP: f"jit({jit})/x/dot_general"})
    gather = {schema.OP: names[1], schema.COMM_S: exposed, schema.EXPOSED_COMM_S: exposed}
    return Run(meta={schema.HLO_FINGERPRINTS: {"jit_f": fingerprint},
                     schema.MESH: {"X": 4, "Y": 2}},
               ops=ops, step={schema.STEP_S: compute + exposed + idle, schema.COMPUTE_S: compute,
                              schema.EXPOSED_COMM_S: exposed, schema.IDLE_S: idle,
                              schema.STEP_COLLECTIVES: [gather]})


def test_a_collective_in_both_layouts_and_the_baseline_the_slower():
    # A: 10 ms = compute 5 + exposed 4 + idle 1; B: 5 ms = 3.5 + 1 + 0.5; other fusion names,
    # other outer jit names, the same source op
    a = _made("1", "step_a", ("fusion.1", "all-gather.2"), 3e-3, 4e-3, 1e6, (5e-3, 4e-3, 1e-3))
    b = _made("2", "step_b", ("fusion.7", "all-gather.9"), 2e-3, 1e-3, 5e5, (3.5e-3, 1e-3, 5e-4))
    lay = side_by_side.two_layouts(a, b)
    c = lay.collectives.iloc[0]
    assert len(lay.collectives) == 1 and c[schema.SIDE] == side_by_side.BOTH
    assert (c[schema.SOURCE_OP], c[schema.AXES]) == ("x/dot_general", "X")
    assert (c[schema.BASELINE_S], c[schema.CANDIDATE_S]) == (4e-3, 1e-3)
    assert (c[schema.COMM_BYTES + "_a"], c[schema.COMM_BYTES + "_b"]) == (1e6, 5e5)
    assert lay.headline == (
        "A is 2x slower than B (step 10 ms -> 5 ms): +3 ms exposed all-gather from x/dot_general "
        "over axis X (4 devices); +1.5 ms compute (most in x/dot_general, matmul: 2 ms -> 3 ms); "
        "+500 us idle")
    assert sum(s for _, s in lay.attribution) == pytest.approx(5e-3)


@pytest.mark.slow
def test_llama_train_dp_against_fsdp(tmp_path):
    """FSDP (ZeRO-3, `training.md`) gathers each weight before its matmul: all-gathers from the
    matmuls' source ops that data parallelism does not have; the matmuls themselves match."""
    from harness.runs.workload import run_workload

    a, b = (Run.load(run_workload("llama_train", overrides={"parallelism": p}, mesh="4x2",
                                  steps=2, warmup=1, out=tmp_path / p, with_plots=False).path)
            for p in ("dp", "fsdp"))
    lay = side_by_side.two_layouts(a, b)
    c = lay.collectives
    gathers = c[(c[schema.COLLECTIVE] == "all-gather") & (c[schema.SIDE] == side_by_side.ONLY_B)]
    assert gathers[schema.SOURCE_OP].str.endswith("btd,df->btf/dot_general").any()
    only_b = c[schema.SIDE] == side_by_side.ONLY_B
    assert not (c[schema.COLLECTIVE] == "all-gather").loc[~only_b].any()
    assert (gathers[schema.AXES] == "X+Y").all()  # the weights' D is sharded over both axes
    mm = lay.ops[lay.ops[schema.CATEGORY] == schema.CAT_MATMUL]
    assert (mm[schema.SIDE] == side_by_side.BOTH).all()
    assert sum(s for _, s in lay.attribution) == pytest.approx(
        abs(b.step[schema.STEP_S] - a.step[schema.STEP_S]))
