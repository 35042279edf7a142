"""Why a collective exists, in the book's terms, and the book's fix: a registry of reasons.

Each :class:`Reason` says when it applies (the collective's kind and its ``site.Site``: the
matmul it feeds or is fed by), what it means (book.md §4.1's four cases, §6.1's schemes) and
the one-line fixes the book gives, if any. ``REASONS`` is tried in order; the first that
applies explains the collective (the last, "resharding", applies to every one). A fix is
offered only where the shapes can take it (:class:`Fix`): no reduce-scatter of a result no
dimension of which the group divides, no sharding of a weight dimension of size 1.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.explain import parallelism as par
from harness.explain.fused import SLICED
from harness.explain.site import Site


@dataclass(frozen=True)
class Facts:
    """What a reason reads: the collective's ``kind`` (``all-gather``, ...), the mesh ``axes``
    as text, its ``site``, whether it sits in a while loop's body (``in_loop``) beside a dot
    (``loop_has_dot``), the JAX operation it came from (``source_op``), the devices in each of
    its groups (``group``, 0: unknown), the entry parameters whose gradients it sums
    (``gradients``, ``site.gradients``), its result's dimensions (``dims``, its largest leaf),
    the non-contracting dimensions of the weight of the dot it reads (``weight_free``,
    ``site.free_dims``; None where unknown) and, priced on a network, the level that binds it
    (``level``, "crosses 32 nodes: leaf, 400 GB/s per node"; "" inside one node or slice);
    read from the dataflow (``harness.explain.dataflow``): the permute's place in a collective
    matmul's ring (``ring``) and an all-reduce each device slices (``sliced``: the program
    asked for a reduce-scatter); an all-gather of a weight whose gradient the same program
    reduces over the same axes (``fsdp``); a permute that hands a stage's output to the next
    along one mesh axis (``stage_axis``, ``dataflow.stage``), an MoE all-to-all's role
    ("dispatch" or "combine", ``expert``), the iterations of a loop that gathers the same
    weight in each (``regathered``); the TPU fusion it is (``fused``, ``fused.note``); its
    result's bytes and element type on one device (``nbytes``, ``dtype``)."""

    kind: str
    axes: str
    site: Site
    in_loop: bool = False
    loop_has_dot: bool = False
    source_op: str = ""
    group: int = 0  # devices in each of its groups (0: unknown)
    gradients: tuple[str, ...] = ()
    dims: tuple[int, ...] | None = None
    weight_free: tuple[int, ...] | None = None
    level: str = ""
    ring: str = ""  # "gather"/"scatter": a step of a collective matmul's ring (dataflow.ring)
    sliced: str = ""  # "slice"/"block": a reduce-scatter lowered so (dataflow.sliced)
    fsdp: bool = False  # a gathered weight whose gradient the program reduces over its axes
    stage_axis: str = ""  # the axis a pipeline's stage transfer shifts along
    expert: str = ""  # "dispatch" / "combine": an MoE all-to-all (dataflow.expert_role)
    regathered: int = 0  # iterations of a loop gathering the same weight in each
    megatron: bool = False  # the row-parallel half of Megatron's pair (megatron.megatron)
    handoff: bool = False  # a permute handing on an all-reduced block (dataflow.hands_block)
    fused: str = ""  # "; XLA:TPU runs it as one all-reduce-scatter fusion ..." (fused.note)
    nbytes: float = 0.0
    dtype: str = ""

    @property
    def gradient(self) -> bool:
        """It sums weight gradients: backward-pass values shaped like parameters."""
        return bool(self.gradients)

    @property
    def over(self) -> str:
        return f"over {self.axes}" if self.axes else "within each group"

    @property
    def operand(self) -> str:
        what = f", {self.site.parameter}," if self.site.parameter else ""
        return f"the {self.site.side} operand of {self.dot}{what}"

    @property
    def value(self) -> str:
        """What was gathered: the parameter's name, else "the value"."""
        return self.site.parameter or "the value"

    @property
    def dot(self) -> str:
        return f"%{self.site.dot.name}" if self.site.dot is not None else "the dot"

    def splits(self, sizes: tuple[int, ...] | None) -> bool:
        """Some dimension of ``sizes`` can be split over the group: the group divides it (a
        dimension above 1 where the group is unknown); True where the sizes are unknown."""
        if sizes is None:
            return True
        return any(d > 1 and (d % self.group == 0 if self.group > 1 else True) for d in sizes)


