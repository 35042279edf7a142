"""The pipelined train step (``parallelism=pp``, composed or not): its loss and gradients by the
schedule that runs (GPipe and circular: autodiff of the stage loop, ``pipeline``; 1F1B: its own
per-microbatch forward and backward, ``one_f_one_b``), then the optimizer.
"""
from __future__ import annotations

import jax

from workloads.llama import one_f_one_b, pipeline, schedules
from workloads.llama.sharding import Sharder


def _autodiff(cfg, sh: Sharder, d, stage: tuple[str, ...]):
    grad = jax.value_and_grad(pipeline.loss_fn)
    return lambda params, inputs_BT, targets_BT: grad(params, inputs_BT, targets_BT, cfg, sh,
                                                      d, stage)


# a schedule's ``autodiff`` -> how its gradients are made
GRADIENTS = {True: _autodiff, False: one_f_one_b.value_and_grads}


def value_and_grads(cfg, sh: Sharder, d, stage: tuple[str, ...]):
    """``f(params, inputs_BT, targets_BT) -> (loss, grads)`` pipelined: autodiff of the loop
    (GPipe, circular) or 1F1B's explicit backward."""
    return GRADIENTS[schedules.SCHEDULES[cfg.schedule].autodiff](cfg, sh, d, stage)


def make_step(cfg, sh: Sharder, d, stage: tuple[str, ...], adamw):
    """The pipelined train step: its loss and gradients, then ``adamw``."""
    grads_of = value_and_grads(cfg, sh, d, stage)

    def train_step(params, opt_state, inputs_BT, targets_BT):
        value, grads = grads_of(params, inputs_BT, targets_BT)
        params, opt_state = adamw(params, grads, opt_state, cfg)
        return params, opt_state, value
    return train_step
