"""Why a collective exists, in the book's terms, and the book's fix: a registry of reasons.

Each :class:`Reason` says when it applies (the collective's kind and its ``site.Site``: the
matmul it feeds or is fed by), what it means (book.md §4.1's four cases, §6.1's schemes) and
the one-line fix the book gives, if any. ``REASONS`` is tried in order; the first that applies
explains the collective (the last, "resharding", applies to every one).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.explain.site import Site


@dataclass(frozen=True)
class Facts:
    """What a reason reads: the collective's ``kind`` (``all-gather``, ...), the mesh ``axes``
    as text, its ``site``, whether it sits in a while loop's body (``in_loop``) beside a dot
    (``loop_has_dot``), and the JAX operation it came from (``source_op``)."""

    kind: str
    axes: str
    site: Site
    in_loop: bool = False
    loop_has_dot: bool = False
    source_op: str = ""
    group: int = 0  # devices in each of its groups (0: unknown)

    @property
    def gradient(self) -> bool:
        """The dot is a backward-pass one: JAX names those ``transpose(jvp(...))``."""
        return "transpose(" in self.site.dot_op_name

    @property
    def over(self) -> str:
        return f"over {self.axes}" if self.axes else "within each group"

    @property
    def operand(self) -> str:
        what = f", parameter {self.site.parameter!r}" if self.site.parameter else ""
        return f"the {self.site.side} operand of {self.dot}{what}"

    @property
    def dot(self) -> str:
        return f"%{self.site.dot.name}" if self.site.dot is not None else "the dot"


@dataclass(frozen=True)
class Reason:
    """``name`` (the table's short reason), ``applies(facts)``, ``why(facts)`` (one sentence,
    citing the chapter) and ``fix`` (the book's one-line fix; "" where none is needed)."""

    name: str
    applies: Callable[[Facts], bool]
    why: Callable[[Facts], str]
    fix: str


def _reads_dot(f: Facts) -> bool:
    return f.site.dot is not None and f.site.side == "output"


def _feeds_dot(f: Facts, dim: str | None = None) -> bool:
    return (f.kind == "all-gather" and f.site.dot is not None and f.site.side != "output"
            and (dim is None or f.site.dim == dim))


REASONS: tuple[Reason, ...] = (
    # §4.2: a collective over one device moves nothing over a link
    Reason("one device",
           lambda f: f.group == 1,
           lambda f: f"every group of this {f.kind} is one device: nothing crosses a link, "
                     f"XLA runs it as a local copy (a collective over a mesh axis of size 1, or "
                     f"a program compiled for one device; book §4.2's cost is zero)",
           "leave the collective out where its axis has one device (it still reads and writes "
           "its whole buffer)"),
    # §6.1: data parallelism sums each weight's gradient over the batch shards
    Reason("gradient reduction",
           lambda f: f.kind in ("all-reduce", "reduce-scatter") and _reads_dot(f)
           and f.gradient,
           lambda f: f"a weight gradient's partial sums over the batch sharded {f.over}: "
                     f"{f.kind} {f.over} (book §6.1, data parallel / FSDP backward)",
           "reduce-scatter the gradients and keep the optimizer state sharded (FSDP/ZeRO, "
           "§6.1), overlapped with the backward pass"),
    # §4.1 case 3 with the result replicated
    Reason("case 3: partial sums",
           lambda f: f.kind == "all-reduce" and _reads_dot(f),
           lambda f: f"{f.dot} contracts over a dimension sharded {f.over} in both operands: "
                     f"each device holds partial sums, all-reduced {f.over} (book §4.1 case 3)",
           "reduce-scatter instead when the next op can take the result sharded (half the "
           "bytes), or shard the weight's non-contracting dimension (Megatron TP, §6.1)"),
    # §4.1 case 3 with the result sharded
    Reason("case 3: partial sums, scattered",
           lambda f: f.kind == "reduce-scatter" and _reads_dot(f),
           lambda f: f"{f.dot} contracts over a dimension sharded {f.over} in both operands: "
                     f"partial sums reduce-scattered {f.over} (book §4.1 case 3)",
           "overlap it with the next matmul (collective matmul, §4.1)"),
    # §4.1 case 2
    Reason("case 2: operand gathered",
           lambda f: _feeds_dot(f, "contracting"),
           lambda f: f"{f.operand} is sharded on its contracting dimension {f.over}: gathered "
                     f"before the local matmul (book §4.1 case 2)",
           "shard the other operand's contracting dimension on the same axis (partial sums, "
           "case 3) or overlap the gather with the matmul (collective matmul); a weight "
           "gathered so (FSDP, §6.1) pays off only above the critical batch per chip (§6.2)"),
    # §4.1 case 4
    Reason("case 4: same axis on both",
           lambda f: _feeds_dot(f, "non-contracting") or _feeds_dot(f, "batch"),
           lambda f: f"{f.operand} is sharded {f.over} on a non-contracting dimension, as the "
                     f"other operand is: the output cannot keep both, one is gathered (book "
                     f"§4.1 case 4)",
           "shard the two operands' non-contracting dimensions on different axes (case 1: "
           "no communication)"),
    Reason("operand gathered",
           lambda f: _feeds_dot(f),
           lambda f: f"{f.operand} of a matmul is gathered {f.over} (book §4.1 cases 2/4)",
           "shard the operands so the matmul's contracting dimension is local (case 1)"),
    # §4.1: a collective matmul shifts chunks around a ring inside a loop of partial matmuls
    Reason("collective matmul ring",
           lambda f: f.kind == "collective-permute" and f.in_loop and f.loop_has_dot,
           lambda f: f"a ring shift {f.over} inside a loop of partial matmuls: a collective "
                     f"matmul overlapping communication with compute (book §4.1)",
           ""),
    # §4.2: AllToAll moves a sharding from one dimension to another
    Reason("resharding (all-to-all)",
           lambda f: f.kind == "all-to-all",
           lambda f: f"moves the sharding {f.over} from one dimension to another (book §4.2 "
                     f"AllToAll, a quarter of an AllGather's time)",
           "give producer and consumer the same layout (with_sharding_constraint), or keep "
           "it: it is the cheapest collective"),
    Reason("reduction of sharded data",
           lambda f: f.kind in ("all-reduce", "reduce-scatter"),
           lambda f: f"a sum (or max) over data sharded {f.over}: {f.kind} of each device's "
                     f"part (book §4.2)",
           "reduce-scatter instead of all-reduce when the result can stay sharded"),
    Reason("resharding",
           lambda f: True,
           lambda f: f"the consumer wants another layout than the producer made: a {f.kind} "
                     f"{f.over} to reshard (book §4.1, §4.2)",
           "give producer and consumer the same sharding (with_sharding_constraint)"),
)


def explain(facts: Facts) -> tuple[str, str, str]:
    """(reason name, why, fix) of the first reason in ``REASONS`` that applies."""
    reason = next(r for r in REASONS if r.applies(facts))
    return reason.name, reason.why(facts), reason.fix
