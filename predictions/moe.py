"""Mixture of experts (transformers.md "Sparsity and Mixture-of-Experts", reference §5.4; gpus.md
"Expert parallelism", reference §6.2; inference.md, reference §7.2): total and active
parameters, FLOPs, the compute-bound batch with E/k, memory per device with the experts sharded,
the expert all-to-alls (dispatch and combine) and the expert-parallel thresholds. Stdlib only.

A decoder whose MLP is routed, in the book's letters: L layers (``dense_layers`` of them keep a
dense MLP of width ``F_dense``), E experts of width F per MoE layer, k active per token,
``shared`` always-active experts of width F, GQA attention (N, K, H) unless the model gives its
own per-layer attention parameters (DeepSeek's MLA), V vocabulary. Mesh roles: ``expert`` (Z,
splits the experts; its ranks hold distinct tokens), ``data``, ``fsdp``, ``model``, ``stage``
(``predictions.layouts.ROLES``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from predictions import (
    collectives,
    hardware,
    inference,
    levels,
    network,
    thresholds,
    topology,
    training,
)
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.network import System

_COUNTS = ("L", "D", "F", "N", "K", "H", "V", "E", "k")


@dataclass(frozen=True)
class MoEConfig:
    """An MoE decoder's shape (transformers.md letters); ``attention_params`` (per layer) and
    ``kv_width`` (cached elements per token per layer) override GQA's 2D(N+K)H and 2KH."""

    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    E: int
    k: int
    shared: int = 0
    dense_layers: int = 0
    F_dense: int = 0
    attention_params: int = 0
    kv_width: int = 0
    tied_embeddings: bool = False
    source: str = ""
    simplifies: str = ""

    def __post_init__(self):
        for f in (f for f in fields(self) if f.type == "int"):
            v, low = getattr(self, f.name), 1 if f.name in _COUNTS else 0
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"MoEConfig.{f.name} must be a whole number >= {low}, got {v!r}")
        if self.k > self.E:
            raise ValueError(f"k={self.k} experts per token exceeds E={self.E} experts")
        if self.dense_layers >= self.L:
            raise ValueError(f"dense_layers={self.dense_layers} leaves no MoE layer of L={self.L}")

    L_moe = property(lambda self: self.L - self.dense_layers)  # layers with routed experts


def mla_params(D: int, N: int, q_rank: int, kv_rank: int, nope: int, rope: int, v: int) -> int:
    """DeepSeek-V2/V3 multi-head latent attention per layer (arXiv 2412.19437 §2.1.1): W_DQ, the
    q norm, W_UQ (+ rope), W_DKV + W_KR, the kv norm, W_UK and W_UV, W_O."""
    return (D * q_rank + q_rank + q_rank * N * (nope + rope) + D * (kv_rank + rope) + kv_rank
            + kv_rank * N * (nope + v) + N * v * D)


# Published shapes (HF config.json of each release; the totals the authors quote beside them).
MODELS: dict[str, MoEConfig] = {
    # mistralai/Mixtral-8x7B-v0.1 config.json: 46.7B total, 12.9B active (Mistral's blog)
    "mixtral_8x7b": MoEConfig(L=32, D=4096, F=14336, N=32, K=8, H=128, V=32000, E=8, k=2,
                              source="mistralai/Mixtral-8x7B-v0.1 config.json; 46.7B / 12.9B",
                              simplifies="sliding window unused (32k window = context)"),
    # deepseek-ai/DeepSeek-V3 config.json and arXiv 2412.19437: 671B total, 37B active
    "deepseek_v3": MoEConfig(
        L=61, D=7168, F=2048, N=128, K=128, H=128, V=129280, E=256, k=8, shared=1,
        dense_layers=3, F_dense=18432,
        attention_params=mla_params(7168, 128, 1536, 512, 128, 64, 128) + 2 * 7168,
        kv_width=512 + 64,
        source="deepseek-ai/DeepSeek-V3 config.json, arXiv 2412.19437: 671B / 37B",
        simplifies="MLA priced by its parameter count (its KV: 576 elements per token per "
                   "layer); bias-based balancing and node-limited routing (4 nodes) not "
                   "modelled; the 14B multi-token-prediction module left out"),
    # meta-llama/Llama-4-Maverick-17B-128E config.json (text_config): 400B total, 17B active
    "llama4_maverick": MoEConfig(
        L=48, D=5120, F=8192, N=40, K=8, H=128, V=202048, E=128, k=1, shared=1,
        dense_layers=24, F_dense=16384,
        source="meta-llama/Llama-4-Maverick-17B-128E config.json: 400B / 17B",
        simplifies="dense and MoE layers alternate (interleave_moe_layer_step 2): counted as "
                   "24 of each; the vision encoder and chunked attention left out"),
}


def model(name: str | MoEConfig) -> MoEConfig:
    """A config passes through; a name ('deepseek_v3', 'deepseek-v3') is looked up."""
    if isinstance(name, MoEConfig):
        return name
    try:
        return MODELS[str(name).lower().replace("-", "_")]
    except KeyError:
        raise KeyError(f"unknown MoE model {name!r}; known: {', '.join(MODELS)}") from None


