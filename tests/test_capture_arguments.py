"""How capture takes a user's step: static arguments by position and by keyword, on jit's own
executable and on the harness's compiled one (the GPU path, run here through a CPU entry
patched into the options registry); steps that keep compiling anew; errors from the user's
code shown as theirs; the arguments' signature jit keys on."""
import functools
import inspect
import logging

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import harness
from harness.capture import arguments, driver, program
from harness.capture.steps import TRACE_COMPILE_OPTIONS, capture
from harness.errors import HarnessError, UserError

OPTIONS = {"xla_cpu_enable_fast_math": False}  # an option XLA:CPU takes: the GPU path on CPU


@functools.partial(jax.jit, static_argnums=(2,))
def sgd_by_position(w, x, lr):
    return w - lr * jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)


@functools.partial(jax.jit, static_argnames=("lr",))
def sgd_by_name(w, x, *, lr):
    return w - lr * jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)


def _w_x():
    return jnp.ones((8, 4)), jnp.ones((2, 8))


@pytest.mark.parametrize("options", [{}, OPTIONS])
def test_static_keyword_arguments_are_left_to_jit(tmp_path, monkeypatch, options):
    monkeypatch.setitem(TRACE_COMPILE_OPTIONS, "cpu", options)
    seen = []

    def carry(args, out):
        seen.append(float(out[0, 0]))
        return (out, args[1])

    cap = capture(sgd_by_name, _w_x(), kwargs={"lr": 0.01}, warmup=1, steps=2,
                  out_dir=tmp_path, carry=carry)
    assert cap.meta["compiler_options"] == options  # the options path calls its own compile
    # d/dw sum((x @ w)^2) = 2 x^T (x @ w); x, w all ones: x @ w = 8, each entry of the
    # gradient 2 * 2 * 8 = 32 * w: w shrinks by (1 - 0.01 * 32) = 0.68 per step; 1 warm-up,
    # 2 traced and 2 timed steps, then (options) the user's own executable: 1 + 2 more
    calls = 1 + 2 * 2 + (1 + 2 if options else 0)
    assert seen == pytest.approx([0.68 ** k for k in range(1, calls + 1)], rel=1e-5)
    assert cap.program == "jit_sgd_by_name"


def test_static_positional_arguments_trace_jits_own_executable(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(TRACE_COMPILE_OPTIONS, "cpu", OPTIONS)
    with caplog.at_level(logging.WARNING, logger=program.__name__):
        cap = capture(sgd_by_position, (*_w_x(), 0.01), warmup=1, steps=2, out_dir=tmp_path)
    assert cap.meta["compiler_options"] == {}  # what was traced: XLA's defaults, said so
    assert "static positional arguments" in caplog.text
    assert "graph_step_s" not in cap.meta
    assert cap.program == "jit_sgd_by_position"


@pytest.mark.parametrize("options", [{}, OPTIONS])
def test_a_plain_function_of_nnx_objects_updates_them_as_nnx_jit_would(tmp_path, monkeypatch,
                                                                        options):
    import optax
    from flax import nnx

    monkeypatch.setitem(TRACE_COMPILE_OPTIONS, "cpu", options)
    model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    def update(model, optimizer, x):  # no decorator: the harness jits it with nnx.jit
        grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
        optimizer.update(model, grads)

    cap = capture(update, (model, optimizer, jnp.ones((2, 8))), warmup=1, steps=2,
                  out_dir=tmp_path)
    assert cap.meta["compiler_options"] == options
    # 1 warm-up, 2 traced, 2 timed steps; with options the user's own executable 1 + 2 more:
    # each call updates the caller's optimizer in place, as nnx.jit's own calls do
    assert int(optimizer.step[...]) == 1 + 2 * 2 + (1 + 2 if options else 0)
    assert cap.program == "jit_update"


def test_a_step_that_never_settles_is_refused_after_max_recompiles(tmp_path):
    step = jax.jit(lambda v: v * 2.0)
    with pytest.raises(HarnessError, match=f"after {driver.MAX_RECOMPILES} recompilations"):
        capture(step, (jnp.ones(4),), warmup=1, steps=1, out_dir=tmp_path,
                carry=lambda args, out: (jnp.concatenate([out, out]),))  # 4, 8, 16, ... long


def test_a_carry_that_reshards_makes_one_recompile_and_a_note(tmp_path):
    mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("X", None))
    cols = NamedSharding(mesh, P(None, "X"))
    step = jax.jit(lambda w_DF: jnp.tanh(w_DF) * 0.5)
    w = jax.device_put(jnp.ones((16, 16)), rows)
    cap = capture(step, (w,), warmup=2, steps=1, out_dir=tmp_path,
                  carry=lambda args, out: (jax.device_put(out, cols),))
    (note,) = cap.notes
    # named by the step's own parameter name, once: the columns layout then holds
    assert note.startswith("<lambda> was compiled 2 times in warm-up")
    assert "after warm-up step 1: w_DF: sharding P('X', None) -> P(None, 'X')" in note
    assert "then" not in note


