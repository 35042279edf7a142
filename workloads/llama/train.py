"""``llama_train``: one LLaMA-3 training step — forward, backward, AdamW — under DP, FSDP, TP,
FSDP x TP or DP x TP (reference §6.1; specs in ``workloads.llama.sharding``).

``fn(params, opt_state, inputs_BT, targets_BT) -> (params, opt_state, loss)`` (a MoE model,
E > 0: ``(..., loss, routing)``, ``workloads.llama.moe_step``). B counts
sequences of T tokens (the book's B is tokens: B·T here). Params and activations are
``param_dtype`` (bf16 by default), AdamW moments ``opt_dtype`` (fp32): 2 + 4 + 4 = 10 bytes per
parameter as in `training.md` (reference §6.3); no fp32 master copy. (MaxText's default keeps
fp32 weights and casts them to bf16 for the matmuls; the book's 10 bytes/param is kept here,
``--set param_dtype=float32`` gives fp32 weights and fp32 compute.) Matmuls take bf16 operands
and return bf16; GPUs and TPUs accumulate them in fp32 whatever the output type, so no
``preferred_element_type`` (an fp32 output would double the bytes written); attention scores and
softmax are fp32. Optimizer state is sharded like the params (ZeRO-3 under FSDP). Arguments are
not donated, so the harness can call ``fn(*args)`` repeatedly with the same inputs
(``donate_state=true`` donates params and state, as MaxText does, for ahead-of-time compiles).
Layers run under ``lax.scan`` (``scan_layers``) with the ``remat`` policy named
(``workloads.llama.remat``).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from workloads.base import Workload, WorkloadError, check_choice, smaller
from workloads.llama import (
    book,
    fit_more,
    loss,
    memory,
    microbatches,
    model,
    moe_presets,
    moe_step,
    pipeline,
    pipelined,
    remat,
    schedules,
)
from workloads.llama.config import MODEL_DIMS, Dims, dims_of, fix_dtypes
from workloads.llama.sharding import PARALLELISMS, Sharder
from workloads.mesh import AnyMesh, build_args, named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig(Dims):
    """Model dims plus B sequences of T tokens, dtypes, parallelism, remat and AdamW settings."""

    B: int = 8
    T: int = 16
    param_dtype: str = "bfloat16"
    opt_dtype: str = "float32"
    parallelism: str = "fsdp_tp"
    remat: str = "none"
    remat_save: str = ""       # remat=custom: checkpoint names kept in HBM, comma-separated
    remat_offload: str = ""    # remat=custom: checkpoint names moved to host memory
    scan_layers: bool = True
    num_vocab_tiling: int = 1  # the loss over this many chunks of T (MaxText's knob; 1 = whole)
    # donate params and AdamW state to the step (outputs aliased to inputs, as MaxText's
    # train step does): ahead-of-time compiles only, a donated step consumes its inputs
    donate_state: bool = False
    lr: float = 1e-3
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    seed: int = 0
    # pipeline parallelism (parallelism=pp, pp+dp, pp+fsdp, ...; workloads.llama.pipeline): S
    # stages over the mesh's stage axis, M microbatches (without a stage axis: gradient
    # accumulation over M microbatches), the schedule, its layer repeats (circular only)
    stages: int = 1
    microbatches: int = 1
    schedule: str = "gpipe"
    repeats: int = 1
    # ZeRO-1: the AdamW moments also split over the axes that split the batch (the weights
    # stay whole per stage, as Meta's 405B and DeepSeek-V3 ran)
    zero1: bool = False
    # stages x repeats need not divide L: the stack padded with identity layers at the first
    # and last stages (Meta's 405B: 126 layers on 16 stages; workloads.llama.pipeline)
    pad_layers: bool = False

    def __post_init__(self):
        self.check_dims()
        fix_dtypes(self, "param_dtype", "opt_dtype")
        check_choice("parallelism", self.parallelism, PARALLELISMS)
        self.remat_policy()   # WorkloadError naming the valid policies or names
        schedules.check_config(self)
        moe_step.check(self)
        if self.num_vocab_tiling < 1 or self.T % self.num_vocab_tiling:
            raise WorkloadError(f"num_vocab_tiling must be a positive divisor of T={self.T} "
                                f"(the loss runs over T/num_vocab_tiling tokens at a time), "
                                f"got {self.num_vocab_tiling}")

    def remat_policy(self) -> remat.Remat:
        return remat.policy(self.remat, self.remat_save, self.remat_offload)


def _preset(name: str, **run) -> TrainConfig:
    return TrainConfig(**{**vars(MODEL_DIMS[name]), **run})


PRESETS: dict[str, TrainConfig] = {
    "tiny": _preset("tiny"),
    # tiny, pipelined on 8 devices: 4 stages x 2 data-parallel replicas, 8 microbatches of 2
    # sequences; L = 8 so a circular schedule can repeat twice (--set schedule=circular
    # --set repeats=2)
    "tiny_pp": _preset("tiny", L=8, B=16, parallelism="pp", stages=4, microbatches=8),
    # a GPU/TPU preset: on 8 CPU devices XLA needs 15.6 GB of host RAM (6.2 with remat=full)
    "100m": _preset("100m", B=16, T=512),
    # the largest that fits one 80 GB GPU: ~12 bytes/param of state, matmul outputs saved
    "1b": _preset("1b", B=4, T=4096, remat="dots"),
    # real sizes: 1M-token batches of 4k sequences, block remat (reference §5.2)
    "8b": _preset("8b", B=256, T=4096, remat="full"),
    "70b": _preset("70b", B=256, T=4096, remat="full"),
    "405b": _preset("405b", B=256, T=4096, remat="full"),
    # LLaMA-3.1 405B as Meta trained it (Llama 3 paper; gpus.md "What does LLaMA-3 do?"): 16M
    # tokens a step (2048 x 8192), 8-way TP in a node x 16-way PP x 128-way ZeRO-1 DP on 16,384
    # H100s, 126 layers on 16 stages (one fewer on the first and last: pad_layers), 16
    # microbatches of one sequence a replica, layers interleaved twice over the stages (Meta's
    # interleaved 1F1B runs here as the circular schedule: 1f1b beside TP and DP aborts XLA's
    # partitioner, pipeline._check_1f1b). For ahead-of-time compiles (predict-hlo, plan) on
    # --mesh stage=16,data=X,model=8 at a reduced X with B = 16·X, scaled to 128.
    "405b_meta": _preset("405b", B=2048, T=8192, remat="full", parallelism="pp+dp_tp",
                         stages=16, microbatches=16, schedule="circular", repeats=2,
                         pad_layers=True, zero1=True),
    # mixture of experts (workloads.llama.moe_presets): tiny_moe* on 8 CPU devices; Mixtral
    # 8x7B, DeepSeek-V3, LLaMA-4 Maverick as published, for ahead-of-time analysis
    **moe_presets.train(lambda dims, **run: TrainConfig(**{**vars(dims), **run})),
}


def loss_fn(params, inputs_BT, targets_BT, cfg: TrainConfig, sh: Sharder):
    """Mean next-token cross-entropy (fp32 log-softmax over the vocab), over
    ``num_vocab_tiling`` chunks of tokens (``workloads.llama.loss``)."""
    d = dims_of(cfg)
    x_BTD = model.decoder(params, inputs_BT, d, sh, jnp.dtype(cfg.param_dtype),
                          cfg.scan_layers, cfg.remat_policy())
    return loss.cross_entropy(params, x_BTD, targets_BT, d, sh, cfg.num_vocab_tiling)


def init_opt_state(params, cfg: TrainConfig) -> dict:
    """Zero AdamW moments in ``opt_dtype`` (host arrays)."""
    zeros = lambda p: np.zeros(p.shape, jnp.dtype(cfg.opt_dtype))  # noqa: E731
    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "step": np.zeros((), np.int32)}


def adamw(params, grads, opt, cfg: TrainConfig):
    """AdamW (decoupled weight decay, none on norm weights), moments in ``opt_dtype``."""
    step = opt["step"] + 1
    t = step.astype(jnp.float32)
    c1, c2 = 1 - cfg.b1 ** t, 1 - cfg.b2 ** t
    odt = jnp.dtype(cfg.opt_dtype)

    def update(path, p, g, mu, nu):
        g = g.astype(odt)
        mu = cfg.b1 * mu + (1 - cfg.b1) * g
        nu = cfg.b2 * nu + (1 - cfg.b2) * g * g
        p32 = p.astype(jnp.float32)
        decay = 0.0 if path[-1].key in model.NORM_KEYS else cfg.weight_decay
        u = (mu / c1) / (jnp.sqrt(nu / c2) + cfg.eps) + decay * p32
        return (p32 - cfg.lr * u).astype(p.dtype), mu, nu

    out = jax.tree_util.tree_map_with_path(update, params, grads, opt["mu"], opt["nu"])
    is_triple = lambda x: isinstance(x, tuple)  # noqa: E731
    pick = lambda i: jax.tree.map(lambda o: o[i], out, is_leaf=is_triple)  # noqa: E731
    return pick(0), {"mu": pick(1), "nu": pick(2), "step": step}


def make_step(cfg: TrainConfig, sh: Sharder, stage: tuple[str, ...] = ()):
    """The train step; pipelined over the ``stage`` mesh axes when given
    (``workloads.llama.pipeline``), else over ``microbatches`` accumulated when > 1."""
    if stage:
        return pipelined.make_step(cfg, sh, dims_of(cfg), stage, adamw)
    if cfg.E:   # MoE: the balance loss, and the routing as a fourth output (moe_step)
        return moe_step.make_step(cfg, sh, adamw)
    grads_of = jax.value_and_grad(loss_fn)
    if cfg.microbatches > 1:
        grads_of = microbatches.accumulate(grads_of, cfg.microbatches)

    def train_step(params, opt_state, inputs_BT, targets_BT):
        loss, grads = grads_of(params, inputs_BT, targets_BT, cfg, sh)
        params, opt_state = adamw(params, grads, opt_state, cfg)
        return params, opt_state, loss
    return train_step


def batch(cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random batch: inputs [B, T] and their next tokens [B, T]."""
    rng = np.random.default_rng(cfg.seed)
    seq = rng.integers(0, cfg.V, size=(cfg.B, cfg.T + 1), dtype=np.int32)
    return seq[:, :-1], seq[:, 1:]