def _scatters(f: Facts) -> bool:
    """The result can be reduce-scattered over the group, and the program does not already
    ask for that (an all-reduce each device slices is a reduce-scatter lowered so)."""
    return not f.sliced and f.splits(f.dims)


def _weight_splits(f: Facts) -> bool:
    """The weight has a non-contracting dimension the group can split; not Megatron's yet."""
    return not f.megatron and f.splits(f.weight_free)


@dataclass(frozen=True)
class Fix:
    """One of the book's fixes and whether the collective's shapes can take it."""

    text: str
    fits: Callable[[Facts], bool] = lambda f: True


@dataclass(frozen=True)
class Reason:
    """``name`` (the table's short reason), ``applies(facts)``, ``why(facts)`` (one sentence,
    citing the chapter) and ``fixes`` (the book's fixes, each where the shapes take it; none
    where none is needed)."""

    name: str
    applies: Callable[[Facts], bool]
    why: Callable[[Facts], str]
    fixes: tuple[Fix, ...] = ()

    def fix(self, facts: Facts) -> str:
        """The fixes that fit, as one line ("" for none)."""
        return ", or ".join(x.text for x in self.fixes if x.fits(facts))


def _reads_dot(f: Facts) -> bool:
    return f.site.dot is not None and f.site.side == "output"


def _feeds_dot(f: Facts, dim: str | None = None) -> bool:
    return (f.kind == "all-gather" and f.site.dot is not None and f.site.side != "output"
            and (dim is None or f.site.dim == dim))


def _summed(f: Facts) -> str:
    return "summed" if f.kind == "all-reduce" else "summed and scattered"


def _of(f: Facts) -> str:
    """``of params['w1'], params['w2']`` (three named at most): the parameters whose
    gradients it sums."""
    shown = ", ".join(f.gradients[:3])
    return f"of {shown}" + (f" and {len(f.gradients) - 3} more" if len(f.gradients) > 3 else "")


_RING = {"gather": "of a chunk each device multiplies before passing it on (the AllGather "
                   "form)",
         "scatter": "of a sum of partial matmuls, added to the next one (the ReduceScatter "
                    "form)",
         "": "inside a loop of partial matmuls"}

def _padded(f: Facts) -> bool:
    """The all-to-all moves capacity-padded slots (a ragged one moves the tokens alone)."""
    return "ragged" not in f.source_op


def _crosses(f: Facts) -> bool:
    """Not priced inside one node or slice (unknown, or crossing a slower level)."""
    return not f.level.startswith("within")


def _always(f: Facts) -> bool:
    return True


_EXPERT_FIXES = tuple(Fix(t, _padded if "capacity" in t else _crosses if "inside" in t
                          else _always) for t in par.EXPERT_FIXES)

