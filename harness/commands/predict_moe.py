"""``harness predict moe``: one of ``harness predict``'s questions (``harness.commands.predict
.QUESTIONS``), a mixture-of-experts model by the book's arithmetic (``predictions.moe``;
docs/moe.md): parameters total and active, FLOPs, the critical batch with E/k, memory per device
with the experts sharded, the dispatch and combine all-to-alls at each network level, and the
expert-parallel verdicts.

    harness predict moe --model deepseek_v3 --chip h100 --system h800-cluster \
        --mesh data=2,expert=64 --batch 1048576
    harness predict moe --model mixtral_8x7b --chip tpu-v5p --mesh data=8,expert=8
    harness predict moe --model mixtral_8x7b --E 16 --k 4 --chip h100
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from harness.commands import MESH_METAVAR, add_network
from harness.commands.answers import emit, num
from harness.plan.book import Answer
from harness.units import fmt_seconds, fmt_si
from predictions import hardware, moe
from predictions.costs import positive
from predictions.hardware import Chip
from predictions.mesh import MeshError, parse_mesh
from predictions.network import System

ROLES = ("expert", "data", "fsdp", "model", "stage")  # predictions.moe's mesh roles
SHAPE = {"E": "experts per MoE layer", "k": "experts active per token", "D": "d_model",
         "F": "each expert's hidden width", "L": "layers", "shared": "shared experts"}


@dataclass(frozen=True)
class Question:
    cfg: moe.MoEConfig
    chip: Chip
    mesh: dict[str, int]
    system: System | None
    B: float          # global tokens per step through each MoE layer
    capacity: float   # the capacity factor of the padded dispatch
    context: float    # tokens cached per sequence (serving)
    dtype: str

    @property
    def N(self) -> int:
        return math.prod(self.mesh.values())

    @property
    def Z(self) -> int:
        return self.mesh.get("expert", 1)

    @property
    def B_group(self) -> float:
        """Tokens one expert group exchanges: B over the data and fsdp replicas."""
        return self.B / (self.mesh.get("data", 1) * self.mesh.get("fsdp", 1))


def _params(q: Question):
    p = moe.params(q.cfg)
    c = q.cfg
    rows = [("params total", fmt_si(p.total), "L_moe*E*3DF + shared + router + attention + "
             "embeddings (transformers.md, §5.4)"),
            ("params active", fmt_si(p.active), "L_moe*k*3DF + the rest (§5.4)"),
            ("routed experts", f"{fmt_si(p.routed)} ({p.routed / p.total:.0%})",
             f"{c.L_moe} MoE layers x E={c.E} x 3DF"),
            ("active / total", f"{p.active / p.total:.3f}", f"k/E = {c.k}/{c.E}")]
    return rows, {"params": {**dataclasses.asdict(p), "total": p.total, "active": p.active}}


def _flops(q: Question):
    c, p = q.cfg, moe.params(q.cfg)
    rows = [("FLOPs/token forward", fmt_si(2 * p.active, "FLOP"), "2*P_active (§5.4)"),
            ("FLOPs/token training", fmt_si(6 * p.active, "FLOP"), "6*P_active (§6.4)"),
            ("routed FLOPs/token", fmt_si(moe.routed_flops(c, 1), "FLOP"),
             "2*k*3DF*L_moe forward (§5.4)")]
    return rows, {"flops_per_token": {"forward": 2 * p.active, "train": 6 * p.active,
                                      "routed_forward": moe.routed_flops(c, 1)}}


# (label, bytes per weight, compute dtype or None for --dtype) for the critical batch rows
PRECISIONS = (("bf16 weights", 2, None), ("int8 weights, bf16 compute", 1, None),
              ("int8 weights and compute", 1, "int8"))


def _batch(q: Question):
    c, rows, data = q.cfg, [], {}
    for label, wb, dt in PRECISIONS:
        dtype = dt or q.dtype
        if dtype not in q.chip.dtypes:
            continue
        b = moe.critical_batch(c, q.chip, wb, dtype)
        rows.append((f"B_crit, {label}", f"{b:,.0f} tokens",
                     f"C*s_w/(2*W_hbm) * E/k = {b * c.k / c.E:,.0f} * {c.E / c.k:g} (§7.2, §5.4)"))
        data[label] = b
    return rows, {"critical_batch": data}


def _memory(q: Question):
    c, hbm = q.cfg, q.chip.hbm_bytes
    ex, rest = moe.shards(q.mesh)
    rows, data = [], {}
    for label, bpp in (("training, Adam", 10), ("serving, bf16", 2), ("serving, int8", 1)):
        routed, other = moe.weight_bytes_per_device(c, q.mesh, bpp)
        total = routed + other
        rows.append((f"memory/device {label}", f"{fmt_si(total, 'B')} "
                     f"({'fits' if total <= hbm else 'over'} {fmt_si(hbm, 'B')})",
                     f"{bpp}*(P_routed*ceil(E/Z)/E/{rest} + P_rest/{rest}) (§6.3)"))
        data[label] = {"routed_bytes": routed, "other_bytes": other, "total_bytes": total,
                       "fits": total <= hbm}
    kv = moe.kv_bytes_per_token(c)
    width = f"{c.kv_width} (MLA latent)" if c.kv_width else "2KH"
    rows.append(("KV per sequence", f"{fmt_si(kv * q.context, 'B')} at {q.context:,.0f} tokens",
                 f"{fmt_si(kv, 'B')}/token = L*{width}*2 (§5.3; MoE leaves it unchanged, §5.4)"))
    data.update(kv_bytes_per_token=kv, expert_shards=ex, other_shards=rest)
    return rows, {"memory": data}


def _a2a(q: Question):
    c, Bg = q.cfg, q.B_group
    groups = moe.expert_groups(q.mesh)
    rows, data = [("tokens per expert group", f"{Bg:,.0f}", "B/(data*fsdp)")], {}
    if q.system is not None:
        from harness.chip.network import describe

        rows.insert(0, ("network", q.system.name, describe(q.system)))
    for label, cap in (("ragged", None), ("padded", q.capacity)):
        V = moe.dispatch_bytes(Bg, c.k, c.D, 2, cap)
        t = moe.all_to_all(V, q.chip, q.Z, q.system, groups)
        where = ", ".join(f"{lv} {fmt_seconds(s)}" for lv, s in t.levels) or "no exchange"
        rows.append((f"dispatch per MoE layer, {label}", f"{fmt_seconds(t.seconds)} ({where})",
                     f"V = {'c*' if cap else ''}tokens*k*D*2 = {fmt_si(V, 'B')}; {t.formula}"))
        data[label] = {"nbytes": V, "seconds": t.seconds, "levels": dict(t.levels),
                       "all_gather_s": t.all_gather_s}
    t = data["ragged"]
    if t["all_gather_s"]:
        rows.append(("vs AllGather", f"{t['seconds'] / t['all_gather_s']:.2f}x",
                     "an all-to-all of V against an AllGather of V (TPU ring ~1/4, §5.4)"))
    layers = c.L_moe / q.mesh.get("stage", 1)
    step = 4 * layers * t["seconds"]
    rows.append(("all-to-alls per step", fmt_seconds(step),
                 f"4 (dispatch, combine; forward and backward) x {layers:g} MoE layers"))
    matmul = 2 * Bg * c.k * 3 * c.D * c.F / (q.Z * q.chip.flops_per_s(q.dtype))
    bound = "compute" if matmul > 2 * t["seconds"] else "comm"
    rows.append(("expert matmuls vs all-to-alls", f"{bound}: {fmt_seconds(matmul)} vs "
                 f"{fmt_seconds(2 * t['seconds'])}", "2*tokens*k*3DF/(Z*C) against dispatch "
                 "+ combine, per MoE layer forward (§5.4)"))
    data.update(per_step_s=step, expert_matmul_s=matmul, bound=bound, tokens=Bg)
    return rows, {"all_to_all": data}


def _ep(q: Question):
    """gpus.md's expert-parallel formula and DP/ZeRO threshold with MoE (§6.2)."""
    c, rows, data = q.cfg, [], {}
    X = q.mesh.get("data", 1) * q.mesh.get("fsdp", 1)
    need = moe.dp_min_tokens(c, q.chip, X, q.N // X, q.system, q.dtype)
    ok = q.B / X > need
    rule = ("B/X > (E/k)*C/W (gpus.md, §6.2)" if q.chip.kind == "gpu" else
            "B/X > (E/k)*alpha_ici/M_X (training.md with gpus.md's E/k, §6.2)")
    rows.append(("DP/ZeRO with MoE", f"{'compute' if ok else 'comm'}: B/X = {q.B / X:,.0f} "
                 f"{'>' if ok else '<='} {need:,.0f}", rule))
    data["dp"] = {"B_per_X": q.B / X, "need": need, "bound": "compute" if ok else "comm"}
    s = q.system
    if q.chip.kind == "gpu" and s is not None and len(s.levels) > 1:
        C, W, d = q.chip.flops_per_s(q.dtype), s.levels[1].bytes_per_s, s.domain
        tm = moe.ep_math_s(q.B_group, c.k, c.D, c.F, q.Z, C)
        tc = moe.ep_comms_s(q.B_group, c.k, c.D, q.Z, W, d)
        zmax, spans = moe.ep_max_Z(c.F, c.k, C, W, d), moe.ep_spans_nodes(c.F, C, W, d)
        rows += [("EP T_math", fmt_seconds(tm), "4*B*k*D*F/(Z*C) (gpus.md, §6.2)"),
                 ("EP T_comms", fmt_seconds(tc), f"4*B*D*(Z-{d})/(W_node*Z)*min({d}k/Z, 1)"),
                 ("EP verdict", f"{'compute' if tm > tc else 'comm'}-bound at Z={q.Z}; "
                  + (f"compute-bound while Z < {zmax:,.1f}" if math.isfinite(zmax) else
                     f"compute-bound at any Z (up to E={c.E})"),
                  f"F={c.F} {'>=' if spans else '<'} {d}*C/W_node={d * C / W:,.0f}: EP "
                  f"{'can span many nodes' if spans else 'stays within 1-2 nodes'}")]
        data["ep"] = {"t_math_s": tm, "t_comms_s": tc, "max_Z": zmax, "spans_nodes": spans,
                      "bound": "compute" if tm > tc else "comm"}
    return rows, data


# the answer's parts, in order: each gives (rows, data)
SECTIONS = (_params, _flops, _batch, _memory, _a2a, _ep)


def _config(args) -> moe.MoEConfig:
    cfg = moe.model(args.model)
    given = {f: num(f, getattr(args, f), True) for f in SHAPE if getattr(args, f) is not None}
    return dataclasses.replace(cfg, **given) if given else cfg


def _mesh(text: str | None, cfg: moe.MoEConfig) -> dict[str, int]:
    if text is None:
        return {"expert": min(cfg.E, 8)}
    try:
        m = parse_mesh(text)
    except MeshError as e:
        raise ValueError(f"--mesh {text!r}: {e.reason}") from None
    wrong = [n for n in m.names if n not in ROLES]
    if m.positional or wrong or "expert" not in m.names:
        raise ValueError(f"--mesh {text}: name the axes by role, an expert axis among them "
                         f"(data=2,expert=64; roles {', '.join(ROLES)})")
    return m.shape


def _system(args, chip: Chip, devices: int) -> System | None:
    """The declared network (--system, --nodes, --slices), else the chip's GPU cluster; None on
    one TPU slice (priced on its torus) or a GPU with no registered network (one node)."""
    from harness.chip import network
    from predictions import network as net

    d = network.declared(args)
    if d.given:
        return network.resolve(d, chip, devices)
    return net.default_system(chip) if chip.kind == "gpu" else None


def _moe(args) -> int:
    cfg = _config(args)
    chip = hardware.chip_entry(args.chip)
    mesh = _mesh(args.mesh, cfg)
    for flag in ("batch", "capacity", "context"):
        positive(f"--{flag}", num(flag, getattr(args, flag)))
    q = Question(cfg, chip, mesh, _system(args, chip, math.prod(mesh.values())),
                 num("batch", args.batch), num("capacity", args.capacity),
                 num("context", args.context), args.dtype)
    rows, data = [], {"model": args.model, "chip": chip.name, "mesh": mesh,
                      "system": q.system.name if q.system else None, "batch": q.B,
                      "capacity": q.capacity, "shape": dataclasses.asdict(cfg)}
    for section in SECTIONS:
        r, d = section(q)
        rows += r
        data.update(d)
    shape = f"E={cfg.E}, k={cfg.k}, D={cfg.D}, F={cfg.F}, L={cfg.L}"
    where = ",".join(f"{n}={s}" for n, s in mesh.items())
    return emit(args, Answer(f"moe {args.model} ({shape}) on {where} x {chip.name}", rows, data))


def add_moe(sub, common) -> None:
    p = sub.add_parser("moe", parents=[common],
                       help="mixture of experts: params, FLOPs, critical batch, memory, "
                            "all-to-alls, EP verdicts (docs/moe.md)")
    p.add_argument("--model", required=True, metavar="NAME",
                   help=f"one of {', '.join(moe.MODELS)}")
    for letter, what in SHAPE.items():
        p.add_argument(f"--{letter}", metavar="N", help=f"{letter}, {what} (default the model's)")
    p.add_argument("--chip", required=True, metavar="CHIP",
                   help=f"one of {', '.join(hardware.CHIPS)}")
    p.add_argument("--mesh", metavar=MESH_METAVAR,
                   help=f"axes by role ({', '.join(ROLES)}), e.g. data=2,expert=64 (default "
                        f"expert=min(E, 8)); the last axis fills a node first")
    p.add_argument("--batch", default="1048576", metavar="N",
                   help="global tokens per step through each MoE layer (default 1048576)")
    p.add_argument("--capacity", default="1.25", metavar="FACTOR",
                   help="capacity factor of the padded dispatch (default 1.25)")
    p.add_argument("--context", default="8192", metavar="N",
                   help="tokens cached per sequence, for the KV cache (default 8192)")
    p.add_argument("--dtype", default="bf16", metavar="DTYPE",
                   help="compute dtype (default bf16)")
    add_network(p)
    p.set_defaults(_run=_moe)
