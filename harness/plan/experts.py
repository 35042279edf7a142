"""Expert layouts in ``harness plan`` (a MoE config, E > 0): Z, the other axes and the capacity
factor searched within the memory that fits, priced by the book (``experts_book.price``).

Every split of the N chips into (stage) x (data or fsdp) x expert Z x model Y of the layouts
asked (``dp``, ``fsdp``, ``tp``, ``fsdp_tp`` with Z = 1; ``ep``, ``dp_ep``, ``ep+fsdp``,
``ep+tp``, ``ep+fsdp_tp``; ``pp+dp_ep``, DeepSeek-V3's), Z a power of two dividing E, Y one
dividing the heads within a GPU node or up to 16 on a TPU slice, the sequences divisible by
the ranks that split them, at each capacity factor of ``CAPACITIES`` (None: dropless). The
mesh is row-major stage, data, fsdp, expert, model: the expert group inside the data replicas,
spanning as few nodes as it can. Options past the HBM are pruned; the rest ranked by the book's
step (a tie to the dropless, which drops nothing); the best of each layout shown, the best with
an expert axis and the best overall compiled. The workload builds no pipelined MoE step
(``workloads.llama.moe_step.check``): ``pp+dp_ep`` is priced by the book only.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from harness import schema
from harness.errors import HarnessError
from harness.plan.experts_book import PUBLISHED, ExpertPriced, moe_config, price, spans_rule
from harness.plan.layouts import PLANNABLE, Candidate, n_ckpt
from harness.plan.pipeline import BOOK_BYTES, BUBBLE, MICROBATCHES, SCHEDULE, STAGES, tp_degrees
from harness.units import fmt_decimal_bytes, fmt_seconds
from predictions.hardware import Chip
from predictions.network import System
from predictions.topology import spans

CAPACITIES: tuple[float | None, ...] = (1.0, 1.25, 2.0, None)  # None: dropless (ragged)
ORDER = ("stage", "data", "fsdp", "expert", "model")  # the mesh, row-major
# layout -> its roles (in ORDER); the dense ones with Z = 1
ROLES: dict[str, tuple[str, ...]] = {
    "dp": ("data",), "fsdp": ("fsdp",), "tp": ("model",), "fsdp_tp": ("fsdp", "model"),
    "ep": ("expert",), "dp_ep": ("data", "expert"), "ep+fsdp": ("fsdp", "expert"),
    "ep+tp": ("expert", "model"), "ep+fsdp_tp": ("fsdp", "expert", "model"),
    "pp+dp_ep": ("stage", "data", "expert"),
}
DEFAULT = tuple(ROLES)
STAGE_COUNTS = (2, 4, 8, 16)  # S tried for pp+dp_ep (DeepSeek-V3: 16)
SHOWN = len(ROLES)           # rows in the table: the best of each layout
COMPILED = 2                 # compiled: the best with an expert axis, the best overall
# the expert rows' own columns (beside schema.PLAN)
Z_COL, CAPACITY, A2A, LEVEL = "expert_Z", "capacity", "all_to_all_s", "a2a_level"
COLUMNS = (Z_COL, CAPACITY, A2A, LEVEL)
DROPLESS = "dropless"


@dataclass(frozen=True)
class Option:
    """One expert layout: its mesh by role, the capacity factor, M microbatches (pipelined)."""

    layout: str
    mesh: tuple[tuple[str, int], ...]
    capacity: float | None
    priced: ExpertPriced
    M: int = 1

    @property
    def step_s(self) -> float:
        return self.priced.step_s

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.mesh)


@dataclass
class Search:
    kept: list[Option]
    tried: int
    over_memory: int
    budget: float
    least: Option | None = None
    spans_rule: str = ""
    every: list[Option] = field(default_factory=list)  # kept and pruned, by the book's step
    none: list[str] = field(default_factory=list)  # layouts with no option on these chips

    def note(self) -> str:
        said = (f"expert layouts: {self.tried} options (layout x Z x the other axes x capacity "
                f"{', '.join(capacity_text(c) for c in CAPACITIES)}) priced by the book, "
                f"{self.over_memory} past {fmt_decimal_bytes(self.budget)} of HBM pruned")
        if not self.kept and self.least is not None:
            said += (f"; none fits: the least needs "
                     f"{fmt_decimal_bytes(self.least.priced.need_bytes)} a chip")
        if self.none:
            said += (f"; no option of {', '.join(self.none)}: the ranks splitting the batch "
                     f"must divide its sequences, Z the experts E, fsdp x model the width D")
        return said + (f"; {self.spans_rule}" if self.spans_rule else "")

    def rank_of(self, layout: str, shape: Mapping[str, int]) -> tuple[int, Option] | None:
        """The place (1-based, among those that fit) of the best option of ``layout`` on a
        mesh of ``shape`` (any capacity), and that option; None when none fits."""
        for i, o in enumerate(self.kept, 1):
            if o.layout == layout and o.shape == dict(shape):
                return i, o
        return None


def capacity_text(c: float | None) -> str:
    return DROPLESS if c is None else f"{c:g}"


def _meshes(name: str, N: int, cfg, chip: Chip, system: System | None
            ) -> Iterator[dict[str, int]]:
    """Each mesh (role -> size, row-major) of layout ``name`` on N chips."""
    roles = ROLES[name]
    zs = [z for z in (2 ** i for i in range(1, int(math.log2(N)) + 1))
          if cfg.E % z == 0 and N % z == 0] if "expert" in roles else [1]
    ys = [y for y in tp_degrees(cfg, chip, N, system) if y > 1] if "model" in roles else [1]
    ss = [s for s in STAGE_COUNTS if s <= cfg.L] if "stage" in roles else [1]
    for S in ss:
        for Z in zs:
            for Y in ys:
                rest = N // (S * Z * Y) if N % (S * Z * Y) == 0 else 0
                outer = [r for r in roles if r in ("data", "fsdp")]
                if rest < 1 or (outer and rest < 2) or (not outer and rest != 1):
                    continue
                if "fsdp" in roles and cfg.D % (rest * Y):  # FSDP splits D over fsdp x model
                    continue
                size = {"stage": S, "expert": Z, "model": Y, **{r: rest for r in outer}}
                yield {r: size[r] for r in ORDER if r in roles}


def search(cfg, chip: Chip, topology: Sequence[int], system: System | None,
           names: Sequence[str]) -> Search:
    """Every option of the expert ``names`` on the ``prod(topology)`` chips, priced; those
    within the chip's HBM kept, fastest by the book first (a tie to the dropless)."""
    N, tokens = math.prod(topology), cfg.B * cfg.T
    mcfg, model = moe_config(cfg), PLANNABLE["llama_train"](cfg)
    every, kept, over = [], [], 0
    for name in names:
        for mesh in _meshes(name, N, cfg, chip, system):
            ranks = math.prod(n for r, n in mesh.items() if r in ("data", "fsdp", "expert"))
            if cfg.B % ranks:
                continue
            # 1F1B holds S microbatches whatever M: the most microbatches (one sequence each)
            # give the smallest bubble and memory by the book (gpus.md)
            Ms = [cfg.B // ranks]
            for M in Ms:
                for cap in CAPACITIES:
                    p = price(mcfg, model, mesh, tokens, cfg.T, chip, topology, system, cap,
                              n_ckpt(cfg), M, "1f1b" if "stage" in mesh else "gpipe")
                    o = Option(name, tuple(mesh.items()), cap, p, M)
                    every.append(o)
                    if p.need_bytes > chip.hbm_bytes:
                        over += 1
                    else:
                        kept.append(o)
    key = lambda o: (o.step_s, o.capacity is not None, o.capacity or 0)  # noqa: E731
    kept.sort(key=key)
    every.sort(key=key)
    least = min(every, key=lambda o: o.priced.need_bytes) if every else None
    none = [n for n in names if n not in {o.layout for o in every}]
    return Search(kept, len(every), over, chip.hbm_bytes, least, spans_rule(mcfg, chip, system),
                  every, none)


def best(found: Search, shown: int = SHOWN) -> list[Option]:
    out, seen = [], set()
    for o in found.kept:
        if o.layout not in seen:
            seen.add(o.layout)
            out.append(o)
    return out[:shown]


def candidate(o: Option, rank: int, of: int, compile_: bool, topology: Sequence[int]
              ) -> Candidate:
    """The plan's candidate of option ``o`` (the ``rank``-th of ``of`` kept)."""
    m = spans(tuple(n for _, n in o.mesh), topology)
    m_x = max((k for (r, _), k in zip(o.mesh, m) if r != "model"), default=1)
    m_y = m[-1] if o.mesh[-1][0] == "model" else 1
    X = math.prod(n for r, n in o.mesh if r != "model")
    note = (f"expert layout {rank} of {of} that fit, by the book's step" if rank else
            f"no {o.layout} option fits: the one needing the least memory")
    if "stage" in o.shape:
        note += "; a pipelined MoE step is not built by the workload: the book's price only"
        compile_ = False
    return Candidate(o.layout, X, o.shape.get("model", 1), m_x, m_y, note,
                     microbatches=o.M, compile=compile_, roles=o.mesh, capacity=o.capacity)


def book_row(cand: Candidate, cfg, chip: Chip, topology: Sequence[int],
             system: System | None) -> dict:
    """The book's columns of an expert row: the expert part's verdict (gpus.md: the routed
    matmuls against the all-to-alls at the level they cross), the step and the memory."""
    mesh = dict(cand.roles)
    p = price(moe_config(cfg), PLANNABLE["llama_train"](cfg), mesh, cfg.B * cfg.T, cfg.T,
              chip, topology, system, cand.capacity, n_ckpt(cfg), cand.microbatches,
              "1f1b" if "stage" in mesh else "gpipe")
    Z = mesh.get("expert", 1)
    if Z > 1:
        op = ">=" if p.bound == "compute" else "<"
        cond = (f"expert matmuls c*T_math={fmt_seconds(p.expert_math_s)} {op} all-to-alls "
                f"{fmt_seconds(p.a2a_s)} at {p.a2a_level}")
    else:
        cond = f"no expert axis: expert matmuls {fmt_seconds(p.expert_math_s)}, no all-to-all"
    stage = {}
    if "stage" in mesh:
        cond += f"; bubble {p.bubble:.1%}"
        stage = {STAGES: mesh["stage"], MICROBATCHES: cand.microbatches, SCHEDULE: "1f1b",
                 BUBBLE: p.bubble}
    return {**stage, schema.BOOK_CONDITION: cond, schema.BOOK_BOUND: p.bound,
            schema.ANALYTIC_S: p.step_s, BOOK_BYTES: p.need_bytes,
            Z_COL: Z, CAPACITY: capacity_text(cand.capacity), A2A: p.a2a_s,
            LEVEL: p.a2a_level if Z > 1 else "-"}


def expert_sets(cand: Candidate) -> dict[str, str]:
    """The config fields an expert candidate runs with: the capacity factor (dropless: the
    ragged grouped matmuls), and the layout (a pipelined one as dp_ep: never compiled)."""
    dropless = cand.capacity is None
    return {"parallelism": "dp_ep" if "stage" in dict(cand.roles) else cand.layout,
            "experts_impl": "ragged" if dropless else "capacity",
            "capacity_factor": "0" if dropless else f"{cand.capacity:g}"}


def names(given: Sequence[str]) -> list[str]:
    """The layouts a MoE config ranks: those given, or ``DEFAULT`` when ``given`` is the
    dense default (``harness.plan.layouts.check_layouts`` with none asked)."""
    from harness.plan.layouts import PIPELINED
    from predictions.layouts import planned

    return list(DEFAULT) if list(given) == [*planned(), *PIPELINED] else list(given)


def check_dense(given: Sequence[str]) -> None:
    """A dense config (E = 0) has no expert layout to rank: one line when one is asked."""
    wrong = [n for n in given if "expert" in ROLES.get(n, ())]
    if wrong:
        raise HarnessError(f"layout {', '.join(wrong)}: expert layouts need a MoE config "
                           f"(E > 0: --preset tiny_moe, mixtral_8x7b, deepseek_v3, "
                           f"llama4_maverick, or --set E=...); valid here: dp, fsdp, tp, "
                           f"fsdp_tp, dp_tp and the pipelines pp, pp+tp, pp+dp_tp")


def check_names(names: Sequence[str]) -> list[str]:
    """The layouts a MoE config can rank: ``ROLES``'s (one line naming them otherwise)."""
    wrong = [n for n in names if n not in ROLES]
    if wrong:
        raise HarnessError(f"layout {', '.join(wrong)}: not an expert layout plan ranks for a "
                           f"MoE config (E > 0; the workload builds no pipelined MoE step, "
                           f"pp+dp_ep is the book's price only); valid: {', '.join(ROLES)}")
    return list(names)


def published(found: Search, preset: str, topology: Sequence[int]
              ) -> tuple[Candidate | None, str]:
    """The preset's published layout (``PUBLISHED``) where the chips match: its row and a
    line saying where it ranks and why (the book's expert verdict)."""
    if preset not in PUBLISHED:
        return None, ""
    layout, shape, said = PUBLISHED[preset]
    if math.prod(shape.values()) != math.prod(topology):
        return None, ""
    at = found.rank_of(layout, shape)
    if at is None:
        return None, f"{said}: not among the layouts that fit"
    rank, o = at
    p, first = o.priced, found.kept[0]
    why = (f"all-to-alls {fmt_seconds(p.a2a_s)} at {p.a2a_level} against expert matmuls "
           f"{fmt_seconds(p.expert_math_s)}: comm-bound" if p.bound == "comm" else
           f"expert matmuls {fmt_seconds(p.expert_math_s)} hide the all-to-alls "
           f"{fmt_seconds(p.a2a_s)}")
    return (candidate(o, rank, len(found.kept), False, topology),
            f"{said}: {rank} of {len(found.kept)} that fit by the book's step, "
            f"{fmt_seconds(o.step_s)} against the best {fmt_seconds(first.step_s)} "
            f"({first.layout} {dict(first.mesh)}); {why}; node-limited routing and DualPipe's "
            f"overlap of the all-to-alls are not modelled")


def plan_candidates(cfg, chip: Chip, topology: Sequence[int], system: System | None,
                    names: Sequence[str], compile_: bool, preset: str = ""
                    ) -> tuple[list[Candidate], str]:
    """``harness plan``'s candidates for a MoE config: the best option of each layout, the
    first ``COMPILED`` compiled when ``compile_``, and a note on the search."""
    found = search(cfg, chip, topology, system, check_names(names))
    if not found.tried:
        raise HarnessError(f"layout {', '.join(names)}: no split of the {math.prod(topology)} "
                           f"chips fits E={cfg.E} experts and B={cfg.B} sequences; valid: a "
                           f"power-of-two Z dividing E and the chips, B divisible by the ranks")
    chosen = best(found)
    first_ep = next((o for o in chosen if "expert" in o.shape and "stage" not in o.shape), None)
    picks = [first_ep] if first_ep is not None else []
    if chosen and chosen[0] is not first_ep:
        picks = [*picks, chosen[0]][:COMPILED]
    out = [candidate(o, found.kept.index(o) + 1, len(found.kept),
                     compile_ and any(o is p for p in picks), topology) for o in chosen]
    shown = {c.layout for c in out}
    for name in dict.fromkeys(o.layout for o in found.every):  # none fits: the least memory
        if name not in shown:
            least = min((o for o in found.every if o.layout == name),
                        key=lambda o: o.priced.need_bytes)
            out.append(candidate(least, 0, 0, False, topology))
    row, line = published(found, preset, topology)
    if row is not None and all(c.roles != row.roles for c in out):
        out.append(row)
    return out, found.note() + (f"\n{line}" if line else "")
