"""What a collective does, read from the compiled program's dataflow rather than from one shape.

- ``ring``: a collective matmul (book.md §4.1; `jax-stuff.md` builds one from ``ppermute``):
  a permute whose chunk is multiplied locally before it is shifted and whose shifted chunk is
  multiplied again on arrival ("gather": the AllGather collective matmul, A[B, D_Y] shifted
  around the Y ring), or a permute that shifts a sum of partial matmuls to be added to the next
  one ("scatter": the ReduceScatter collective matmul). Unrolled (``fori_loop(...,
  unroll=True)``: no while loop in the program) or inside a loop alike.
- ``sliced``: an all-reduce whose every result is cut to this device's slice by its partition
  id (a ``dynamic-slice`` indexed by ``partition-id``): the program asked for the result
  sharded, a reduce-scatter, and the backend lowered it as an all-reduce and a slice (XLA:CPU
  does so; XLA:TPU most often fuses the pair into one all-reduce-scatter op,
  ``harness.explain.fused``; book §4.2) ("slice"); or an all-reduce of a block the device
  chose by its partition id before the matmul (a dot that reads an offset computed from the
  partition id, the sum's users a ``collective-permute`` that hands each block to the device
  that keeps it: XLA:TPU's form where other mesh axes can share the matmul) ("block").
- ``stage``: a pipeline's stage transfer (book §6.1 "pipeline", §6.2; gpus.md): a permute whose
  shifted value feeds the layer matmuls of the device it arrives on (in this iteration of a
  loop or, carried, the next) while the device that sends it multiplies it no further: the
  output of one stage's layers handed to the next (a ring shift by one along the stage axis,
  ``axes.shift_axis``). A collective matmul's chunk is multiplied on both sides (``ring``).
- ``expert_role``: an all-to-all of routed tokens (a router's top-k upstream) that feeds
  per-expert matmuls (a dot with a batch dimension, a ``ragged-dot``, a grouped-matmul kernel)
  is an MoE's "dispatch" (tokens sent to their experts); one whose value comes from them is its
  "combine" (results brought back) (book §5.4).

The loops a value is carried through (and an all-gather's value gathered again in each
iteration): ``harness.explain.loops``.
"""
from __future__ import annotations

from collections.abc import Callable

from harness.explain import loops
from harness.explain.site import PASS, dot_in, forward_users
from harness.hlo.ir import Computation, Instruction, Module
from harness.hlo.walk import async_done

MAX_HOPS = 6  # ops followed from the collective before giving up
CARRY_HOPS = 10  # the same, into the next iteration and the layer scan it starts
_SUMS = frozenset({"add", "fusion"})  # where partial products meet (a fusion holding an add)


def _reached_dot(instr: Instruction, comp: Computation, module: Module, skip: str = "",
                 hops: int = MAX_HOPS, carry: bool = False,
                 match: Callable = dot_in, seen: set | None = None) -> Instruction | None:
    """The first dot (inside its fusion where fused; ``match``: another test) that reads
    ``instr``'s value, through ops that pass it on (``carry``: and into a loop's next
    iteration or into a loop it starts, a layer scan); ``skip``: a user not followed (the
    permute itself); ``seen``: instructions already followed."""
    seen = set() if seen is None else seen
    if hops <= 0:
        return None
    for user in forward_users(module, comp, instr.name):
        if user.name == skip or (comp.name, user.name) in seen:
            continue
        seen.add((comp.name, user.name))
        found = match(user, module)
        nxt = [(user, comp)] if user.opcode in PASS else []
        if carry:
            nxt += [(g, comp) for g in loops.carried(module, comp, user, instr.name)]
            nxt += loops.into_loop(module, comp, user, instr.name)
        for n, c in nxt if found is None else ():
            found = _reached_dot(n, c, module, skip, hops - 1, carry, match, seen)
            if found is not None:
                break
        if found is not None:
            return found
    return None


def _reaches_dot(instr: Instruction, comp: Computation, module: Module, skip: str = "",
                 hops: int = MAX_HOPS) -> bool:
    """Some dot (or a fusion holding one) reads ``instr``'s value, through ops that pass it
    on; ``skip``: a user not followed (the permute itself)."""
    return _reached_dot(instr, comp, module, skip, hops) is not None


