"""The book's first-principles answers before running (``harness predict``), each as an
``Answer``: a title, rows of (quantity, value, formula with its book chapter) and the same
figures as data.

    train(chip_entry("tpu-v5p"), transformer.model("llama3-70b"), 8960, 15e12, 0.4)

The numbers come from ``predictions`` (``training``, ``inference``, ``collectives``,
``roofline``); bad input raises ValueError/KeyError there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.units import fmt_seconds, fmt_si
from predictions import (
    collectives,
    hardware,
    inference,
    layouts,
    levels,
    roofline,
    training,
    transformer,
)
from predictions.mesh import Mesh, MeshError, parse_dims, parse_mesh

COLUMNS = ("quantity", "value", "formula (book chapter)")


@dataclass
class Answer:
    """One answer: its title, its table (``columns``, one row per figure) and its data."""

    title: str
    rows: list[tuple[str, ...]]
    data: dict
    columns: tuple[str, ...] = field(default=COLUMNS)


def train(chip, cfg, name: str, chips: int, tokens: float, mfu: float, dtype: str = "bf16",
          seq: float | None = None, batch: float | None = None, layout: str = "fsdp",
          spans: str = "1") -> Answer:
    """Training FLOPs and wall time of ``tokens`` on ``chips`` at ``mfu``; with a global
    ``batch`` (tokens), the step model of ``layout`` (an entry of ``predictions.layouts``,
    priced by its book model) with its mesh axes spanning ``spans`` physical axes ("1", "2x1":
    M_X, M_Y) and the memory per chip."""
    P = transformer.param_count(cfg)
    flops = transformer.train_flops(cfg, tokens, seq)
    t = training.train_time(cfg, tokens, chip, chips, mfu, dtype, seq)
    rows = [("params P", fmt_si(P), "L(3DF+2D(N+K)H+2D)+D+2DV (transformers.md)"),
            ("train FLOPs", fmt_si(flops, "FLOP"),
             "6*P*tokens (+12*T*S*N*H*L) (transformers.md)"),
            ("wall time", fmt_seconds(t), "FLOPs/(chips*C*MFU) (training.md)"),
            ("bound", "compute (at the given MFU)", "")]
    data = {"model": name, "chip": chip.name, "chips": chips, "tokens": tokens, "mfu": mfu,
            "params": P, "flops": flops, "seconds": t, "bound": "compute"}
    if batch is not None:
        try:
            axes = parse_dims(spans)
        except MeshError as e:
            raise ValueError(f"--spans {spans!r}: {e.reason}; give M_X or M_XxM_Y") from None
        axes = axes[0] if len(axes) == 1 else axes
        strategy = layouts.layout(layout).strategy
        step = training.step_time(cfg, batch, chip, chips, strategy, axes=axes, mfu=mfu,
                                  dtype=dtype, seq_len=seq)
        mem = training.memory_per_chip(cfg, batch, chips, chip=chip)
        rows += [("layout X x Y", f"{layout} {step.X} x {step.Y}",
                  f"{strategy} step (training.md)"),
                 ("tokens per chip", fmt_si(step.tokens_per_chip), "B/(X*Y)"),
                 ("step T_math", fmt_seconds(step.t_math_s), "6*P*B/(N*C*MFU) (training.md)"),
                 ("step T_fsdp", fmt_seconds(step.t_fsdp_s), "L*3*2*P_layer/(Y*W_ici*M_X)"),
                 ("step T_tp", fmt_seconds(step.t_tp_s), "L*3*2*2*B*D/(X*W_ici*M_Y)"),
                 ("step time", fmt_seconds(step.t_step_s),
                  "sum over passes of max(T_math, T_comms)"),
                 ("step bound", step.bound, ""),
                 ("memory per chip", fmt_si(mem.total_bytes, "B"),
                  f"10*P/N + 2*D*B*4*L/N (applied-training.md); fits: {mem.fits}")]
        data.update(step=dataclasses.asdict(step),
                    memory={**dataclasses.asdict(mem), "fits": mem.fits})
    return Answer(f"train {name} on {chips} x {chip.name}", rows, data)


def precision(int8: bool, int4: bool, weight_bytes: float | None,
              kv_bytes: float | None) -> tuple[float, float]:
    """(bytes per parameter, bytes per KV element): int8 weights and cache 1 and 1, int4
    weights 0.5 with an int8 cache, else bf16's 2 and 2; a byte count given wins."""
    default = 0.5 if int4 else 1 if int8 else 2
    return (default if weight_bytes is None else weight_bytes,
            (1 if int8 or int4 else 2) if kv_bytes is None else kv_bytes)