REASONS: tuple[Reason, ...] = (
    # §4.2: a collective over one device moves nothing over a link
    Reason("one device",
           lambda f: f.group == 1,
           lambda f: f"every group of this {f.kind} is one device: nothing crosses a link, "
                     f"XLA runs it as a local copy (a collective over a mesh axis of size 1, or "
                     f"a program compiled for one device; book §4.2's cost is zero)",
           (Fix("leave the collective out where its axis has one device (it still reads and "
                "writes its whole buffer)"),)),
    # §6.1 "pipeline", §6.2 (gpus.md): one microbatch's activations from a stage to the next
    Reason("stage transfer",
           lambda f: f.kind == "collective-permute" and bool(f.stage_axis),
           par.stage_why),
    # §5.4, gpus.md "Expert parallelism": an MoE layer's two all-to-alls
    Reason("expert dispatch",
           lambda f: f.kind == "all-to-all" and f.expert == "dispatch",
           par.expert_why, _EXPERT_FIXES),
    Reason("expert combine",
           lambda f: f.kind == "all-to-all" and f.expert == "combine",
           par.expert_why, _EXPERT_FIXES),
    # §6.2: ZeRO-3 inside a microbatch loop gathers each weight once per microbatch
    Reason("weight gathered per microbatch",
           lambda f: f.regathered > 1 and _feeds_dot(f),
           par.regather_why, (Fix(par.REGATHER_FIX),)),
    # §6.1: data parallelism sums each weight's gradient over the batch shards
    Reason("gradient reduction",
           lambda f: f.kind in ("all-reduce", "reduce-scatter") and f.gradient,
           lambda f: f"the weight gradients {_of(f)}: each device's partial sums over its "
                     f"shard of the batch, {_summed(f)} {f.over} (book §6.1, the data-parallel "
                     f"/ FSDP backward pass)",
           (Fix("reduce-scatter the gradients and shard the optimizer state (ZeRO / FSDP, "
                "§6.1)", lambda f: f.kind == "all-reduce" and _scatters(f)),
            Fix("overlap it with the rest of the backward pass (§6.1)"))),
    # §4.1 case 3 with the result replicated
    Reason("case 3: partial sums",
           lambda f: f.kind == "all-reduce" and _reads_dot(f),
           lambda f: f"{f.dot} contracts over a dimension sharded {f.over} in both operands: "
                     f"each device holds partial sums, all-reduced {f.over} (book §4.1 case 3)",
           (Fix("reduce-scatter instead when the next op can take the result sharded (half "
                "the bytes)", _scatters),
            Fix("shard the weight's non-contracting dimension (Megatron TP, §6.1)",
                _weight_splits))),
    # §4.1 case 3 with the result sharded
    Reason("case 3: partial sums, scattered",
           lambda f: f.kind == "reduce-scatter" and _reads_dot(f),
           lambda f: f"{f.dot} contracts over a dimension sharded {f.over} in both operands: "
                     f"partial sums reduce-scattered {f.over} (book §4.1 case 3)",
           (Fix("overlap it with the next matmul (collective matmul, §4.1)"),)),
    # §6.1 FSDP / ZeRO-3: weights stored sharded, gathered just in time, gradients scattered
    Reason("FSDP weight gather",
           lambda f: f.fsdp and _feeds_dot(f),
           lambda f: f"the weight {f.value} is stored sharded {f.over} and gathered whole for "
                     f"{f.dot}; its gradient is reduced back {f.over} in the same program "
                     f"(FSDP / ZeRO-3, book §6.1)",
           (Fix("it pays while the batch per chip stays above the critical batch (book §6.2: "
                "B/X > alpha/M_X tokens); below it keep the weight replicated (data "
                "parallel) or shard it over a tensor-parallel axis"),)),
    # §4.1 case 2
    Reason("case 2: operand gathered",
           lambda f: _feeds_dot(f, "contracting"),
           lambda f: f"{f.operand} is sharded on its contracting dimension {f.over}: gathered "
                     f"before the local matmul (book §4.1 case 2)",
           (Fix("shard the other operand's contracting dimension on the same axis (partial "
                "sums, case 3) or overlap the gather with the matmul (collective matmul); a "
                "weight gathered so (FSDP, §6.1) pays off only above the critical batch per "
                "chip (§6.2)"),)),
    # §4.1 case 4
    Reason("case 4: same axis on both",
           lambda f: _feeds_dot(f, "non-contracting") or _feeds_dot(f, "batch"),
           lambda f: f"{f.operand} is sharded {f.over} on a non-contracting dimension, as the "
                     f"other operand is: the output cannot keep both, one is gathered (book "
                     f"§4.1 case 4)",
           (Fix("shard the two operands' non-contracting dimensions on different axes (case "
                "1: no communication)"),)),
    Reason("operand gathered",
           lambda f: _feeds_dot(f),
           lambda f: f"{f.operand} of a matmul is gathered {f.over} (book §4.1 cases 2/4)",
           (Fix("shard the operands so the matmul's contracting dimension is local (case "
                "1)"),)),
    # §4.1 (`jax-stuff.md`): a collective matmul shifts chunks around a ring between partial
    # matmuls, unrolled or in a loop
    Reason("collective matmul ring",
           lambda f: f.kind == "collective-permute" and bool(f.ring or f.in_loop
                                                             and f.loop_has_dot),
           lambda f: f"a ring shift {f.over} {_RING.get(f.ring, _RING[''])}: a collective "
                     f"matmul overlapping the communication with the partial matmuls (book "
                     f"§4.1, the `jax-stuff.md` collective matmul)"),
    # §4.2: the second half of a reduce-scatter XLA:TPU lowered as a block's all-reduce
    Reason("reduced block handed on",
           lambda f: f.kind == "collective-permute" and f.handoff,
           lambda f: f"hands each device's all-reduced block of the sum to the device that "
                     f"keeps it {f.over}: with the all-reduce before it, the reduce-scatter the "
                     f"program asked for, as XLA:TPU lowered it (book §4.2)"),
    # §4.2: AllToAll moves a sharding from one dimension to another
    Reason("resharding (all-to-all)",
           lambda f: f.kind == "all-to-all",
           lambda f: f"moves the sharding {f.over} from one dimension to another (book §4.2 "
                     f"AllToAll, a quarter of an AllGather's time)",
           (Fix("give producer and consumer the same layout (with_sharding_constraint), or "
                "keep it: it is the cheapest collective"),)),
    # §4.2: an AllGather that makes a value whole for an elementwise op (a sharded bias)
    Reason("gathered for an elementwise op",
           lambda f: f.kind == "all-gather" and f.site.dot is None and bool(f.site.consumer),
           lambda f: f"{f.value} is gathered {f.over} for {f.site.consumer}, which combines it "
                     f"with data laid out otherwise (book §4.2 AllGather)",
           (Fix("lay it out as the value it is combined with (its argument's sharding, or "
                "with_sharding_constraint): a vector as small as a bias can stay "
                "replicated"),)),
    Reason("reduction of sharded data",
           lambda f: f.kind in ("all-reduce", "reduce-scatter"),
           lambda f: f"a sum (or max) over data sharded {f.over}: {f.kind} of each device's "
                     f"part (book §4.2)",
           (Fix("reduce-scatter instead of all-reduce when the result can stay sharded",
                lambda f: f.kind == "all-reduce" and _scatters(f)),)),
    Reason("resharding",
           lambda f: True,
           lambda f: f"the consumer wants another layout than the producer made: a {f.kind} "
                     f"{f.over} to reshard (book §4.1, §4.2)",
           (Fix("give producer and consumer the same sharding (with_sharding_constraint)"),)),
)


def explain(facts: Facts) -> tuple[str, str, str]:
    """(reason name, why, fix) of the first reason in ``REASONS`` that applies; the fix is the
    book's fixes that the collective's shapes can take ("" for none)."""
    reason = next(r for r in REASONS if r.applies(facts))
    # past one node or slice: the level its groups cross and the one that binds
    level = f"; {facts.level} (docs/networks.md)" if facts.level else ""
    lowered = SLICED[facts.sliced].format(over=facts.over) if facts.sliced else ""
    return reason.name, reason.why(facts) + lowered + facts.fused + level, reason.fix(facts)
