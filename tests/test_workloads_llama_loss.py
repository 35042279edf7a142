"""``num_vocab_tiling``: llama_train's loss over chunks of tokens (``workloads.llama.loss``), and
``donate_state``: the step consuming its state as MaxText's does.

The chunked loss is the whole loss (value and gradients, fp32), keeps one chunk's logits live
instead of all of them (XLA's memory_analysis), and runs the same matmuls plus the one output
projection its backward recomputes (the harness' HLO FLOPs)."""
import jax
import numpy as np
import pytest

import workloads
from harness import hlo, schema
from workloads.base import WorkloadError
from workloads.llama import model, train
from workloads.llama.sharding import Sharder
from workloads.mesh import make_mesh


def _cfg(chunks: int, **over):
    sets = {"param_dtype": "float32", "num_vocab_tiling": chunks, **over}
    return workloads.make_config("llama_train", "tiny", sets)


def _loss_and_grads(cfg, mesh_shape):
    mesh = make_mesh(mesh_shape) if mesh_shape else None
    sh = Sharder(mesh, cfg.parallelism, cfg)
    params = model.init_params(cfg, 0, cfg.param_dtype)
    inputs, targets = train.batch(cfg)
    fn = jax.jit(jax.value_and_grad(lambda p: train.loss_fn(p, inputs, targets, cfg, sh)))
    loss, grads = fn(params)
    return float(loss), jax.tree.map(np.asarray, grads)


@pytest.mark.parametrize("mesh_shape,parallelism", [(None, "dp"), ("8x1", "fsdp"),
                                                    ("4x2", "fsdp_tp")])
@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_chunked_loss_and_its_gradients_are_the_whole_ones(mesh_shape, parallelism):
    whole = _loss_and_grads(_cfg(1, parallelism=parallelism), mesh_shape)
    for chunks in (2, 4, 16):     # T = 16: chunks of 8, 4 and 1 tokens
        loss, grads = _loss_and_grads(_cfg(chunks, parallelism=parallelism), mesh_shape)
        assert loss == pytest.approx(whole[0], rel=1e-6)
        for g, want in zip(jax.tree.leaves(grads), jax.tree.leaves(whole[1])):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _compiled(cfg):
    fn, args = train.build(cfg, None, abstract=True)
    return fn.lower(*args).compile()


# logits dominate: V = 8192 words for D = 64, one layer; B·T·V fp32 = 4·128·8192·4 B = 16.8 MB
LOGIT_HEAVY = {"V": 8192, "B": 4, "T": 128, "L": 1}


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_chunked_loss_keeps_one_chunks_logits_live():
    logits = 4 * 128 * 8192 * 4
    whole = _compiled(_cfg(1, **LOGIT_HEAVY)).memory_analysis()
    # the whole loss holds the fp32 logits and their gradient at once
    assert whole.temp_size_in_bytes >= 2 * logits
    for chunks in (2, 4, 8):
        m = _compiled(_cfg(chunks, **LOGIT_HEAVY)).memory_analysis()
        # the logits' share of the temporaries over n, plus at most the state's size (the
        # parameters' gradients and updates, which chunking does not touch)
        assert m.temp_size_in_bytes <= whole.temp_size_in_bytes / chunks + m.argument_size_in_bytes
        assert m.argument_size_in_bytes == whole.argument_size_in_bytes


def _dot_flops(cfg) -> float:
    """FLOPs of the step's dots (XLA:CPU fuses the logits' dot with the softmax: the harness
    files that fusion as attention)."""
    module = hlo.parse_module(_compiled(cfg).as_text())
    df = hlo.hlo_costs(module, "h100")
    dots = df[df[schema.CATEGORY].isin(["matmul", "attention"])]
    return float((dots[schema.FLOPS] * dots[schema.COUNT]).sum())


def test_the_chunked_loss_runs_the_same_matmuls_and_recomputes_the_projection_once():
    B, T, D, V = 4, 128, 64, 8192
    extra = _dot_flops(_cfg(4, **LOGIT_HEAVY)) - _dot_flops(_cfg(1, **LOGIT_HEAVY))
    # the backward recomputes each chunk's logits: 2·B·T·D·V more FLOPs over all chunks, and
    # the softmax fused with them a few elementwise FLOPs per logit (B·T·V of them)
    assert 2 * B * T * D * V <= extra <= 2 * B * T * D * V + 8 * B * T * V


@pytest.mark.parametrize("chunks", [0, 3])
def test_a_chunk_count_that_does_not_divide_T_is_refused(chunks):
    with pytest.raises(WorkloadError, match="num_vocab_tiling must be a positive divisor of T=16"):
        _cfg(chunks)


def test_the_memory_model_counts_one_chunks_logits():
    from workloads.llama import memory
    whole, chunked = (memory.train_bytes(_cfg(n, **LOGIT_HEAVY))["logits"] for n in (1, 4))
    assert whole == 2 * 4 * 128 * 8192 * 4
    # one chunk's logits and gradient, the unembedding and its gradient gathered (fp32 here)
    assert chunked == 2 * 4 * 128 * 8192 * 4 / 4 + 2 * 64 * 8192 * 4


def test_a_donated_step_aliases_its_state_and_is_for_compiles_only():
    cfg = _cfg(1, donate_state="true")
    m = _compiled(cfg).memory_analysis()
    # everything but the two [B, T] int32 token arrays is donated and aliased to an output
    assert m.alias_size_in_bytes == m.argument_size_in_bytes - 2 * cfg.B * cfg.T * 4
    assert _compiled(_cfg(1)).memory_analysis().alias_size_in_bytes == 0
    with pytest.raises(WorkloadError, match="donate_state=true is for ahead-of-time compiles"):
        train.build(cfg, None)