@dataclass(frozen=True)
class Params:
    """Parameter counts by part; ``active`` is what one token's forward pass touches."""

    routed: int
    routed_active: int
    shared: int
    router: int
    dense_mlp: int
    attention: int
    embeddings: int
    norms: int

    @property
    def total(self) -> int:
        return (self.routed + self.shared + self.router + self.dense_mlp + self.attention
                + self.embeddings + self.norms)

    active = property(lambda self: self.total - self.routed + self.routed_active)


def params(cfg: MoEConfig) -> Params:
    """transformers.md (§5.4): E*3DF per MoE layer in all, k*3DF active; shared experts, the
    router (D*E) and everything outside the MLP are active for every token."""
    mlp = 3 * cfg.D * cfg.F  # transformers.md: a gated MLP holds 3DF
    attn = cfg.attention_params or 2 * cfg.D * (cfg.N + cfg.K) * cfg.H  # transformers.md
    return Params(
        routed=cfg.L_moe * cfg.E * mlp, routed_active=cfg.L_moe * cfg.k * mlp,
        shared=cfg.L_moe * cfg.shared * mlp, router=cfg.L_moe * cfg.D * cfg.E,
        dense_mlp=cfg.dense_layers * 3 * cfg.D * (cfg.F_dense or cfg.F),
        attention=cfg.L * attn,
        embeddings=(1 if cfg.tied_embeddings else 2) * cfg.D * cfg.V,
        norms=cfg.L * 2 * cfg.D + cfg.D)  # two RMSNorms per layer and a final one


def forward_flops(cfg: MoEConfig, tokens: float) -> float:
    """transformers.md (§5.4): 2 * P_active per token forward (attention's T-term left out)."""
    return 2 * params(cfg).active * positive("tokens", tokens)


def train_flops(cfg: MoEConfig, tokens: float) -> float:
    """training.md (§6.4): 6 * P_active * tokens."""
    return 6 * params(cfg).active * positive("tokens", tokens)


def routed_flops(cfg: MoEConfig, tokens: float, training: bool = False) -> float:
    """The routed experts' matmuls: 2 * tokens * k * 3DF per MoE layer forward (§5.4), a
    training step 3x that (§1.1)."""
    fwd = 2 * positive("tokens", tokens) * cfg.k * 3 * cfg.D * cfg.F * cfg.L_moe
    return 3 * fwd if training else fwd


def critical_batch(cfg: MoEConfig, chip: Chip | str, weight_bytes: float = 2,
                   dtype: str = "bf16") -> float:
    """inference.md (§5.4, §7.2): B_crit(MoE) = B_crit(dense) * E/k, B_crit(dense) =
    C * s_w / (2 W_hbm): each expert loads E*D*F weights for 2*k*B*D*F FLOPs."""
    return inference.critical_batch(chip, weight_bytes, dtype) * cfg.E / cfg.k


# --- memory per device ------------------------------------------------------------------------
def shards(mesh: Mapping[str, int]) -> tuple[float, int]:
    """(devices one expert's weights are split over, devices the rest are split over): experts
    over expert x fsdp x model x stage, the rest over fsdp x model x stage (§6.3: divide by the
    weight-sharding degree; data replicas keep a whole copy)."""
    rest = math.prod(int(mesh.get(r, 1)) for r in ("fsdp", "model", "stage"))
    return int(mesh.get("expert", 1)) * rest, rest


def _routed_share(cfg: MoEConfig, Z: int) -> float:
    """Share of the routed experts an expert rank holds: ceil(E/Z) whole ones, 1/Z past E."""
    return math.ceil(cfg.E / Z) / cfg.E if Z <= cfg.E else 1 / Z


def weight_bytes_per_device(cfg: MoEConfig, mesh: Mapping[str, int],
                            bytes_per_param: float = 2) -> tuple[float, float]:
    """(routed-expert bytes, other bytes) per device: ``bytes_per_param`` 10 for Adam training
    (§6.3: bf16 weights + fp32 moments), 2 (bf16) or 1 (int8) for serving."""
    p, (_, rest) = params(cfg), shards(mesh)
    routed = p.routed * _routed_share(cfg, int(mesh.get("expert", 1))) / rest
    return bytes_per_param * routed, bytes_per_param * (p.total - p.routed) / rest


def kv_bytes_per_token(cfg: MoEConfig, kv_bytes: float = 2) -> float:
    """transformers.md (§5.3): L * 2KH * bytes per element, unchanged by MoE (§5.4); MLA caches
    its latent (``kv_width`` elements per layer) instead."""
    return cfg.L * (cfg.kv_width or 2 * cfg.K * cfg.H) * positive("kv_bytes", kv_bytes)


# --- the expert all-to-alls -------------------------------------------------------------------
def dispatch_bytes(tokens: float, k: int, D: int, bytes_per_elem: float = 2,
                   capacity: float | None = None) -> float:
    """V of one dispatch (and of one combine): tokens * k * D * bytes, every routed copy of a
    token (ragged: only the tokens sent); padded to a capacity factor c, each of the E experts
    receives c * tokens * k / E slots whether filled or not: c * tokens * k * D * bytes."""
    V = positive("tokens", tokens) * k * D * positive("bytes_per_elem", bytes_per_elem)
    return V * positive("capacity", capacity) if capacity is not None else V


