"""A MoE model's steps (E > 0; ``workloads.llama.moe``): the train step's loss with the
load-balancing term, and the routing statistics every MoE step returns as one more output.

``llama_train``'s step returns ``(params, opt_state, loss, routing)``, ``llama_prefill`` and
``llama_decode`` ``(logits, cache, routing)``: ``routing`` is ``{"tokens_per_expert_LE":
int32[L, E], "dropped_L": int32[L], "balance_loss_L": f32[L]}``, replicated (``STEP_ROUTING``),
global over the batch: token-choices routed to each expert of each layer (before any drop),
those dropped past capacity, and each layer's balance loss. A dense model's steps keep their
outputs as they were. ``routing_of(out)`` reads it from a step's outputs.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workloads.base import WorkloadError
from workloads.llama import loss, model
from workloads.llama.config import dims_of
from workloads.mesh import named

# a layer's routing key (moe.ROUTING) -> its name stacked over the L layers
STEP_ROUTING = {"tokens_per_expert_E": "tokens_per_expert_LE", "dropped": "dropped_L",
                "balance_loss": "balance_loss_L"}


def check(cfg) -> None:
    """MoE with a pipeline or gradient accumulation is not built (WorkloadError)."""
    if cfg.E and (cfg.stages > 1 or cfg.microbatches > 1):
        raise WorkloadError(f"E={cfg.E} (MoE) runs with stages=1 and microbatches=1, got "
                            f"stages={cfg.stages} microbatches={cfg.microbatches}: a pipelined "
                            f"or accumulated MoE step is not built")


def stacked(routing) -> tuple:
    """The step's routing output: () for a dense model, else the stacked routing renamed."""
    if routing is None:
        return ()
    return ({STEP_ROUTING[k]: v for k, v in routing.items()},)


def out_shardings(cfg, mesh) -> tuple:
    """Shardings of the routing output (replicated): () for a dense model."""
    if not cfg.E:
        return ()
    return ({k: named(mesh, P()) for k in STEP_ROUTING.values()},)


def routing_of(out) -> dict | None:
    """The routing a MoE step returned (its last output), as host arrays; None for a dense
    step's outputs."""
    last = out[-1] if isinstance(out, tuple) else None
    if not isinstance(last, dict) or set(last) != set(STEP_ROUTING.values()):
        return None
    return jax.device_get(last)


def loss_and_routing(params, inputs_BT, targets_BT, cfg, sh):
    """Cross-entropy plus ``balance_loss`` × the layers' mean balance loss, and the routing."""
    d = dims_of(cfg)
    x_BTD, routing = model.routed_decoder(params, inputs_BT, d, sh, jnp.dtype(cfg.param_dtype),
                                          cfg.scan_layers, cfg.remat_policy())
    ce = loss.cross_entropy(params, x_BTD, targets_BT, d, sh, cfg.num_vocab_tiling)
    return ce + cfg.balance_loss * jnp.mean(routing["balance_loss"]), routing


def make_step(cfg, sh, adamw):
    """``(params, opt_state, inputs_BT, targets_BT) -> (params, opt_state, loss, routing)``."""
    grads_of = jax.value_and_grad(loss_and_routing, has_aux=True)

    def train_step(params, opt_state, inputs_BT, targets_BT):
        (value, routing), grads = grads_of(params, inputs_BT, targets_BT, cfg, sh)
        params, opt_state = adamw(params, grads, opt_state, cfg)
        return (params, opt_state, value) + stacked(routing)
    return train_step
