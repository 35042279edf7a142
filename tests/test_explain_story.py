"""The story of issue 28 (docs/explain.md): a small MLP whose weights are sharded on their
contracting dimension in every layer, against a data-parallel layout of the same model, on 8
CPU devices. explain names each layer's collective, its line and axis and the book's fix; the
good layout has none."""
import inspect
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness import schema
from harness.explain import collectives

B, D, LAYERS = 64, 256, 3
MESH = {"X": 4, "Y": 2}


def mlp(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w)  # each layer's matmul
    return x


# bad: every W[D_X, D] sharded on its contracting dim; x[B_Y, D] (book §4.1 case 2 or 3)
BAD = (P("Y", None), P("X", None))
# good: data parallel, x[B_XY, D] and the weights replicated (case 1: no communication)
GOOD = (P(("X", "Y"), None), P(None, None))


def explain(layout):
    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, layout[0]))
    ws = [jax.device_put(jnp.ones((D, D)), NamedSharding(mesh, layout[1]))
          for _ in range(LAYERS)]
    text = jax.jit(mlp).lower(x, ws).compile().as_text()
    from harness.hlo import parse_module
    return collectives(parse_module(text), mesh=MESH)


def test_bad_layout_names_a_collective_over_x_at_the_layer_line_in_every_layer():
    lines, first = inspect.getsourcelines(mlp)
    line = f"{Path(__file__).name}:{first + 2}"
    table = explain(BAD)
    assert len(table) >= LAYERS
    assert set(table[schema.MESH_AXES]) == {"X"}
    assert table[schema.SOURCE_LINE].str.endswith(line).all()
    # XLA:CPU sums the partial products over X (case 3) and moves a result's sharding with an
    # all-to-all between layers
    assert "case 3: partial sums" in set(table[schema.REASON])
    assert set(table[schema.REASON]) <= {"case 3: partial sums", "case 2: operand gathered",
                                         "resharding (all-to-all)"}
    assert table[schema.FIX].str.len().gt(0).all()


def test_good_layout_has_no_collectives():
    assert explain(GOOD).empty
