"""``harness predict serve`` and ``speculative``: the serving plan from the book's arithmetic
(``predictions.serving``; inference.md, applied-inference.md), as ``book.Answer`` tables.

    answers = serve(chip_entry("tpu-v5e"), transformer.model("llama3-70b"), "llama3-70b",
                    Serve(prompt=7680, generate=512))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.plan.book import Answer
from harness.units import fmt_seconds, fmt_si
from predictions import serving

FRONTIER_COLUMNS = ("precision", "N", "B", "step (per token)", "kv", "params", "flops", "ici",
                    "bound", "tok/s/chip", "QPS/chip", "TTFT", "$/M tokens")


@dataclass(frozen=True)
class Serve:
    """What is asked: prompt p and generation g tokens (S = p + g cached unless ``context``),
    the chips (None: each precision's smallest slice), one batch (None: the sweep up to the
    largest), the prefill MFU, a per-token latency target and a $/chip-hour."""

    prompt: float
    generate: float
    context: float | None = None
    chips: int | None = None
    batch: int | None = None
    precisions: tuple[str, ...] = tuple(serving.PRECISIONS)
    mfu: float = 0.5
    latency_s: float | None = None
    usd_per_chip_hour: float | None = None
    dtype: str = "bf16"

    @property
    def S(self) -> float:
        return self.prompt + self.generate if self.context is None else self.context


def _frontier_row(pt: serving.Point) -> tuple[str, ...]:
    cost = "-" if pt.usd_per_million_tokens is None else f"{pt.usd_per_million_tokens:.3g}"
    return (pt.precision, str(pt.N), str(pt.B), fmt_seconds(pt.step_s), fmt_seconds(pt.kv_s),
            fmt_seconds(pt.params_s), fmt_seconds(pt.flops_s), fmt_seconds(pt.ici_s), pt.bound,
            f"{pt.tokens_per_s_per_chip:.4g}", f"{pt.qps_per_chip:.3g}", fmt_seconds(pt.ttft_s),
            cost)


def _book_rows(chip, cfg, q: Serve, prec: str, N: int, pts: list) -> tuple[list, dict]:
    """One precision's answers: its slice, the largest batch, the step there against a full
    HBM's, QPS per chip, the prefill:generate ratio, eviction, cost, the latency target's slice."""
    top = pts[-1] if pts else None
    data = {"chips": N, "smallest_slice": serving.smallest_slice(cfg, chip, prec),
            "b_max": top.B if top else 0,
            "kv_bytes_per_token": serving.kv_bytes_per_token(cfg, prec),
            "full_hbm_step_s": serving.full_hbm_step(chip), "frontier": [
                dataclasses.asdict(p) for p in pts]}
    rows = [(f"{prec}: chips", f"{N} (smallest slice {data['smallest_slice']})",
             "2^ceil(log2(P*s_w/HBM)) (applied-inference.md)"),
            (f"{prec}: KV per token", fmt_si(data["kv_bytes_per_token"], "B"),
             "2*L*K*H*s_kv (transformers.md)")]
    if top is None:
        rows.append((f"{prec}: largest batch", "0", "the weights alone fill the HBM"))
        return rows, data
    ratio = serving.prefill_generate_ratio(top.B, q.generate, top.ttft_s, top.step_s)
    ev = serving.eviction(top.B, q.prompt, q.generate, top.step_s)
    data.update(step_s=top.step_s, qps_per_chip=top.qps_per_chip, ttft_s=top.ttft_s,
                prefill_generate=ratio, eviction=dataclasses.asdict(ev),
                tokens_per_s_per_chip=top.tokens_per_s_per_chip,
                usd_per_mtok=top.usd_per_million_tokens)
    rows += [(f"{prec}: batch given", str(top.B), "--batch") if q.batch else
             (f"{prec}: largest batch", str(top.B), "(N*HBM - P*s_w)/(S*KV per token)"),
             (f"{prec}: step at it", fmt_seconds(top.step_s),
              f"kv+max(params,flops,ici); HBM full: HBM/W_hbm = "
              f"{fmt_seconds(data['full_hbm_step_s'])} (applied-inference.md)"),
             (f"{prec}: QPS per chip", f"{top.qps_per_chip:.3g}", "B/(step*g*N)"),
             (f"{prec}: time to first token", fmt_seconds(top.ttft_s),
              f"2*P*p/(N*C*MFU) + attention, MFU {q.mfu:g} (inference.md)"),
             (f"{prec}: prefill:generate", f"{ratio:.2f} : 1",
              "(B/g)*T_prefill/T_step (applied-inference.md)"),
             (f"{prec}: eviction", f"{ev.sequences_per_s:.3g} seq/s, "
                                   f"{fmt_si(ev.tokens_per_step)} tokens/step",
              "B/(g*step); B*(p+g)/g per step (inference.md)")]
    if top.usd_per_million_tokens is not None:
        rows.append((f"{prec}: $ per M tokens", f"{top.usd_per_million_tokens:.3g}",
                     f"${q.usd_per_chip_hour:g}/chip-hour / (3600 * tok/s/chip) * 1e6"))
    if q.latency_s is not None:
        hit = serving.slice_for_latency(cfg, chip, q.latency_s, q.S, prec, dtype=q.dtype)
        data["latency_slice"] = hit
        rows.append((f"{prec}: slice for {fmt_seconds(q.latency_s)}/token",
                     "none up to the largest slice" if hit is None else
                     f"{hit[0]} chips, batch up to {hit[1]}", "smallest 2^k chips with step <= "
                                                              "target (inference.md)"))
    return rows, data


def serve(chip, cfg, name: str, q: Serve) -> tuple[Answer, Answer]:
    """(the book's answers per precision, the frontier table over batch size)."""
    rows, data, front = [], {"model": name, "chip": chip.name, "prompt": q.prompt,
                             "generate": q.generate, "context": q.S, "mfu": q.mfu,
                             "precisions": {}}, []
    for prec in q.precisions:
        N = q.chips or serving.smallest_slice(cfg, chip, prec)
        pts = serving.frontier(cfg, chip, N, q.prompt, q.generate, prec, q.S, q.mfu,
                               q.usd_per_chip_hour, q.dtype, [q.batch] if q.batch else None)
        r, d = _book_rows(chip, cfg, q, prec, N, pts)
        rows += r
        data["precisions"][prec] = d
        front += [_frontier_row(p) for p in pts]
    title = (f"serve {name} on {chip.name}: prompt {q.prompt:g}, generate {q.generate:g}, "
             f"context {q.S:g} tokens")
    return (Answer(title, rows, data),
            Answer("latency-throughput frontier (applied-inference.md)", front, data,
                   FRONTIER_COLUMNS))


def speculative(alpha: float, gamma: int, c: float) -> Answer:
    """Speculative sampling's expected tokens per step and speedup (Leviathan et al. 2023,
    Chen et al. 2023; the book, inference.md, describes it and prints no number)."""
    s = serving.speculative(alpha, gamma, c)
    rows = [("acceptance rate alpha", f"{alpha:g}", "per draft token"),
            ("draft tokens gamma", str(gamma), ""),
            ("drafter cost c", f"{c:g}", "drafter step / target step"),
            ("tokens per target step", f"{s.tokens_per_step:.3g}",
             "(1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1)"),
            ("speedup", f"{s.speedup:.3g}x", "E / (gamma*c + 1) (Leviathan et al. 2023, thm 3.8)")]
    return Answer(f"speculative sampling: gamma={gamma}, alpha={alpha:g}, c={c:g}", rows,
                  dataclasses.asdict(s))
