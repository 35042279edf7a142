"""``llama_train``'s loss: mean next-token cross-entropy, whole or over chunks of tokens.

The whole loss projects the final residual stream onto the vocabulary at once: fp32 logits of
B·T tokens x V words (LLaMA-3.1 70B at 5 x 8192 tokens a chip: 5·8192·128256·4 B = 21 GB), as
long as the backward needs them. The chunked loss (``num_vocab_tiling``, MaxText's name for its
"vocabulary tiling", read at AI-Hypercomputer/maxtext ``docs/explanations/tiling.md``) splits
T into n chunks and runs the final norm, the unembedding, the log-softmax and the picked
log-probability one chunk at a time under ``lax.scan``, each chunk's body under
``jax.checkpoint``: the forward keeps only the running sum, the backward recomputes one chunk's
logits at a time, so at most one chunk's [B, T/n, V] fp32 logits are live. The unembedding is
gathered over FSDP once before the loop (and its gradient reduce-scattered once after it), not
in every chunk. Same matmuls as the whole loss (the model's FLOPs do not change); the backward
recomputes the output projection once more (2·B·T·D·V FLOPs, the price of the memory).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from workloads.llama import model
from workloads.llama.config import Dims
from workloads.llama.sharding import Sharder


def picked_logp(params, x_BTD, targets_BT, d: Dims, sh: Sharder):
    """log p(target) per token [B, T] (fp32 log-softmax over the vocab)."""
    logits_BTV = model.logits(params, x_BTD, d, sh).astype(jnp.float32)
    logp_BTV = jax.nn.log_softmax(logits_BTV, axis=-1)
    return jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1)[..., 0]


def cross_entropy(params, x_BTD, targets_BT, d: Dims, sh: Sharder, chunks: int = 1):
    """Mean next-token cross-entropy of the final residual stream ``x_BTD``; ``chunks`` > 1
    computes it over T/chunks tokens of every sequence at a time (module docstring)."""
    if chunks == 1:
        return -jnp.mean(picked_logp(params, x_BTD, targets_BT, d, sh))
    B, T, D = x_BTD.shape
    head = {"final_norm_D": params["final_norm_D"],
            "unembed_DV": sh.act(params["unembed_DV"], "DV")}   # gathered once, not per chunk
    # [B, T, D] -> [chunks, B, T/chunks, D]: the batch stays split as it was
    x_CBtD = jnp.moveaxis(x_BTD.reshape(B, chunks, T // chunks, D), 1, 0)
    t_CBt = jnp.moveaxis(targets_BT.reshape(B, chunks, T // chunks), 1, 0)

    @jax.checkpoint
    def chunk(total, xs):
        x_BtD, t_Bt = xs
        x_BtD = sh.act(x_BtD, "BTD")
        return total + jnp.sum(picked_logp(head, x_BtD, t_Bt, d, sh)), None

    total, _ = jax.lax.scan(chunk, jnp.zeros((), jnp.float32), (x_CBtD, t_CBt))
    return -total / (B * T)