def _from_dot(name: str, comp: Computation, module: Module, hops: int = MAX_HOPS) -> bool:
    """``name``'s value is a dot's result, or a sum (an add or a fusion) of one."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if dot_in(instr, module) is not None:
        return True
    if instr.opcode in _SUMS | PASS:
        return any(_from_dot(n, comp, module, hops - 1) for n in instr.operand_names)
    return False


def ring(instr: Instruction, module: Module) -> str:
    """"gather" or "scatter" where the permute ``instr`` is a step of a collective matmul's
    ring (see the module's docstring), "" where it is not."""
    if instr.opcode.removesuffix("-start") != "collective-permute" or not instr.operand_names:
        return ""
    comp = module.computation(instr.computation)
    arrived = (async_done(module, instr) if instr.opcode.endswith("-start") else instr) or instr
    source = comp.by_name.get(instr.operand_names[0])
    if source is None:
        return ""
    if _reaches_dot(source, comp, module, skip=instr.name) and \
            _reaches_dot(arrived, comp, module):
        return "gather"  # the chunk is multiplied here and, shifted, on the next device
    summed = [u for u in forward_users(module, comp, arrived.name) if u.opcode in _SUMS]
    if _from_dot(source.name, comp, module) and any(
            _from_dot(n, comp, module) for u in summed for n in u.operand_names
            if n != arrived.name):
        return "scatter"  # a sum of partial matmuls shifted on, to be added to the next
    return ""


def _by_partition(name: str, comp: Computation, module: Module, hops: int = 3) -> bool:
    """``name``'s value is computed from the device's partition id."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if instr.opcode in ("partition-id", "replica-id"):
        return True
    return any(_by_partition(n, comp, module, hops - 1) for n in instr.operand_names)


def _slices_by_partition(user: Instruction, comp: Computation, module: Module,
                         elements: int) -> bool:
    """``user`` cuts this device's slice out of a value of ``elements``: a dynamic-slice, or
    a fusion holding one, indexed by the partition id, whose result is smaller."""
    if sum(s.elements for s in user.shapes) >= elements:
        return False
    if user.opcode == "dynamic-slice":
        return any(_by_partition(n, comp, module) for n in user.operand_names[1:])
    if user.opcode != "fusion":
        return False
    body = module.computation(user.called("calls")[0])
    cut = any(i.opcode == "dynamic-slice" for i in body.instructions)
    return cut and (any(i.opcode == "partition-id" for i in body.instructions) or
                    any(_by_partition(n, comp, module) for n in user.operand_names))


def _block(instr: Instruction, comp: Computation, module: Module) -> bool:
    """The all-reduce sums a matmul of a block chosen by the partition id (a dot, or a fusion
    holding one, one of whose scalar operands comes from the partition id), and hands the sum
    on through collective-permutes alone."""
    src = comp.by_name.get(instr.operand_names[0]) if len(instr.operand_names) == 1 else None
    if src is None or dot_in(src, module) is None:
        return False
    chosen = any(_by_partition(n, comp, module, hops=BLOCK_HOPS) for n in src.operand_names
                 if (o := comp.by_name.get(n)) is not None and o.shapes and
                 o.shapes[0].elements == 1)
    users = forward_users(module, comp, _arrived(instr, module).name)
    return chosen and bool(users) and all(
        u.opcode.removesuffix("-start") == "collective-permute" for u in users)


BLOCK_HOPS = 8  # ops from a dot's offset back to the partition id (a table lookup, a clamp)


def sliced(instr: Instruction, module: Module) -> str:
    """"slice" where every non-scalar result of the all-reduce ``instr`` is used only through
    a slice by the device's partition id, "block" where it sums a block the partition id
    chose and a permute hands it on (see the module's docstring), "" otherwise."""
    if instr.opcode.removesuffix("-start") != "all-reduce":
        return ""
    comp = module.computation(instr.computation)
    if _block(instr, comp, module):
        return "block"
    return "slice" if _slices(instr, comp, module) else ""


def hands_block(instr: Instruction, module: Module) -> bool:
    """The permute ``instr`` hands on an all-reduced block (``sliced`` "block")."""
    if instr.opcode.removesuffix("-start") != "collective-permute" or not instr.operand_names:
        return False
    comp = module.computation(instr.computation)
    src = comp.by_name.get(instr.operand_names[0])
    return src is not None and sliced(src, module) == "block"


def _slices(instr: Instruction, comp: Computation, module: Module) -> bool:
    """Every non-scalar result of the all-reduce is used only through a partition's slice."""
    done = (async_done(module, instr) if instr.opcode.endswith("-start") else instr) or instr
    leaves = [done]
    if len(instr.shapes) > 1:  # a tuple: each element through its get-tuple-element
        leaves = [u for u in forward_users(module, comp, done.name)
                  if u.opcode == "get-tuple-element" and u.shapes and u.shapes[0].dims]
    users = [(v, leaf.shapes[0].elements) for leaf in leaves
             for v in forward_users(module, comp, leaf.name)]
    return bool(users) and all(_slices_by_partition(u, comp, module, n) for u, n in users)


def _arrived(instr: Instruction, module: Module) -> Instruction:
    """The instruction whose result is the collective's: its ``-done`` for an async pair."""
    return (async_done(module, instr) if instr.opcode.endswith("-start") else instr) or instr


def stage(instr: Instruction, module: Module) -> Instruction | None:
    """The layer matmul of the next stage that reads what the permute ``instr`` hands on,
    where it hands a stage's output to the next stage (module docstring); None otherwise."""
    if instr.opcode.removesuffix("-start") != "collective-permute" or not instr.operand_names:
        return None
    comp = module.computation(instr.computation)
    source = comp.by_name.get(instr.operand_names[0])
    if source is None or _reaches_dot(source, comp, module, skip=instr.name):
        return None  # multiplied where it is sent from too: a collective matmul's chunk
    return _reached_dot(_arrived(instr, module), comp, module, hops=CARRY_HOPS, carry=True)


RAGGED = ("ragged-dot", "ragged_dot", "gmm")  # a grouped matmul: its opcode or kernel's name


def ragged(instr: Instruction) -> bool:
    """``instr`` is a grouped matmul: a ``ragged-dot``, or a kernel whose op_name names
    ``ragged_dot`` or megablox's ``gmm``."""
    return instr.opcode == "ragged-dot" or (instr.opcode == "custom-call" and any(
        w in instr.op_name for w in RAGGED))


def expert_dot(instr: Instruction, module: Module) -> Instruction | None:
    """``instr`` as a per-expert matmul: a grouped matmul (``ragged``), a dot with a batch
    dimension or a convolution with a window (the TPU compiler's batched matmul), alone or in
    a fusion."""
    if ragged(instr):
        return instr
    dot = dot_in(instr, module)
    if dot is None:
        return None
    batched = dot.attrs.get("lhs_batch_dims") or (
        dot.opcode == "convolution" and any(s > 1 for s in
                                            (dot.attrs.get("window") or {}).get("size", ())))
    return dot if batched else None


def _from_expert(name: str, comp: Computation, module: Module, hops: int = MAX_HOPS,
                 match: Callable = expert_dot) -> bool:
    """``name``'s value is a per-expert matmul's result (``match``), through ops that pass it
    on."""
    instr = comp.by_name.get(name)
    if instr is None or hops <= 0:
        return False
    if match(instr, module) is not None:
        return True
    return instr.opcode in PASS and any(_from_expert(n, comp, module, hops - 1, match)
                                        for n in instr.operand_names)


# how a router picks its k experts: lax.top_k (a TopK custom call on CPU/GPU, a sort or an
# approximate top-k on TPU)
_TOP_K = ("topk", "top_k", "approxtopk")
ROUTED_SEARCH = 400  # ops looked at upstream of an all-to-all for its router's top-k


def _top_k(op: Instruction) -> bool:
    target = str(op.attrs.get("custom_call_target", "")).lower().replace("-", "")
    return op.opcode == "sort" or any(t in target for t in _TOP_K)


def routed(instr: Instruction, comp: Computation, module: Module) -> bool:
    """A top-k (a sort or a TopK call) lies upstream of ``instr`` in its computation, or, in a
    loop body whose values come in from outside (a backward pass's layer scan), anywhere in
    the program: the tokens it moves were routed. Attention's all-to-alls (inference.md's
    batch-sharded KV cache) move queries no router chose, though they feed batched matmuls
    too."""
    seen, todo, outside = set(), list(instr.operand_names), False
    while todo and len(seen) < ROUTED_SEARCH:
        name = todo.pop()
        if name in seen or (op := comp.by_name.get(name)) is None:
            continue
        seen.add(name)
        if _top_k(op):
            return True
        outside |= op.opcode == "parameter" and not comp.is_entry
        todo += op.operand_names
    return outside and _has_top_k(module)


def _has_top_k(module: Module) -> bool:
    """Whether any computation of ``module`` holds a top-k, worked out once per module."""
    found = module.derived.routing
    if "top_k" not in found:
        found["top_k"] = any(_top_k(op) for c in module.computations.values()
                             for op in c.instructions)
    return found["top_k"]


def expert_role(instr: Instruction, module: Module) -> str:
    """"dispatch", "combine" or "" for the all-to-all ``instr`` (module docstring): one that
    moves routed tokens (``routed``) to per-expert matmuls or back from them."""
    if instr.opcode.removesuffix("-start") not in ("all-to-all", "ragged-all-to-all"):
        return ""
    comp = module.computation(instr.computation)
    if not routed(instr, comp, module):
        return ""
    # a per-expert matmul first; then any matmul, for routed tokens reach their experts' dots
    # unbatched too (one expert a device; ragged_dot lowered densely on XLA:CPU)
    for match in (expert_dot, dot_in):
        if _reached_dot(_arrived(instr, module), comp, module, match=match) is not None:
            return "dispatch"
        if any(_from_expert(n, comp, module, match=match) for n in instr.operand_names):
            return "combine"
    return ""
