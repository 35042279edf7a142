"""Training (training.md, applied-training.md): when DP/FSDP/TP stay compute-bound, how to split
FSDP x TP, wall time at an MFU, memory per chip, and a per-layer step-time model.

Letters as in training.md: B = global batch in tokens, N = chips, X = DP/FSDP degree, Y = TP
degree, alpha = C / W_ici (bidirectional), M_X / M_Y = physical axes X / Y span.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from predictions import hardware, roofline, thresholds, transformer
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.transformer import Config
from predictions.verdicts import Verdict, _num  # noqa: F401 (Verdict: the type verdict returns)

log = logging.getLogger(__name__)


def _mxy(axes: int | Sequence[int]) -> tuple[int, int]:
    """axes -> (M_X, M_Y); an int is M_X with M_Y = 1."""
    pair = (axes, 1) if isinstance(axes, int) else tuple(axes)
    if len(pair) != 2 or any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in pair):
        raise ValueError(f"axes must be a positive int M_X or a pair (M_X, M_Y), got {axes!r}")
    return pair


def _fsdp_tp_threshold(alpha: float, m_x: int, m_y: int, F: float | None) -> float:
    if F is None:
        raise ValueError("strategy 'fsdp_tp' needs F (the MLP width d_ff)")
    # training.md: at X_opt, compute-bound iff B/N > alpha^2/(M_X*M_Y*F). Newest edition: the two
    # comm terms overlap (max); Feb 2025 added them, giving a 4x higher bound 4*alpha^2/(M_X*M_Y*F).
    return alpha ** 2 / (m_x * m_y * positive("F", F))


# strategy -> tokens per chip (per slice over DCN) needed to stay compute-bound
MIN_BATCH: dict[str, Callable[[float, int, int, float | None], float]] = {
    "dp": lambda a, m_x, m_y, F: a / m_x,  # training.md: B/X > alpha/M_X (backward AllReduce)
    "fsdp": lambda a, m_x, m_y, F: a / m_x,  # training.md: B/X > alpha/M_X (AllGather / RS)
    "fsdp_tp": _fsdp_tp_threshold,
}


def min_batch_per_chip(chip: Chip | str, strategy: str, axes: int | Sequence[int] = 1,
                       F: float | None = None, over: str = "ici", dtype: str = "bf16",
                       chips_per_slice: int = 1) -> float:
    """Tokens per chip for ``strategy`` ("dp" | "fsdp" | "fsdp_tp") to stay compute-bound.

    ``axes``: M_X, or (M_X, M_Y) for fsdp_tp. ``over="dcn"``: multi-slice DP, where training.md's
    condition is tokens per slice > C/W_dcn; divided by ``chips_per_slice`` to give per chip.
    """
    if strategy not in MIN_BATCH:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(MIN_BATCH)} "
                         f"(for TP use max_tp)")
    m_x, m_y = _mxy(axes)
    alpha = roofline.critical_intensity(chip, dtype, over)
    return MIN_BATCH[strategy](alpha, m_x, m_y, F) / positive("chips_per_slice", chips_per_slice)


def max_tp(F: float, chip: Chip | str, axes: int = 1, dtype: str = "bf16") -> float:
    """training.md: TP stays compute-bound while Y < M_Y * F / alpha_ici."""
    return axes * positive("F", F) / roofline.critical_intensity(chip, dtype, "ici")


def fsdp_tp_optimum(F: float, batch_tokens: float, num_chips: int,
                    axes: int | Sequence[int] = 1) -> float:
    """training.md: X_opt = sqrt((B/F) * (M_X/M_Y) * N), the unrounded FSDP degree."""
    m_x, m_y = _mxy(axes)
    return math.sqrt(positive("batch_tokens", batch_tokens) / positive("F", F) * m_x / m_y
                     * positive("num_chips", num_chips))


def fsdp_tp_split(F: float, batch_tokens: float, num_chips: int,
                  axes: int | Sequence[int] = 1) -> tuple[int, int]:
    """(X, Y): X_opt rounded to the nearest power of two (in log scale, at most N), Y the largest
    power of two with X*Y <= N (applied-training.md: 1618 -> 2048-way FSDP x 4-way TP on 8960)."""
    x_opt = fsdp_tp_optimum(F, batch_tokens, num_chips, axes)
    X = min(2 ** round(math.log2(max(x_opt, 1))), 2 ** int(math.log2(num_chips)))
    Y = 2 ** int(math.log2(num_chips // X)) if num_chips // X >= 1 else 1
    return X, Y


def train_time(cfg: Config, tokens: float, chip: Chip | str, num_chips: int, mfu: float,
               dtype: str = "bf16", seq_len: float | None = None) -> float:
    """training.md: wall time = 6 * P * tokens / (N * C * MFU) seconds (+ attention with
    seq_len)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    C = hardware.chip_entry(chip).flops_per_s(dtype)
    return transformer.train_flops(cfg, tokens, seq_len) / (positive("num_chips", num_chips)
                                                             * C * mfu)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per chip: weights + optimizer state, checkpointed activations, total."""

    params_optimizer_bytes: float
    checkpoint_bytes: float
    total_bytes: float
    hbm_bytes: float | None = None

    @property
    def fits(self) -> bool | None:
        return None if self.hbm_bytes is None else self.total_bytes <= self.hbm_bytes


def memory_per_chip(cfg: Config, batch_tokens: float, num_chips: int,
                    weight_shards: int | None = None, bytes_per_param: float = 10,
                    n_ckpt: float = 4, act_bytes: float = 2,
                    chip: Chip | str | None = None) -> MemoryEstimate:
    """training.md: 10 bytes/param with Adam (bf16 weights + fp32 moments) divided over the
    ``weight_shards`` chips holding the weights (default all: FSDP), plus applied-training.md's
    checkpoints 2*D*B*n_ckpt*L spread over all chips."""
    shards = num_chips if weight_shards is None else weight_shards
    positive("weight_shards", shards)
    w = bytes_per_param * transformer.param_count(cfg) / shards
    a = transformer.checkpoint_bytes(cfg, batch_tokens, n_ckpt, act_bytes) / positive(
        "num_chips", num_chips)
    hbm = hardware.chip_entry(chip).hbm_bytes if chip is not None else None
    return MemoryEstimate(w, a, w + a, hbm)


def min_chips_for_memory(cfg: Config, batch_tokens: float, chip: Chip | str,
                         bytes_per_param: float = 10, n_ckpt: float = 4) -> int:
    """applied-training.md: total training bytes / HBM per chip, rounded up."""
    total = memory_per_chip(cfg, batch_tokens, 1, 1, bytes_per_param, n_ckpt).total_bytes
    return math.ceil(total / hardware.chip_entry(chip).hbm_bytes)


# --- per-layer step-time model (training.md §6.1/§6.2) -----------------------------------------
STRATEGIES = ("dp", "fsdp", "tp", "fsdp_tp")


@dataclass(frozen=True)
class StepTime:
    """One training step. Per layer and pass, time = max(T_math, T_comms) (perfect overlap);
    ``t_step_s`` sums them; ``t_upper_s`` = T_math + T_comms (no overlap)."""

    strategy: str
    X: int
    Y: int
    tokens_per_chip: float
    t_math_s: float
    t_fsdp_s: float
    t_tp_s: float
    t_comms_s: float
    t_step_s: float
    t_upper_s: float
    bound: str  # "compute" | "comm"


def layer_step(B: float, D: float, P_layer: float, L: int, chip: Chip | str, strategy: str,
               X: int, Y: int, axes: int | Sequence[int] = 1, tp_blocks: int = 1,
               extra_params: float = 0, attn_fwd_flops: float = 0, mfu: float = 1.0,
               dtype: str = "bf16", weight_bytes: float = 2, act_bytes: float = 2) -> StepTime:
    """training.md's per-layer model generalised to a layer of ``P_layer`` matmul params with
    ``tp_blocks`` Megatron blocks (1 = the book's MLP, P_layer = 2DF; 2 for a transformer layer).
    ``extra_params`` (embeddings) add compute only; ``attn_fwd_flops`` is per layer, global."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    m_x, m_y = _mxy(axes)
    c = hardware.chip_entry(chip)
    N = positive("X", X) * positive("Y", Y)
    C = c.flops_per_s(dtype) * positive("mfu", mfu)
    W = c.axis_bytes_per_s
    # training.md: forward 2*P*B/N FLOPs per chip per layer (4BDF/N for the MLP), backward 2x
    math_f = (2 * P_layer * B + attn_fwd_flops) / (N * C)
    # training.md: FSDP AllGathers the layer's weights (sharded Y ways) over X: 4DF/(Y*W*M_X);
    # backward AllGather + ReduceScatter, 2x. DP: only the backward gradient AllReduce, 8DF/W.
    fsdp_f = weight_bytes * P_layer / (Y * W * m_x) if X > 1 else 0.0
    fsdp_b = 2 * weight_bytes * P_layer / (Y * W * m_x) if X > 1 else 0.0
    if strategy == "dp":
        fsdp_f = 0.0
    # training.md: TP AllGathers activations before W_in and ReduceScatters after W_out,
    # 4BD/(X*W*M_Y) forward per block, 2x backward
    tp_f = tp_blocks * 2 * act_bytes * B * D / (X * W * m_y) if Y > 1 else 0.0
    comm_f, comm_b = max(fsdp_f, tp_f), max(fsdp_b, 2 * tp_f)  # training.md: the axes overlap
    extra = 6 * extra_params * B / (N * C)  # embeddings: compute only (6 * params * tokens)
    t_math = L * 3 * math_f + extra
    t_comms = L * (comm_f + comm_b)
    t_step = L * (max(math_f, comm_f) + max(2 * math_f, comm_b)) + extra
    bound = "compute" if math_f >= comm_f and 2 * math_f >= comm_b else "comm"
    return StepTime(strategy, X, Y, B / N, t_math, L * (fsdp_f + fsdp_b), L * 3 * tp_f,
                    t_comms, t_step, t_math + t_comms, bound)


def mlp_step(B: float, D: float, F: float, chip: Chip | str, strategy: str, X: int = 1,
             Y: int = 1, axes: int | Sequence[int] = 1, dtype: str = "bf16") -> StepTime:
    """training.md's model itself: one layer In[B,D] . W_in[D,F] . W_out[F,D], bf16."""
    return layer_step(B, D, 2 * D * F, 1, chip, strategy, X, Y, axes, dtype=dtype)


def degrees(strategy: str, num_chips: int, F: float, batch_tokens: float,
            axes: int | Sequence[int] = 1) -> tuple[int, int]:
    """(X, Y) for a strategy on ``num_chips``; fsdp_tp uses ``fsdp_tp_split``."""
    table = {"dp": (num_chips, 1), "fsdp": (num_chips, 1), "tp": (1, num_chips)}
    if strategy == "fsdp_tp":
        return fsdp_tp_split(F, batch_tokens, num_chips, axes)
    if strategy not in table:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return table[strategy]


def step_time(cfg: Config, batch_tokens: float, chip: Chip | str, num_chips: int,
              strategy: str = "fsdp", X: int | None = None, Y: int | None = None,
              axes: int | Sequence[int] = 1, mfu: float = 1.0, dtype: str = "bf16",
              seq_len: float | None = None) -> StepTime:
    """Workload-level prediction for one LLaMA training step (forward + backward).

    Each layer is training.md's model with P_layer = 3DF + 2D(N+K)H and two Megatron blocks
    (attention, MLP); norms and embeddings add compute only. Without X/Y the degrees come from
    ``degrees``; X*Y may be below ``num_chips`` for fsdp_tp on non-power-of-two slices.
    """
    positive("batch_tokens", batch_tokens)
    if X is None or Y is None:
        X, Y = degrees(strategy, num_chips, cfg.F, batch_tokens, axes)
    if X * Y != num_chips:
        log.info("X*Y = %d*%d = %d of %d chips used", X, Y, X * Y, num_chips)
    P_layer = transformer.mlp_params(cfg) + transformer.attention_params(cfg)
    extra = transformer.param_count(cfg) - cfg.L * P_layer
    attn = 0.0
    if seq_len is not None:
        attn = transformer.attention_flops(cfg, batch_tokens, seq_len) / cfg.L
    return layer_step(batch_tokens, cfg.D, P_layer, cfg.L, chip, strategy, X, Y, axes,
                      tp_blocks=2, extra_params=extra, attn_fwd_flops=attn, mfu=mfu, dtype=dtype)


# --- the book's verdict on one layout (training.md §6.2) ---------------------------------------
def _tp_verdict(tokens, chip, N, X, Y, m_x, m_y, F, dtype) -> Verdict:
    # training.md: TP stays compute-bound while Y < M_Y * F / alpha
    need = max_tp(F, chip, m_y, dtype)
    ok = Y < need
    return Verdict("tp", Y, need, "compute" if ok else "comm",
                   f"Y={Y} {'<' if ok else '>='} M_Y*F/alpha={_num(need)}")


def _batch_verdict(strategy: str):
    def verdict(tokens, chip, N, X, Y, m_x, m_y, F, dtype) -> Verdict:
        if strategy == "fsdp_tp":  # training.md: at X_opt, B/N > alpha^2/(M_X*M_Y*F)
            have, need, what = tokens / N, min_batch_per_chip(chip, strategy, (m_x, m_y), F,
                                                              dtype=dtype), "B/N"
            rule = f"alpha^2/(M_X*M_Y*F)={_num(need)}"
        else:  # training.md: B/X > alpha/M_X
            have, need, what = tokens / X, min_batch_per_chip(chip, strategy, m_x,
                                                              dtype=dtype), "B/X"
            rule = f"alpha/M_X={_num(need)}"
        ok = have > need
        return Verdict(strategy, have, need, "compute" if ok else "comm",
                       f"{what}={_num(have)} {'>' if ok else '<='} {rule}")
    return verdict


VERDICTS: dict[str, Callable[..., Verdict]] = {
    "dp": _batch_verdict("dp"), "fsdp": _batch_verdict("fsdp"),
    "fsdp_tp": _batch_verdict("fsdp_tp"), "tp": _tp_verdict,
}


def verdict(strategy: str, tokens: float, chip: Chip | str, X: int, Y: int,
            axes: Sequence[int] = (1, 1), F: float | None = None, dtype: str = "bf16",
            system=None, inner: int = 1) -> Verdict:
    """Whether ``strategy`` on X (data/FSDP) x Y (model) chips stays compute-bound at
    ``tokens`` per batch, by training.md's condition; ``axes`` = (M_X, M_Y). GPUs past one
    node: gpus.md's condition at the network level crossed (``predictions.thresholds``)."""
    if strategy not in VERDICTS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(VERDICTS)}")
    net = thresholds.network_verdict(strategy, positive("tokens", tokens), chip, X, Y, F,
                                     dtype, system, inner)
    if net is not None:
        return net
    m_x, m_y = _mxy(tuple(axes))
    return VERDICTS[strategy](positive("tokens", tokens), chip, X * Y, X, Y, m_x, m_y, F, dtype)
