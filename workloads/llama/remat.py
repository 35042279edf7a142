"""Rematerialisation policies for the layer body, by name, as MaxText offers them.

The layer marks its big activations with ``jax.ad_checkpoint.checkpoint_name`` under MaxText's
names (``NAMES``); a policy says which of them the backward pass keeps in HBM, which it moves
to host memory (``pinned_host``) and back, and which it recomputes from the layer input (which
the layer scan keeps whatever the policy). `transformers.md` (reference §5.2): keeping every
intermediate costs ~20 width-D tensors per layer and token, block remat keeps only the layer
input and trades that for one more forward pass (8·P·tokens instead of 6·P·tokens); in between,
checkpoint bytes = bytes · tokens · L · Σ(widths of the saved tensors).

MaxText's policies are read from AI-Hypercomputer/maxtext at
e591f30cbbf217ed67ef71263ec0538239f9c3b8: ``src/maxtext/layers/decoders.py``
(``Decoder.get_remat_policy``, ``minimal_policy``), ``src/maxtext/utils/maxtext_utils.py``
(``get_save_and_offload_names``: what the ``*_offloaded`` policies move, to ``pinned_host``),
and where the names are put: ``layers/decoders.py`` (``decoder_layer_input``, the layer's
input), ``layers/attentions.py`` (``query_proj``, ``key_proj``,
``value_proj`` after RoPE, ``out_proj``), ``layers/linears.py`` (``mlpwi_0``, ``mlpwi_1``,
``mlpwo``) and ``layers/attention_op.py`` (``context``: splash attention's residuals, its output
and softmax statistics, so saving it spares the backward pass the forward attention kernel).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
from jax.ad_checkpoint import checkpoint_name

from workloads.base import WorkloadError, check_choice
from workloads.llama.splash import CONTEXT

# MaxText's checkpoint names -> the width they hold per token (book letters; ``context`` is the
# attention output, plus splash's softmax statistics, N·128 fp32, left out here).
NAMES: dict[str, Callable] = {
    "query_proj": lambda d: d.N * d.H,
    "key_proj": lambda d: d.K * d.H,
    "value_proj": lambda d: d.K * d.H,
    "out_proj": lambda d: d.D,
    "mlpwi_0": lambda d: d.F,      # SwiGLU's gate projection
    "mlpwi_1": lambda d: d.F,      # its up projection
    "mlpwo": lambda d: d.D,        # the MLP's down projection
    CONTEXT: lambda d: d.N * d.H,
}
LAYER_INPUT = "decoder_layer_input"   # the layer's input, which the scan keeps (or offloads)
NAMES[LAYER_INPUT] = lambda d: d.D

# The forward FLOPs per token of each name's producer, which a policy that neither saves nor
# offloads the name spends again in the backward pass (`transformers.md`: a matmul of an
# input of width a into width b is 2·a·b FLOPs a token; dot-product attention 4·S·N·H a token
# over S keys, a causal mask halving what a proper kernel does, ``causal_keys``). Recomputing
# every one is the whole layer's forward: block remat's 8·P·tokens for 6·P·tokens (reference
# §5.2). The layer input is the previous layer's output, which the scan keeps (or offloads):
# never recomputed. Keyed as ``NAMES``, the one list of names (checked below).
FORWARD_FLOPS: dict[str, Callable] = {
    "query_proj": lambda d, S: 2 * d.D * d.N * d.H,
    "key_proj": lambda d, S: 2 * d.D * d.K * d.H,
    "value_proj": lambda d, S: 2 * d.D * d.K * d.H,
    "out_proj": lambda d, S: 2 * d.N * d.H * d.D,
    "mlpwi_0": lambda d, S: 2 * d.D * d.F,
    "mlpwi_1": lambda d, S: 2 * d.D * d.F,
    "mlpwo": lambda d, S: 2 * d.F * d.D,
    CONTEXT: lambda d, S: 4 * S * d.N * d.H,   # QK^T and ·V (splash's forward kernel)
    LAYER_INPUT: lambda d, S: 0,
}
assert FORWARD_FLOPS.keys() == NAMES.keys()


def causal_keys(keys: float, causal: bool) -> float:
    """The keys a query sees on average for attention's FLOPs: all of them, half under a causal
    mask (``predictions.transformer.attention_flops``)."""
    return keys / 2 if causal else keys


QKV = ("query_proj", "key_proj", "value_proj")
MINIMAL = (*QKV, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")   # every projection output


@dataclass(frozen=True)
class Remat:
    """What a policy keeps for the backward pass: ``saved`` names stay in HBM, ``offloaded``
    ones go to host memory; the rest is recomputed. ``custom``: one of jax's own policies
    instead of the names (``saved`` then says what it keeps); ``checkpoint=False``: no
    ``jax.checkpoint`` at all, every intermediate kept."""

    doc: str
    saved: tuple[str, ...] = ()
    offloaded: tuple[str, ...] = ()
    custom: Callable | None = None
    checkpoint: bool = True

    def jax_policy(self):
        """The ``jax.checkpoint`` policy of the layer body."""
        if self.custom is not None:
            return self.custom
        if self.offloaded:
            return jax.checkpoint_policies.save_and_offload_only_these_names(
                names_which_can_be_saved=list(self.saved),
                names_which_can_be_offloaded=list(self.offloaded),
                offload_src="device", offload_dst="pinned_host")
        return jax.checkpoint_policies.save_only_these_names(*self.saved)

    def hbm_width(self, d) -> int:
        """Elements per token per layer kept in HBM for the backward pass (`transformers.md`:
        ~20·D with no checkpoint; else the saved names' widths and the layer input's D, unless
        that is offloaded)."""
        if not self.checkpoint:
            return 20 * d.D
        kept = (set(self.saved) | {LAYER_INPUT}) - set(self.offloaded)
        return sum(NAMES[n](d) for n in kept)

    def host_width(self, d) -> int:
        """Elements per token per layer moved to host memory for the backward pass."""
        return sum(NAMES[n](d) for n in set(self.offloaded)) if self.checkpoint else 0

    def recomputed(self) -> tuple[str, ...]:
        """The names the backward pass recomputes: those neither saved nor offloaded, the
        layer input aside (none without ``jax.checkpoint``)."""
        if not self.checkpoint:
            return ()
        kept = {*self.saved, *self.offloaded, LAYER_INPUT}
        return tuple(n for n in NAMES if n not in kept)

    def recompute_flops(self, d, keys: float, causal: bool = True) -> float:
        """Forward FLOPs per token per layer the backward pass spends again (``FORWARD_FLOPS``
        of each name recomputed; ``keys`` each query attends over): 0 for ``none``, the whole
        layer's forward for ``full`` (`transformers.md`, reference §5.2: 8·P·tokens for
        6·P·tokens)."""
        S = causal_keys(keys, causal)
        return sum(FORWARD_FLOPS[n](d, S) for n in self.recomputed())


# name -> policy, in MaxText's order: "fastest to slowest, HBM use highest to lowest" (its
# base.yml), with ours (none, dots) where they fall.
POLICIES: dict[str, Remat] = {
    "none": Remat("every intermediate kept, nothing recomputed", checkpoint=False),
    "minimal_with_context": Remat("every projection output and the attention residuals",
                                  saved=(*MINIMAL, CONTEXT)),
    "dots": Remat("every matmul output without batch dims (jax's "
                  "dots_with_no_batch_dims_saveable): the projections", saved=MINIMAL,
                  custom=jax.checkpoint_policies.dots_with_no_batch_dims_saveable),
    "minimal": Remat("every projection output; attention recomputed", saved=MINIMAL),
    "save_dot_except_mlpwi": Remat("Q, K, V, the attention and MLP output projections; the MLP "
                                   "input projections recomputed",
                                   saved=(*QKV, "out_proj", "mlpwo")),
    "save_dot_except_mlp": Remat("Q, K, V and the attention output projection",
                                 saved=(*QKV, "out_proj")),
    "save_qkv_proj": Remat("Q, K, V", saved=QKV),
    "qkv_proj_offloaded": Remat("Q, K, V, in host memory", offloaded=QKV),
    "minimal_offloaded": Remat("every projection output, in host memory", offloaded=MINIMAL),
    "full": Remat("only the layer input: the whole layer recomputed"),
}


NONE = POLICIES["none"]
CUSTOM = "custom"   # MaxText's remat_policy=custom: each name saved, offloaded or recomputed

# remat=custom offloads of MaxText's published configs (docs/published-runs.md), the most kept
# in HBM first: with the layer input offloaded nothing a layer keeps stays in HBM, and the
# fewer names offloaded, the more each layer recomputes.
OFFLOADS: tuple[tuple[str, ...], ...] = (
    ("context", "mlpwo"),                 # llama3_1_405b_8192_v5p_1024: the layer input in HBM
    (LAYER_INPUT, *QKV, "out_proj"),      # llama3_1_8b_8192
    (LAYER_INPUT, *QKV),                  # llama3_1_70b_8192
    (LAYER_INPUT,),                       # full remat with the layer input on the host
)


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in str(text).split(",") if n.strip())


def policy(name: str, save: str = "", offload: str = "") -> Remat:
    """The policy called ``name``; for ``custom``, the checkpoint names to keep in HBM
    (``save``) and to move to host memory (``offload``), comma-separated, as MaxText's
    per-tensor ``device``/``offload`` settings. ``WorkloadError`` (one line, naming the valid
    choices) for an unknown policy or name, or names given to a named policy."""
    check_choice("remat", name, (*POLICIES, CUSTOM))
    saved, offloaded = _names(save), _names(offload)
    if name != CUSTOM:
        if saved or offloaded:
            raise WorkloadError(f"remat_save/remat_offload apply to remat={CUSTOM} only; "
                                f"remat={name} keeps {POLICIES[name].doc}")
        return POLICIES[name]
    unknown = [n for n in saved + offloaded if n not in NAMES]
    if unknown:
        raise WorkloadError(f"unknown checkpoint name(s) {', '.join(unknown)} in remat_save/"
                            f"remat_offload; valid: {', '.join(NAMES)}")
    return Remat(f"{CUSTOM}: saved {', '.join(saved) or 'none'}; offloaded "
                 f"{', '.join(offloaded) or 'none'}", saved=saved, offloaded=offloaded)


def name(x, what: str):
    """``x`` marked as the checkpoint ``what`` (one of ``NAMES``) for the remat policies."""
    return checkpoint_name(x, what)
