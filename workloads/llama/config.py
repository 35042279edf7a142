"""LLaMA-3 dimensions (book letters, reference §1.2 and §9) and the real and scaled-down sizes.

``Dims`` holds the architecture; each workload's config (train / prefill / decode) extends it with
run fields, so ``--set D=128`` and ``--set parallelism=fsdp_tp`` go through one flat namespace.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from predictions import dtypes, transformer
from workloads.base import WORKLOAD_DTYPES, WorkloadError, canonical_dtype

ATTENTIONS = ("fused", "naive")
# How a MoE layer runs its experts (workloads.llama.moe): token dropping into [E, C, D] capacity
# buffers; dropless grouped matmuls by jax.lax.ragged_dot (MaxText's megablox path); dropless by
# a loop over tiles of each expert's tokens, its trip count following the routing.
EXPERTS_IMPLS = ("capacity", "ragged", "tiled")


@dataclass(frozen=True)
class Dims:
    """L layers, D d_model, F MLP width, N query heads, K KV heads, H head dim, V vocab."""

    L: int = 2
    D: int = 64
    F: int = 128
    N: int = 8
    K: int = 4
    H: int = 8
    V: int = 256
    rope_theta: float = 500000.0  # LLaMA-3's RoPE base
    norm_eps: float = 1e-5
    # How attention is computed (not architecture; kept here so every workload has it):
    # "fused" = the backend's fused attention where it applies (Pallas splash attention on TPU,
    # cuDNN flash attention on GPU), else jax.nn.dot_product_attention's XLA implementation;
    # "naive" = the hand-written einsum/softmax path (attention.ATTENTION).
    attention: str = "fused"
    # Splash attention's block and backward kernel on TPU (workloads.llama.splash.Blocks):
    # MaxText's defaults; its tuned v6e recipes use 2048 and the fused backward kernel.
    splash_block: int = 512
    splash_fused_bwd: bool = False
    # Mixture of experts (transformers.md "Sparsity and Mixture-of-Experts", reference §5.4):
    # E routed experts of width F per layer (0: a dense MLP), k of them active per token, plus
    # shared_experts (0 or 1) always on; experts_impl (EXPERTS_IMPLS) and, for "capacity", the
    # capacity factor (C = ceil(factor·tokens·k/E) per expert and group; 0 = dropless);
    # balance_loss weighs the load-balancing loss; router_bias is added to expert 0's router
    # logit (a router biased to one expert); expert_tile: tokens per tile of "tiled".
    E: int = 0
    k: int = 1
    shared_experts: int = 0
    capacity_factor: float = 0.0
    balance_loss: float = 0.01
    router_bias: float = 0.0
    experts_impl: str = "ragged"
    expert_tile: int = 8

    def check_dims(self) -> None:
        if self.attention not in ATTENTIONS:
            raise WorkloadError(f"unknown attention {self.attention!r}; valid: "
                                f"{', '.join(ATTENTIONS)}")
        if self.splash_block < 128 or self.splash_block % 128:
            raise WorkloadError(f"splash_block must be a positive multiple of 128 (the TPU's "
                                f"lanes), got {self.splash_block}")
        for name in ("L", "D", "F", "N", "K", "H", "V"):
            if getattr(self, name) < 1:
                raise WorkloadError(f"{name} must be positive, got {getattr(self, name)}")
        if self.N % self.K:
            raise WorkloadError(f"grouped-query attention needs K | N; got N={self.N}, K={self.K}")
        if self.H % 2:
            raise WorkloadError(f"RoPE rotates pairs, so H must be even; got H={self.H}")
        if self.E:
            self.check_experts()

    def check_experts(self) -> None:
        """A MoE config's routing fields (WorkloadError naming the valid choices)."""
        if self.E < 0 or not 1 <= self.k <= self.E:
            raise WorkloadError(f"k={self.k} experts per token with E={self.E} experts; valid: "
                                f"E >= 1 and 1 <= k <= E (E=0: a dense MLP)")
        if self.experts_impl not in EXPERTS_IMPLS:
            raise WorkloadError(f"unknown experts_impl {self.experts_impl!r}; valid: "
                                f"{', '.join(EXPERTS_IMPLS)}")
        if self.shared_experts not in (0, 1):
            raise WorkloadError(f"shared_experts must be 0 or 1, got {self.shared_experts}")
        dropping = self.experts_impl == "capacity"
        if self.capacity_factor < 0 or dropping != (self.capacity_factor > 0):
            raise WorkloadError(f"capacity_factor={self.capacity_factor} with experts_impl="
                                f"{self.experts_impl}: valid: > 0 with capacity, 0 (dropless) "
                                f"with ragged or tiled")
        if self.expert_tile < 1:
            raise WorkloadError(f"expert_tile must be positive, got {self.expert_tile}")

    @property
    def G(self) -> int:
        """Query heads per KV head (book: G = N/K)."""
        return self.N // self.K


def book_model(cfg: Dims) -> transformer.Config:
    """The architecture as the book's model shape (``predictions.transformer.Config``); a MoE
    model as its active part, an MLP of width (k + shared)·F (reference §5.4: FLOPs follow the
    active parameters; the total, for bytes, is ``workloads.llama.book.moe_params``)."""
    F = cfg.F * (cfg.k + cfg.shared_experts) if getattr(cfg, "E", 0) else cfg.F
    return transformer.Config(L=cfg.L, D=cfg.D, F=F, N=cfg.N, K=cfg.K, H=cfg.H, V=cfg.V)


def dims_of(cfg: Dims) -> Dims:
    """The architecture part of a workload config."""
    return Dims(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(Dims)})


# Real configs: 70B from the book (applied-training.md); 8B and 405B are the public HF configs
# (reference §9: "not from the book").
MODEL_DIMS: dict[str, Dims] = {
    "tiny": Dims(),
    # LLaMA-3.2 1B's public HF config, but with an untied unembedding (1.5B parameters here)
    "1b": Dims(L=16, D=2048, F=8192, N=32, K=8, H=64, V=128256),
    # ~102M parameters: L(3DF + 2D(N+K)H + 2D) + D + 2DV = 51.9M + 50.3M
    "100m": Dims(L=8, D=768, F=2048, N=16, K=8, H=48, V=32768),
    "8b": Dims(L=32, D=4096, F=14336, N=32, K=8, H=128, V=128256),
    "70b": Dims(L=80, D=8192, F=28672, N=64, K=8, H=128, V=128256),
    "405b": Dims(L=126, D=16384, F=53248, N=128, K=8, H=128, V=128256),
}


FLOAT_DTYPES = tuple(n for n in WORKLOAD_DTYPES if dtypes.lookup(n).kind == "float")


def fix_dtypes(cfg, *names: str) -> None:
    """Canonicalise float dtype fields of a frozen config in ``__post_init__``."""
    for name in names:
        value = canonical_dtype(getattr(cfg, name), name)
        if value not in FLOAT_DTYPES:
            raise WorkloadError(f"{name} must be a float type, got {value!r}; valid: "
                                f"{', '.join(FLOAT_DTYPES)} (for int8 set int8_weights, int8_kv)")
        object.__setattr__(cfg, name, value)
