"""``harness.analyze`` true to the program it is given: a compiled program (as the book calls its
matmuls) is run and traced as it is; the device count is the program's, not the process's; state
a step updates in place (``jax.Ref``s) is left as it was with ``keep_state=True``, and else the
note says how many steps advanced it."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import harness
from harness import schema

STEPS, WARMUP = 2, 1


def _on_four():
    """X[512, 256] split over 4 of the 8 devices, times W[256, 128] replicated there."""
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    x = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("x")))
    w = jax.device_put(jnp.ones((256, 128)), NamedSharding(mesh, P()))
    return x, w


def matmul(x, w):
    return x @ w


def test_a_compiled_program_is_run_as_it_is(tmp_path):
    x, w = _on_four()
    compiled = jax.jit(matmul).lower(x, w).compile()
    run = harness.analyze(compiled, x, w, steps=STEPS, warmup=WARMUP, chip="h100",
                          out_dir=tmp_path)
    assert run.meta[schema.PROGRAM] == "jit_matmul"
    assert run.meta[schema.STEPS_RUN] == WARMUP + 2 * STEPS  # warm-up, traced, timed
    # each device's dot: [128, 256] @ [256, 128], 2 * 128 * 256 * 128 FLOPs
    dots = run.ops[run.ops[schema.CATEGORY] == schema.CAT_MATMUL]
    assert dots[schema.FLOPS].sum() == 2 * 128 * 256 * 128


def test_the_device_count_is_the_programs(tmp_path):
    x, w = _on_four()
    run = harness.analyze(jax.jit(matmul), x, w, steps=STEPS, warmup=WARMUP, chip="h100",
                          out_dir=tmp_path)
    assert run.meta[schema.DEVICE_COUNT] == 4
    assert run.meta[schema.HOST_DEVICE_COUNT] == len(jax.devices()) == 8
    assert " on 4x cpu" in run.title
    assert "the program ran on 4 of this process's 8 devices" in run.notes


@jax.jit
def accumulate(total, x):
    total[...] += x  # a jax.Ref updated in place, as a training state held in refs is
    return (x @ x).sum()  # an op large enough to run traced (a tiny program runs inline)


def test_state_in_refs_is_kept_or_its_steps_are_counted(tmp_path):
    x = jnp.ones((256, 256))
    total = jax.new_ref(jnp.zeros((256, 256)))
    run = harness.analyze(accumulate, total, x, steps=STEPS, warmup=WARMUP, chip="h100",
                          out_dir=tmp_path / "kept", keep_state=True)
    assert np.array_equal(np.asarray(total[...]), np.zeros((256, 256)))  # the caller's
    assert not [n for n in run.notes if "in place" in n]
    run = harness.analyze(accumulate, total, x, steps=STEPS, warmup=WARMUP, chip="h100",
                          out_dir=tmp_path / "advanced")
    ran = run.meta[schema.STEPS_RUN]
    assert ran == WARMUP + 2 * STEPS
    assert np.array_equal(np.asarray(total[...]), np.full((256, 256), float(ran)))  # ran x ones
    assert (f"the step updates its arguments in place (1 jax.Ref): the harness ran it {ran} "
            f"times, which advanced them as many steps (keep_state=True steps copies instead)"
            ) in run.notes