def test_signature_keys_on_what_jit_keys_on():
    mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jnp.ones((8, 4))
    same = arguments.signature((jax.device_put(x, NamedSharding(mesh, P())),), {})
    alike = arguments.signature((jax.device_put(x, NamedSharding(mesh, P(None, None))),), {})
    split = arguments.signature((jax.device_put(x, NamedSharding(mesh, P("X"))),), {})
    assert arguments.changes(same, alike) == ""  # P() and P(None, None): one layout
    assert arguments.changes(same, split) == "args[0]: sharding P() -> P('X',)"
    wider = arguments.signature((jnp.ones((8, 4), jnp.bfloat16),), {"lr": 0.1})
    narrow = arguments.signature((jnp.ones((4, 4)),), {"lr": jnp.float32(0.1)})
    assert arguments.changes(wider, narrow) == (
        "args[0]: shape (8, 4) -> (4, 4), dtype bfloat16 -> float32; "
        "lr: dtype weak float32 -> float32")


def _bad_step(w, x):
    return _helper(w, x)


def _helper(w, x):
    return w @ x  # contracting 4 against 5: jax raises while tracing this line


def test_an_error_in_the_users_function_is_one_line_naming_their_frame(tmp_path):
    line = inspect.getsourcelines(_helper)[1] + 1
    with pytest.raises(UserError) as raised:
        harness.analyze(_bad_step, jnp.ones((3, 4)), jnp.ones((5, 6)), steps=1, warmup=0,
                        chip="h100", out_dir=tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("_bad_step raised TypeError: dot_general requires contracting")
    assert message.endswith(f"(at {__file__}:{line}, in _helper)")
    assert isinstance(raised.value.__context__, TypeError)  # theirs, kept
    # analyze raises it from its own frame: none of capture's is in the traceback
    frames = [f.function for f in inspect.getinnerframes(raised.tb)]
    assert "capture" not in frames and "_capture" not in frames


def test_an_error_in_the_users_carry_is_named_as_theirs(tmp_path):
    def carry(args, out):
        return (out["missing"],)

    line = inspect.getsourcelines(carry)[1] + 1
    with pytest.raises(UserError, match=rf"^carry raised TypeError: .* \(at .*:{line}, "
                                        rf"in carry\)$"):
        capture(jax.jit(lambda v: v + 1), (jnp.ones(3),), warmup=1, steps=1,
                out_dir=tmp_path, carry=carry)


def _flat(prefix: str, node) -> dict[str, tuple]:
    """``prefix`` + each array's path in an NNX node's state (``nnx.state``, written here as
    code reads it: ``.opt_state[0].mu.linear1.kernel``) -> its shape."""
    from flax import nnx

    return {prefix + "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in path):
            tuple(v.get_value().shape) for path, v in nnx.to_flat_state(nnx.state(node))}


def test_an_nnx_jit_programs_parameters_are_named_by_their_nnx_paths():
    """``nnx_names``: JAX's name of each parameter an nnx.jit step takes for its model's and
    optimizer's arrays (``model.states[0][k]``) -> the NNX path of an array of that parameter's
    shape; the batch, which JAX names itself, is not among them."""
    import optax
    from flax import nnx

    from harness.hlo import parse_module
    from harness.hlo.signature import parameters

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.linear1 = nnx.Linear(8, 32, rngs=rngs)
            self.linear2 = nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, x):
            return self.linear2(nnx.relu(self.linear1(x)))

    @nnx.jit
    def step(model, optimizer, x):
        grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
        optimizer.update(model, grads)

    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    args = (model, optimizer, jnp.ones((2, 8)))
    lowered = step.lower(*args)
    named = arguments.nnx_names(step, lowered, args, {})
    expected = {**_flat("model", model), **_flat("optimizer", optimizer)}
    assert "model.linear1.kernel" in expected and "optimizer.opt_state[0].mu.linear2.bias" in (
        expected)
    assert sorted(named.values()) == sorted(expected)
    shown = {p.name: tuple(p.dims) for p in parameters(parse_module(lowered.compile().as_text()))}
    assert {named[k]: dims for k, dims in shown.items() if k in named} == expected
    assert "x" in shown and "x" not in named
    assert arguments.nnx_names(sgd_by_name, sgd_by_name.lower(*_w_x(), lr=0.1), _w_x(),
                               {"lr": 0.1}) == {}  # no NNX object: nothing to rename


def test_a_recompile_note_names_parameters_jax_left_unnamed_by_the_recorded_paths():
    """A program taking a ``jax.Ref`` records no parameter names; the capture's paths by
    parameter number (``argument_paths``) name them in what differs between compilations."""
    from harness.analysis.recompiles import differences
    from harness.hlo import parse_module

    def scale(state, x):
        state["w"][...] = state["w"][...] * x
        return x * 2

    jitted, state = jax.jit(scale), {"w": jax.new_ref(jnp.ones((4,)))}
    lowered = [jitted.lower(state, jnp.ones((n,))) for n in (4, 1)]
    a, b = (parse_module(low.compile().as_text()) for low in lowered)
    names = arguments.argument_paths(lowered[0], arguments.parameter_names(scale))
    assert names == ["state['w']", "x"]
    assert differences(a, b) == ["parameter 1: f32[4] -> f32[1]"]  # JAX's record: no names
    assert differences(a, b, names=names) == ["parameter 1 'x': f32[4] -> f32[1]"]