def decode(chip, cfg, name: str, chips: int, batch: int, context: float, wb: float, kb: float,
           dtype: str = "bf16") -> Answer:
    """One decode step of ``batch`` sequences of ``context`` cached tokens (inference.md)."""
    s = inference.decode_step(cfg, chip, chips, batch, context, wb, kb, dtype)
    crit = inference.critical_batch(chip, wb, dtype)
    mb = inference.max_batch(cfg, chip, chips, context, wb, kb)
    rows = [("param bytes", fmt_si(s.param_bytes, "B"), f"P*{wb}"),
            ("KV bytes", fmt_si(s.kv_bytes, "B"), f"B*S*2*L*K*H*{kb} (transformers.md)"),
            ("kv time", fmt_seconds(s.kv_time_s), "KV bytes/(chips*W_hbm) (inference.md)"),
            ("param time", fmt_seconds(s.param_time_s), "param bytes/(chips*W_hbm)"),
            ("flops time", fmt_seconds(s.flops_time_s), "2*P*B/(chips*C)"),
            ("step time", fmt_seconds(s.step_s), "kv + max(flops, param) (inference.md)"),
            ("bound", s.bound, f"critical batch {crit:.0f} = C*s_w/(2*W_hbm)"),
            ("throughput", f"{fmt_si(s.tokens_per_s, 'tok/s')} "
                           f"({fmt_si(s.tokens_per_s_per_chip)}/chip)", "B/step"),
            ("max batch", str(mb), "(chips*HBM - param bytes)/(S*KV per token)")]
    data = {"model": name, "chip": chip.name, **dataclasses.asdict(s),
            "tokens_per_s": s.tokens_per_s, "critical_batch": crit, "max_batch": mb}
    return Answer(f"decode {name} on {chips} x {chip.name}", rows, data)


def prefill(chip, cfg, name: str, chips: int, tokens: float, mfu: float, wb: float,
            dtype: str = "bf16", seq: float | None = None) -> Answer:
    """Prefill of ``tokens`` prompt tokens: FLOPs at ``mfu`` against loading the weights."""
    p = inference.prefill(cfg, chip, chips, tokens, mfu, wb, dtype, seq)
    rows = [("FLOPs", fmt_si(p.flops, "FLOP"), "2*P*tokens (inference.md)"),
            ("flops time", fmt_seconds(p.flops_time_s), "FLOPs/(chips*C*MFU)"),
            ("param time", fmt_seconds(p.param_time_s), "param bytes/(chips*W_hbm)"),
            ("prefill time", fmt_seconds(p.seconds), "max of the two"),
            ("bound", p.bound, "")]
    data = {"model": name, "chip": chip.name, "chips": chips, **dataclasses.asdict(p)}
    return Answer(f"prefill {name} on {chips} x {chip.name}", rows, data)


def _over(mesh: str, over: str | None) -> tuple[Mesh, tuple[int, ...]]:
    """The mesh and the indices of the axes ``over`` names (comma-separated; None: all)."""
    try:
        m = parse_mesh(mesh)
    except MeshError as e:
        raise ValueError(f"--mesh {mesh!r}: {e.reason}") from None
    names = [n.strip() for n in over.split(",")] if over else list(m.names)
    wrong = [n for n in names if n not in m.names]
    if wrong or not names:
        raise ValueError(f"--over {over!r}: no axis {', '.join(wrong)} in --mesh {m}; valid: "
                         f"{', '.join(m.names)}")
    return m, tuple(sorted(m.names.index(n) for n in names))


def collective(kind: str, nbytes: float, axes: str, chip: str, wraparound: bool | None = None,
               links: int = 1, hops: int = 1, system=None, over: str | None = None) -> Answer:
    """One collective of ``nbytes`` per device over the mesh ``axes`` ("4x4", "X=4,Y=4";
    sharding.md), or over the axes ``over`` names of it; a ppermute over ``links`` links and
    ``hops`` hops. With ``system`` (a ``predictions.network`` System), at the network levels
    its groups cross (``by_levels``)."""
    if system is not None:
        return by_levels(kind, nbytes, axes, system, over)
    if over:
        m, idx = _over(axes, over)
        axes = "x".join(str(m.dims[i]) for i in idx)
    if kind == "ppermute":
        e = collectives.ppermute_terms(nbytes, chip, links, hops)
    else:
        e = collectives.estimate(kind, nbytes, axes, chip, wraparound)
    rows = [("V (bytes)", fmt_si(e.nbytes, "B"), "per-device convention of sharding.md"),
            ("axes", "x".join(map(str, e.axes)) or "-", f"wraparound: {e.wraps or '-'}"),
            ("bandwidth term", fmt_seconds(e.t_bandwidth_s), e.formula),
            ("latency term", fmt_seconds(e.t_latency_s), "T_min * hops (sharding.md)"),
            ("time", fmt_seconds(e.seconds), "max of the two"),
            ("bound", e.bound, "")]
    data = {**dataclasses.asdict(e), "seconds": e.seconds, "bound": e.bound}
    return Answer(f"{kind} on {e.chip}", rows, data)


