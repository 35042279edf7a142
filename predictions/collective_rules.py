"""Cost rules of the collectives (`sharding.md`): all-gather, reduce-scatter, all-reduce,
all-to-all, collective-permute, their async ``-start``/``-done`` halves, and send/recv;
``predictions.rules.RULES`` holds them beside the other opcodes' rules."""
from __future__ import annotations

from collections.abc import Callable

from predictions.costs import Cost, OpDesc, Shape

Rule = Callable[[OpDesc], Cost]


def _outputs(op: OpDesc) -> tuple[Shape, ...]:
    # "-start" forms return (operands..., outputs...) as one tuple; keep the outputs
    if op.opcode.endswith("-start") and len(op.results) > len(op.operands):
        return op.results[len(op.operands):]
    return op.results


def _collective(kind: str, comm: Callable[[OpDesc, float], float], reduces: bool = False) -> Rule:
    def rule(op: OpDesc) -> Cost:
        out = sum(s.nbytes for s in _outputs(op))
        n = op.group_size
        # sharding.md: ReduceScatter/AllReduce also do the additions, (n-1)/n of the elements
        flops = sum(s.elements for s in op.operands) * (n - 1) / n if reduces else 0.0
        return Cost(flops=flops, hbm_bytes=op.operand_bytes + out, comm_bytes=comm(op, out),
                    collective=kind, group_axes=op.group_axes, groups=op.groups)
    return rule


COLLECTIVE_RULES: dict[str, Rule] = {
    # predictions.collectives convention: V after an all-gather, before a reduce-scatter,
    # the reduced array for all-reduce, the whole exchanged array (group x local) for all-to-all
    "all-gather": _collective("all-gather", lambda op, out: out),
    "reduce-scatter": _collective("reduce-scatter", lambda op, out: op.operand_bytes, True),
    "all-reduce": _collective("all-reduce", lambda op, out: op.operand_bytes, True),
    "all-to-all": _collective("all-to-all", lambda op, out: op.group_size * op.operand_bytes),
    "collective-permute": _collective("collective-permute", lambda op, out: op.operand_bytes),
}
for _name in tuple(COLLECTIVE_RULES):
    COLLECTIVE_RULES[_name + "-start"] = COLLECTIVE_RULES[_name]
    COLLECTIVE_RULES[_name + "-done"] = lambda op: Cost()  # the work is charged to the start


def _point_to_point(op: OpDesc, data: tuple[Shape, ...]) -> Cost:
    # sharding.md: a point-to-point copy (ppermute) moves its V bytes one hop, V / W_ici; a
    # device's send and recv are two transfers (out and in), each priced once for its pair
    v = sum(s.nbytes for s in data)
    return Cost(hbm_bytes=v, comm_bytes=v, collective="collective-permute",
                group_axes=op.group_axes)


# send(data, token) -> (data, context, token); recv(token) -> (data, context, token)
COLLECTIVE_RULES["send"] = lambda op: _point_to_point(op, op.operands[:1])
COLLECTIVE_RULES["recv"] = lambda op: _point_to_point(op, op.results[:1])
