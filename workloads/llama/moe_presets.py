"""Mixture-of-experts presets of ``llama_train``, ``llama_prefill`` and ``llama_decode``
(``workloads.llama.moe``; reference §5.4): tiny ones that run on 8 CPU devices, and published
models for ahead-of-time analysis only (``abstract=True``: lowered, or compiled on a virtual
mesh, never run here). Each published one is the LLaMA-style decoder of this package with the
model's published sizes; ``NOTES`` says what it simplifies.

Sizes (E routed experts of width F, k active, shared experts of width F):

| preset          | L  | D    | F     | N   | K | H   | V      | E   | k | shared |
|-----------------|----|------|-------|-----|---|-----|--------|-----|---|--------|
| mixtral_8x7b    | 32 | 4096 | 14336 | 32  | 8 | 128 | 32000  | 8   | 2 | 0      |
| deepseek_v3     | 61 | 7168 | 2048  | 128 | 8 | 128 | 129280 | 256 | 8 | 1      |
| llama4_maverick | 48 | 5120 | 8192  | 40  | 8 | 128 | 202048 | 128 | 1 | 1      |

(Mixtral's, DeepSeek-V3's and LLaMA-4 Maverick's public Hugging Face configs; DeepSeek-V3's
batch, 15,360 sequences of 4,096 tokens = 62,914,560 tokens, is gpus.md's.)
"""
from __future__ import annotations

from collections.abc import Callable

from workloads.llama.config import Dims

MOE_DIMS: dict[str, Dims] = {
    # 8 experts of width 64, 2 a token: E divides an expert axis of 2, 4 or 8
    "tiny_moe": Dims(F=64, E=8, k=2),
    "mixtral_8x7b": Dims(L=32, D=4096, F=14336, N=32, K=8, H=128, V=32000,
                         rope_theta=1e6, E=8, k=2),
    "deepseek_v3": Dims(L=61, D=7168, F=2048, N=128, K=8, H=128, V=129280,
                        rope_theta=10000.0, E=256, k=8, shared_experts=1),
    "llama4_maverick": Dims(L=48, D=5120, F=8192, N=40, K=8, H=128, V=202048,
                            rope_theta=500000.0, E=128, k=1, shared_experts=1),
}

# what each published preset simplifies (the module docstring's table has its sizes)
NOTES: dict[str, str] = {
    "mixtral_8x7b": "Mixtral 8x7B as published (46.7B total, 12.9B active); its sliding-window "
                    "attention is full causal attention here",
    "deepseek_v3": "DeepSeek-V3's routed sizes (256 experts + 1 shared, k = 8, F = 2048) with "
                   "simplifications: multi-head latent attention (MLA) replaced by GQA with "
                   "K = 8 KV heads of H = 128; its 3 dense leading layers (F = 18432) are MoE "
                   "layers here; its bias-based (auxiliary-loss-free) balancing and sigmoid "
                   "router are a softmax router with the Switch balance loss; no node-limited "
                   "routing (each token's experts on at most 4 nodes); no multi-token "
                   "prediction: ~707B parameters, ~41B active, against the published 671B/37B",
    "llama4_maverick": "LLaMA-4 Maverick's sizes (128 routed experts + 1 shared, k = 1) with "
                       "every layer MoE: Maverick alternates dense (F = 16384) and MoE layers, "
                       "so this holds twice its routed experts (~790B parameters against the "
                       "published 400B) while its active parameters per token match (~17B: "
                       "a dense layer's 3·D·16384 equals the shared and routed experts' "
                       "2·3·D·8192); chunked attention and no-RoPE layers are full RoPE "
                       "attention here",
}

# (dims preset, run fields) per train preset
_TRAIN = {
    "tiny_moe": ("tiny_moe", dict(parallelism="ep")),
    "tiny_moe_capacity": ("tiny_moe", dict(parallelism="ep", experts_impl="capacity",
                                           capacity_factor=1.25)),
    "tiny_moe_tiled": ("tiny_moe", dict(parallelism="ep", experts_impl="tiled")),
    "mixtral_8x7b": ("mixtral_8x7b", dict(B=256, T=4096, remat="full", parallelism="ep+fsdp")),
    "deepseek_v3": ("deepseek_v3", dict(B=15360, T=4096, remat="full", parallelism="ep+fsdp")),
    "llama4_maverick": ("llama4_maverick", dict(B=256, T=4096, remat="full",
                                                parallelism="ep+fsdp")),
}
_SERVE = {
    "tiny_moe": ("tiny_moe", dict(parallelism="ep")),
    "mixtral_8x7b": ("mixtral_8x7b", dict(B=32, T=2048, S=8192, parallelism="ep+tp")),
    "deepseek_v3": ("deepseek_v3", dict(B=32, T=2048, S=8192, parallelism="ep+tp")),
    "llama4_maverick": ("llama4_maverick", dict(B=32, T=2048, S=8192, parallelism="ep+tp")),
}


def _presets(table: dict, make: Callable[..., object]) -> dict:
    return {name: make(MOE_DIMS[dims], **run) for name, (dims, run) in table.items()}


def train(make: Callable[..., object]) -> dict:
    """``llama_train``'s MoE presets; ``make(dims, **run)`` builds one."""
    return _presets(_TRAIN, make)


def serve(make: Callable[..., object]) -> dict:
    """``llama_prefill``/``llama_decode``'s MoE presets; ``make(dims, **run)`` builds one."""
    return _presets(_SERVE, make)


# presets that only lower or compile ahead of time (real sizes)
PUBLISHED = tuple(NOTES)