def build(cfg: TrainConfig, mesh: AnyMesh | None, abstract: bool = False):
    """``(train_step, (params, opt_state, inputs_BT, targets_BT))``; ``mesh=None`` is unsharded."""
    d = dims_of(cfg)
    sh = Sharder(mesh, cfg.parallelism, d)
    stage = pipeline.check_mesh(cfg, mesh)
    stacked = dataclasses.replace(d, L=pipeline.stack_rows(cfg)) if stage else d
    p_abs = model.abstract_params(stacked, cfg.param_dtype)
    moment = lambda p: jax.ShapeDtypeStruct(p.shape, jnp.dtype(cfg.opt_dtype))  # noqa: E731
    o_abs = {"mu": jax.tree.map(moment, p_abs), "nu": jax.tree.map(moment, p_abs),
             "step": jax.ShapeDtypeStruct((), jnp.int32)}
    step = make_step(cfg, sh, stage)
    if cfg.donate_state and not abstract:
        raise WorkloadError("donate_state=true is for ahead-of-time compiles (predict-hlo): a "
                            "donated step consumes its inputs, and a run calls it repeatedly "
                            "on the same ones; leave it false to run the step")
    donate = (0, 1) if cfg.donate_state else ()
    if mesh is None:
        shardings = None
        fn = jax.jit(step, donate_argnums=donate)
    else:
        sh.check_params(p_abs)
        sh.check_act("BTD", (cfg.B // cfg.microbatches, cfg.T, cfg.D))
        p_specs = pipeline.stage_param_specs(sh, p_abs, stage) if stage else \
            sh.param_specs(p_abs)
        o_specs = microbatches.zero1_specs(p_specs, p_abs, sh) if cfg.zero1 else p_specs
        p_sh, m_sh = (jax.tree.map(lambda s: named(mesh, s), t, is_leaf=lambda x: isinstance(x, P))
                      for t in (p_specs, o_specs))
        o_sh = {"mu": m_sh, "nu": m_sh, "step": named(mesh, P())}
        tok = sh.sharding("BT")
        shardings = (p_sh, o_sh, tok, tok)
        outs = (p_sh, o_sh, named(mesh, P())) + moe_step.out_shardings(cfg, mesh)
        fn = jax.jit(step, in_shardings=shardings, out_shardings=outs, donate_argnums=donate)

    def host():
        params = model.init_params(stacked, cfg.seed, cfg.param_dtype)
        return params, init_opt_state(params, cfg), *batch(cfg)

    tok_abs = jax.ShapeDtypeStruct((cfg.B, cfg.T), jnp.int32)
    args = build_args(abstract, (p_abs, o_abs, tok_abs, tok_abs), shardings, host)
    log.debug("llama_train %s on %s", cfg.parallelism, None if mesh is None else mesh.shape)
    return fn, args


WORKLOAD = Workload(
    name="llama_train",
    Config=TrainConfig,
    build=build,
    presets=PRESETS,
    description="LLaMA-3 training step (forward, backward, AdamW) under dp/fsdp/tp/fsdp_tp/dp_tp, "
                "pipelined (pp, pp+...: gpipe, 1f1b, circular) and MoE over an expert axis (ep, "
                "dp_ep, ep+...)",
    memory=memory.train_bytes,
    book=book.train,
    # training.md: remat trades FLOPs for activation memory
    memory_knobs={**smaller("B", "T"), "remat": "--set remat=full"},
    remat_order=tuple(remat.POLICIES),   # MaxText's order: least recomputation first
    fit_trials=fit_more.trials,
)
