"""Transformer accounting (transformers.md): parameters, FLOPs, KV cache and activation bytes.

Dense decoder with a gated (SwiGLU) MLP, GQA attention and pre-norm RMSNorm, in the book's
letters: L layers, D d_model, F d_ff, N query heads, K KV heads, H head dim, V vocabulary.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from predictions.costs import positive


@dataclass(frozen=True)
class Config:
    """Model shape in the book's letters (transformers.md)."""

    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    tied_embeddings: bool = False

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "tied_embeddings" and (isinstance(v, bool) or not isinstance(v, int)
                                                or v < 1):
                raise ValueError(f"Config.{f.name} must be a positive integer, got {v!r}")
        if self.N % self.K:
            raise ValueError(f"query heads N={self.N} must be a multiple of KV heads K={self.K}")

    @property
    def G(self) -> int:
        """Query heads per KV head (transformers.md: G = N/K)."""
        return self.N // self.K


# §9 of the reference: 70B and 13B are the book's; 8B and 405B are the public HF configs.
LLAMA3_8B = Config(L=32, D=4096, F=14336, N=32, K=8, H=128, V=128256)
LLAMA3_70B = Config(L=80, D=8192, F=28672, N=64, K=8, H=128, V=128256)
LLAMA3_405B = Config(L=126, D=16384, F=53248, N=128, K=8, H=128, V=128256)
LLAMA2_13B = Config(L=40, D=5120, F=13824, N=40, K=40, H=128, V=32000)

MODELS: dict[str, Config] = {
    "llama3-8b": LLAMA3_8B,
    "llama3-70b": LLAMA3_70B,
    "llama3-405b": LLAMA3_405B,
    "llama2-13b": LLAMA2_13B,
}


def model(name: str | Config) -> Config:
    """A Config passes through; a name is looked up (KeyError lists the known models)."""
    if isinstance(name, Config):
        return name
    try:
        return MODELS[str(name).lower()]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None


def mlp_params(cfg: Config) -> int:
    """Per layer: W_in1, W_in2 [D,F] and W_out [F,D] (transformers.md: 3DF, gated MLP)."""
    return 3 * cfg.D * cfg.F


def attention_params(cfg: Config) -> int:
    """Per layer: W_Q, W_O [D,N,H] and W_K, W_V [D,K,H] (transformers.md: 2D(N+K)H)."""
    return 2 * cfg.D * (cfg.N + cfg.K) * cfg.H


def norm_params(cfg: Config) -> int:
    """Per layer: two RMSNorm scales of width D (pre-attention, pre-MLP). transformers.md adds
    D per norm; LLaMA has two per layer plus a final one (counted in ``param_count``)."""
    return 2 * cfg.D


def layer_params(cfg: Config) -> int:
    return mlp_params(cfg) + attention_params(cfg) + norm_params(cfg)


def embedding_params(cfg: Config) -> int:
    """Input embedding + output projection, 2DV; DV when tied (transformers.md)."""
    return (1 if cfg.tied_embeddings else 2) * cfg.D * cfg.V


def param_count(cfg: Config) -> int:
    """transformers.md: L*(3DF + 2D(N+K)H) + 2DV, plus the RMSNorm weights (2D per layer and a
    final D) so it equals the real parameter count: L*(3DF + 2D(N+K)H + 2D) + D + 2DV."""
    return cfg.L * layer_params(cfg) + cfg.D + embedding_params(cfg)


def param_breakdown(cfg: Config) -> dict[str, int]:
    """applied-training.md's table: MLP, attention, embeddings (and norms)."""
    return {"mlp": cfg.L * mlp_params(cfg), "attention": cfg.L * attention_params(cfg),
            "embeddings": embedding_params(cfg), "norms": cfg.L * norm_params(cfg) + cfg.D,
            "total": param_count(cfg)}


def attention_flops(cfg: Config, tokens: float, seq_len: float, training: bool = False,
                    causal: bool = False) -> float:
    """Dot-product attention (QK^T and .V) over ``tokens`` queries each seeing ``seq_len`` keys.

    transformers.md: 4BTSNH forward per layer, 12BTSNH for training; the book does not halve
    for a causal mask (``causal=True`` does, as a proper attention kernel would).
    """
    positive("tokens", tokens)
    positive("seq_len", seq_len)
    per_layer = 4 * tokens * seq_len * cfg.N * cfg.H  # transformers.md: 4BTSNH forward
    total = per_layer * cfg.L * (3 if training else 1)  # transformers.md: training = 3x forward
    return total / 2 if causal else total


def forward_flops(cfg: Config, tokens: float, seq_len: float | None = None,
                  causal: bool = False) -> float:
    """transformers.md: 2 * params * tokens, plus attention when ``seq_len`` is given."""
    flops = 2 * param_count(cfg) * positive("tokens", tokens)
    if seq_len is not None:
        flops += attention_flops(cfg, tokens, seq_len, training=False, causal=causal)
    return flops


def train_flops(cfg: Config, tokens: float, seq_len: float | None = None,
                causal: bool = False) -> float:
    """transformers.md: 6 * params * tokens (forward + 2x backward), plus 12BTSNH*L attention
    when ``seq_len`` is given. params includes embeddings and norms, as the book's 6P does."""
    flops = 6 * param_count(cfg) * positive("tokens", tokens)
    if seq_len is not None:
        flops += attention_flops(cfg, tokens, seq_len, training=True, causal=causal)
    return flops


def kv_cache_bytes(cfg: Config, tokens: float = 1, bytes_per_elem: float = 2) -> float:
    """transformers.md: 2 (K and V) * L * K * H * bytes per element, per token."""
    positive("bytes_per_elem", bytes_per_elem)
    return 2 * cfg.L * cfg.K * cfg.H * bytes_per_elem * positive("tokens", tokens)


# Widths (elements per token per layer) kept for the backward pass under each remat policy.
CHECKPOINT_POLICIES: dict[str, Callable[[Config], int]] = {
    # transformers.md: keeping everything is ~20 tensors of width ~D per layer
    "none": lambda c: 20 * c.D,
    # transformers.md: block remat keeps only each layer's input
    "block": lambda c: c.D,
    # transformers.md: "only big matmul outputs" - Q, K, V, O projections and the 3 MLP matmuls
    "matmuls": lambda c: c.N * c.H + 2 * c.K * c.H + c.D + 2 * c.F + c.D,
}


def activation_bytes(cfg: Config, tokens: float, policy: str = "block",
                     bytes_per_elem: float = 2) -> float:
    """transformers.md: checkpoint bytes = bytes * tokens * L * sum(widths saved per layer)."""
    if policy not in CHECKPOINT_POLICIES:
        raise ValueError(f"unknown checkpoint policy {policy!r}; "
                         f"choose one of {', '.join(CHECKPOINT_POLICIES)}")
    positive("tokens", tokens)
    return bytes_per_elem * tokens * cfg.L * CHECKPOINT_POLICIES[policy](cfg)


def checkpoint_bytes(cfg: Config, tokens: float, n_ckpt: float = 4,
                     bytes_per_elem: float = 2) -> float:
    """applied-training.md: 2 * D * B * n_ckpt * L for n_ckpt width-D checkpoints per layer
    (newest edition: 4 per layer; Feb 2025 said 3)."""
    positive("n_ckpt", n_ckpt)
    return bytes_per_elem * cfg.D * positive("tokens", tokens) * n_ckpt * cfg.L