@dataclass(frozen=True)
class AllToAll:
    """One dispatch (or combine) of ``nbytes`` over an expert group: its time, the time at each
    network level it crosses, and an AllGather of the same bytes over the same group."""

    nbytes: float
    seconds: float
    levels: tuple[tuple[str, float], ...]
    all_gather_s: float
    formula: str


def expert_groups(mesh: Mapping[str, int]) -> tuple[tuple[int, ...], ...]:
    """Device ids of each expert group of a row-major mesh (the last axis fills a node)."""
    names = list(mesh)
    if "expert" not in names:
        return tuple((d,) for d in range(math.prod(mesh.values())))
    return levels.mesh_groups(tuple(int(v) for v in mesh.values()), (names.index("expert"),))


def all_to_all(nbytes: float, chip: Chip | str, Z: int, system: System | None = None,
               groups: Sequence[Sequence[int]] | None = None) -> AllToAll:
    """A dispatch over Z devices: on ``system`` priced at the levels its groups cross
    (``predictions.levels``: in a node V(N-1)/(N^2 W_gpu), across M nodes V(M-1)/(M^2 W_node),
    gpus.md); without one, in one node or slice (sharding.md on a TPU torus: V*max(n)/(4*N*W),
    about 1/4 of an AllGather of the same bytes on a ring, §5.4)."""
    groups = groups or (tuple(range(positive("Z", Z))),)
    if system is None:
        c = hardware.chip_entry(chip)
        axes = topology.physical_axes(c, (Z,)) if c.kind == "tpu" else (Z,)
        t = collectives.estimate("all-to-all", nbytes, axes, c)
        ag = collectives.estimate("all-gather", nbytes, axes, c).seconds
        return AllToAll(nbytes, t.seconds, (("node" if c.kind == "gpu" else "ici", t.seconds),),
                        ag, t.formula)
    t = levels.price("all-to-all", nbytes, groups, system)
    ag = levels.price("all-gather", nbytes, groups, system).seconds
    return AllToAll(nbytes, t.seconds, tuple((c.level, c.t_s) for c in t.crossings), ag,
                    t.formula)


# --- expert parallelism on GPUs (gpus.md "Expert parallelism", §6.2) ----------------------------
def ep_math_s(B: float, k: int, D: int, F: int, Z: int, C: float) -> float:
    """gpus.md (§6.2): T_math = 4*B*k*D*F/(Z*C) per MoE layer (W_in and W_out, B tokens)."""
    return 4 * positive("B", B) * k * D * F / (positive("Z", Z) * positive("C", C))


def ep_comms_s(B: float, k: int, D: int, Z: int, W_node: float, node: int = 8) -> float:
    """gpus.md (§6.2): T_comms = 4*B*D*(Z - 8)/(W*Z) * min(8k/Z, 1): the two all-to-alls' bytes
    leaving each node (8 GPUs, ``node``), a token sent once per node it reaches; 0 in a node."""
    Z = positive("Z", Z)
    if Z <= node:
        return 0.0
    return 4 * positive("B", B) * D * (Z - node) / (positive("W_node", W_node) * Z) * min(
        node * k / Z, 1)


def ep_max_Z(F: float, k: int, C: float, W_node: float, node: int = 8) -> float:
    """The largest Z with T_math > T_comms (gpus.md, §6.2): for Z <= 8k, Z < 8 + k*F*W/C; past
    it, F > 8*C/W * (Z - 8)/Z, so while F >= 8*C/W EP can span any number of nodes (inf)."""
    z1 = node + k * F * W_node / C
    if z1 <= node * k:
        return z1
    r = F * W_node / (node * C)
    return math.inf if r >= 1 else node / (1 - r)


def ep_spans_nodes(F: float, C: float, W_node: float, node: int = 8) -> bool:
    """gpus.md (§6.2): if F < 8*C/W_node, EP stays within 1-2 nodes; else it can span up to E."""
    return F >= node * C / W_node


def dp_min_tokens(cfg: MoEConfig, chip: Chip | str, X: int = 1, inner: int = 1,
                  system: System | None = None, dtype: str = "bf16") -> float:
    """Tokens per data-parallel rank, B/X, for DP/ZeRO with MoE to stay compute-bound: gpus.md
    (§6.2) B/X > (E/k) * C/W at the level the group crosses (``predictions.thresholds``); on a
    TPU slice training.md's alpha/M_X times the same E/k."""
    c = hardware.chip_entry(chip)
    if c.kind == "gpu":
        s = system or network.default_system(c)
        if s is None:  # one node (gpus.md: B/X > (E/k) C/W_gpu)
            return cfg.E / cfg.k * c.flops_per_s(dtype) / c.ici_bytes_per_s
        return thresholds.dp_min_tokens(s, X, inner, dtype, cfg.E, cfg.k, "fsdp")[0]
    return training.min_batch_per_chip(c, "fsdp", dtype=dtype) * cfg.E / cfg.k