def _group_text(g) -> str:
    """{0,8,16} or, past six ids, {0,8,16,...,248}."""
    ids = list(map(str, g))
    return "{" + ",".join(ids if len(ids) <= 6 else [*ids[:3], "...", ids[-1]]) + "}"


def by_levels(kind: str, nbytes: float, mesh: str, system, over: str | None = None) -> Answer:
    """One collective over the axes ``over`` names of ``mesh`` (default all of it), the device
    ids row-major (the mesh's last axis inside a node), priced at the levels its groups cross
    on ``system`` (``predictions.levels``; docs/networks.md)."""
    from harness.explain.levels import binding_text

    if kind not in levels.PRICED:
        raise ValueError(f"--system prices {', '.join(levels.PRICED)}, not {kind}")
    m, idx = _over(mesh, over)
    groups = levels.mesh_groups(m.dims, idx)
    t = levels.price(kind, nbytes, groups, system)
    shown = " ".join(_group_text(g) for g in groups[:2])
    over_text = ",".join(m.names[i] for i in idx)
    rows = [("V (bytes)", fmt_si(t.nbytes, "B"), "per-device convention of sharding.md"),
            ("groups", f"{len(groups)} x {t.group_size} over {over_text} of {m}",
             shown + (" ..." if len(groups) > 2 else "")),
            *((f"level {c.level}", fmt_seconds(c.t_s),
               f"D={c.D} G={c.G} W={fmt_si(c.bytes_per_s, 'B/s')} (gpus.md / training.md)")
              for c in t.crossings),
            ("bandwidth term", fmt_seconds(t.t_bandwidth_s), t.formula),
            ("latency term", fmt_seconds(t.t_latency_s), "hop latency per ring step"),
            ("time", fmt_seconds(t.seconds), "max of the two"),
            ("binding level", t.binding or "-", binding_text(t, system)),
            ("bound", t.bound, "")]
    data = {**dataclasses.asdict(t), "seconds": t.seconds, "bound": t.bound,
            "mesh": str(m), "over": over_text, "level": binding_text(t, system)}
    return Answer(f"{kind} on {system.name} ({system.chip.name})", rows, data)


def matmul(B: float, D: float, F: float, chip: str, dtype: str = "bf16",
           weight_dtype: str | None = None) -> Answer:
    """The roofline of X[B,D] . W[D,F] (roofline.md)."""
    m = roofline.matmul(B, D, F, chip, dtype, weight_dtype)
    rows = [("FLOPs", fmt_si(m.flops, "FLOP"), "2BDF (roofline.md)"),
            ("bytes", fmt_si(m.bytes, "B"), "s_x*BD + s_w*DF + s_x*BF"),
            ("intensity", f"{m.intensity:.4g}", f"critical {m.critical_intensity:.4g} = C/W_hbm"),
            ("T_math", fmt_seconds(m.t_compute_s), "FLOPs/C"),
            ("T_memory", fmt_seconds(m.t_memory_s), "bytes/W_hbm"),
            ("time", f"{fmt_seconds(m.t_lower_s)} .. {fmt_seconds(m.t_upper_s)}", "max .. sum"),
            ("bound", m.bound, "")]
    return Answer(f"matmul on {hardware.chip_entry(chip).name}", rows, dataclasses.asdict(m))


def chip_table() -> Answer:
    """The chip registry: peaks, memory, links, largest slice and critical intensities."""
    rows, data = [], {}
    for name, c in hardware.CHIPS.items():
        ici = roofline.critical_intensity(c, "bf16", "ici")
        rows.append((name, fmt_si(c.flops_per_s("bf16"), "FLOP/s"), fmt_si(c.hbm_bytes, "B"),
                     fmt_si(c.hbm_bytes_per_s, "B/s"),
                     f"{fmt_si(c.ici_bytes_per_s, 'B/s')} "
                     + (f"x {c.ici_links} links" if c.kind == "tpu" else
                        f"egress ({c.ici_links} links)" if c.kind == "gpu" else "ring"),
                     "x".join(map(str, c.max_slice)) or "-",
                     f"{roofline.critical_intensity(c):.0f}", f"{ici:.0f}"))
        data[name] = dataclasses.asdict(c)
    return Answer("chips (tpus.md, gpus.md; cpu is a placeholder for `harness calibrate`)",
                  rows, data, ("chip", "bf16 peak", "HBM", "HBM BW",
                               "ICI one-way / NVLink egress", "max slice", "C/W_hbm", "C/W_ici"))
