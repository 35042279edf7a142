"""The arguments of a captured step: what each step is given, what the compiled program was
specialised to, and what changed when it must compile again.

A jitted program is compiled for its arguments' shapes, dtypes and shardings (and the values
of its static arguments). A step whose outputs come back laid out otherwise than its inputs
(a Flax NNX FSDP step updating its model in place, a ``carry`` threading outputs into the next
step) makes the next step compile again: ``signature`` is what that depends on, ``changes``
names the difference. Flax NNX modules and optimizers are pytrees of their arrays (flax 0.12),
so one flattening reads plain pytrees, Optax states and NNX objects alike.
"""
from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Sequence

from harness.capture.nnx_paths import jax_names

# jax is imported inside the functions that run it, on purpose: importing this module must
# leave XLA_FLAGS settable (harness.devices) and stay cheap for commands that never run jax.

SHOWN = 2  # changed arrays named in a note; the rest are counted


def _spec(sharding) -> str:
    """A sharding as its partition spec (``P('data', None)``) where it has one."""
    spec = getattr(sharding, "spec", None)
    return str(spec) if spec is not None else str(sharding)


def _leaf(x) -> tuple:
    """What a compiled program depends on in one argument leaf: its aval's shape, dtype and
    weak type (a Python scalar's as jit abstracts it) and an array's sharding (None: a host
    value); a value jax does not abstract, its type (a static argument: the harness never
    changes one)."""
    import jax

    try:
        aval = jax.typeof(x)
    except TypeError:
        return (type(x).__name__,)
    return (tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False)),
            getattr(x, "sharding", None))


def signature(args: Sequence, kwargs: dict, names: Sequence[str] = ()) -> dict[str, tuple]:
    """Each argument leaf's ``_leaf``, by its path (``model.w1``, ``opt_state[0].mu['w']``;
    ``names`` the positional parameters' names, else ``args[i]``)."""
    import jax

    out = {}
    for part, tree in (("args", tuple(args)), ("kwargs", dict(kwargs))):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            out[_path(part, path, names)] = _leaf(leaf)
    return out


def _path(part: str, path: tuple, names: Sequence[str]) -> str:
    import jax

    head, rest = path[0], jax.tree_util.keystr(tuple(path[1:]))
    rest = re.sub(r"\.value(?=$|[.\[])", "", rest)  # an NNX Variable's own field
    key = getattr(head, "idx", getattr(head, "key", None))
    if part == "args" and isinstance(key, int):
        return (names[key] if key < len(names) else f"args[{key}]") + rest
    return f"{key}{rest}"


def parameter_names(fn: Callable) -> tuple[str, ...]:
    """The positional parameters' names of ``fn`` (jax.jit and nnx.jit keep the function's
    signature); () where it has none."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _same_layout(a, b, rank: int) -> bool:
    """Whether two shardings lay an array of ``rank`` dimensions out alike (``P()`` and
    ``P(None, None)`` do: ``Sharding.is_equivalent_to``); None is a host value, which jit
    puts on one device."""
    if a is None or b is None:
        return len(getattr(a or b, "device_set", ())) <= 1
    if a == b:
        return True
    try:
        return bool(a.is_equivalent_to(b, rank))
    except Exception:  # noqa: BLE001 - shardings of two kinds jax will not compare
        return False


def _same(before: tuple, after: tuple) -> bool:
    """Whether jit runs one executable for both leaves: the same shape, dtype and weak type,
    laid out alike."""
    if len(before) < 4 or len(after) < 4:
        return before == after
    return before[:3] == after[:3] and _same_layout(before[3], after[3], len(before[0]))


def _what(before: tuple, after: tuple) -> str:
    if len(before) < 4 or len(after) < 4:
        return f"{before[0]} -> {after[0]}"
    parts = []
    if before[0] != after[0]:
        parts.append(f"shape {before[0]} -> {after[0]}")
    if before[1:3] != after[1:3]:
        weak = ("weak " if before[2] else "", "weak " if after[2] else "")
        parts.append(f"dtype {weak[0]}{before[1]} -> {weak[1]}{after[1]}")
    if not _same_layout(before[3], after[3], len(before[0])):
        parts.append(f"sharding {_spec(before[3])} -> {_spec(after[3])}")
    return ", ".join(parts)


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> str:
    """What differs between two ``signature``s, in words ("" when nothing jit keys on does):
    the first ``SHOWN`` changed leaves with what changed in each, and how many in all."""
    if before.keys() != after.keys():
        gone, new = sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys())
        return (f"its arguments' structure changed ({len(gone)} leaves gone, e.g. "
                f"{(gone or ['-'])[0]}; {len(new)} new, e.g. {(new or ['-'])[0]})")
    changed = [k for k in before if not _same(before[k], after[k])]
    shown = "; ".join(f"{k}: {_what(before[k], after[k])}" for k in changed[:SHOWN])
    more = f"; {len(changed)} arrays in all" if len(changed) > SHOWN else ""
    return shown + more


def own_copies(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments with every piece of state a step updates in place copied, so that steps
    leave the caller's as they were: each ``jax.Ref`` a new ref of its value (one copy for a
    ref given twice), every Flax NNX object (module, optimizer, variable) cloned (``nnx.clone``:
    the same arrays in new objects, references shared between arguments kept shared). JAX
    arrays are immutable: everything else is given as it is."""
    import jax

    if _refs(args, kwargs):
        copies: dict[int, object] = {}

        def copy(x):
            if _is_ref(x):
                return copies.setdefault(id(x), jax.new_ref(x[...]))
            return x

        args, kwargs = jax.tree.map(copy, (tuple(args), dict(kwargs)), is_leaf=_is_ref)
    nnx = sys.modules.get("flax.nnx")
    if nnx is None or not has_graph_nodes(args, kwargs):
        return args, kwargs
    return nnx.clone((tuple(args), dict(kwargs)))


def mutable_state(args: tuple, kwargs: dict) -> list[str]:
    """What among the arguments a step may update in place, in words ("2 jax.Refs", "Flax NNX
    objects"); [] for none (JAX arrays are immutable)."""
    n = _refs(args, kwargs)
    return ([f"{n} jax.Ref{'s' * (n != 1)}"] if n else []) + (
        ["Flax NNX objects"] if has_graph_nodes(args, kwargs) else [])


def _is_ref(x) -> bool:
    import jax

    ref = getattr(jax, "Ref", None)  # jax 0.7+: mutable arrays (jax.new_ref)
    return ref is not None and isinstance(x, ref)


def _refs(args: tuple, kwargs: dict) -> int:
    """The distinct ``jax.Ref``s among the arguments' leaves."""
    import jax

    leaves = jax.tree.leaves((tuple(args), dict(kwargs)), is_leaf=_is_ref)
    return len({id(x) for x in leaves if _is_ref(x)})


def has_graph_nodes(args: Sequence, kwargs: dict) -> bool:
    """Whether a Flax NNX object (an ``nnx.graph`` node) is among the arguments."""
    import jax

    nnx = sys.modules.get("flax.nnx")
    if nnx is None:
        return False
    is_node = nnx.graph.is_graph_node  # which takes a jax.Ref for one: it is not NNX's
    return any(is_node(x) and not _is_ref(x)
               for x in jax.tree.leaves((tuple(args), dict(kwargs)), is_leaf=is_node))


def donated_copies(lowered) -> Callable[[tuple], tuple] | None:
    """A function giving fresh copies of the arguments ``lowered`` donates (``donate_argnums``),
    the others as they are; None when it donates none. JAX donates whole arguments: each
    positional argument with a donated leaf is copied whole (an NNX module as a new module of
    copied arrays); where static arguments leave the positions unmatched, every one is."""
    import jax
    import jax.numpy as jnp

    info = getattr(lowered, "args_info", None)
    info = info[0] if isinstance(info, tuple) and len(info) == 2 else info  # (args, kwargs)
    donated = [any(getattr(i, "donated", False) for i in jax.tree.leaves(arg))
               for arg in (info if isinstance(info, (tuple, list)) else [info])]
    if not any(donated):
        return None

    def fresh(args: tuple) -> tuple:
        flags = donated if len(donated) == len(args) else [True] * len(args)
        return tuple(jax.tree.map(jnp.copy, a) if d else a for a, d in zip(args, flags))

    return fresh


def args_mesh(args: Sequence, kwargs: dict):
    """The mesh the arguments are laid out on (the first ``NamedSharding`` over more than one
    device among their leaves): its named axes say which axes a collective runs over
    (``harness.explain``); None where no argument names one."""
    import jax
    from jax.sharding import NamedSharding

    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            return sharding.mesh
    return None


def argument_paths(lowered, names: Sequence[str] = ()) -> list[str]:
    """The path in the user's code of each entry parameter of a lowered program, by its
    number (``state['params'][0]``; ``names``: the function's positional parameters): JAX names
    a parameter by its argument, except where it cannot (a program whose arguments hold
    ``jax.Ref``s records ``Arg_<k>.<n>`` for every one), and ``harness.explain`` maps those back
    through this list. Static arguments are none of them; arguments jit prunes as unused are
    left out where the lowering says which it kept; [] where the lowering has no ``args_info``."""
    import jax

    info = getattr(lowered, "args_info", None)
    if not (isinstance(info, tuple) and len(info) == 2):
        return []
    leaves = jax.tree_util.tree_flatten_with_path(
        {"args": tuple(info[0]), "kwargs": dict(info[1])},
        is_leaf=lambda x: type(x).__name__ == "ArgInfo")[0]
    paths = [_path(path[0].key, path[1:], names) for path, _ in leaves]
    try:  # jit's record of the arguments it kept (private; absent on other versions)
        kept = lowered._lowering.compile_args["kept_var_idx"]
    except (AttributeError, KeyError, TypeError):
        return paths
    return [p for i, p in enumerate(paths) if i in kept]


def nnx_names(fn: Callable, lowered, args: Sequence, kwargs: dict) -> dict[str, str]:
    """For an ``nnx.jit`` program lowered for ``fn(*args, **kwargs)``: JAX's name of each
    parameter that holds a Flax NNX object's array (``model.states[0][3]``: ``nnx.jit``
    passes each module and optimizer as a list of its arrays) -> its NNX path
    (``model.linear1.kernel``), by ``harness.capture.nnx_paths.jax_names`` (the arguments'
    nodes flattened as ``nnx.jit`` flattened them, paired with the lowering's ``args_info``);
    {} where no NNX object is among the arguments or the pairing fails."""
    nnx = sys.modules.get("flax.nnx")
    info = getattr(lowered, "args_info", None)
    if nnx is None or info is None or not has_graph_nodes(args, kwargs):
        return {}
    try:
        return jax_names(nnx, fn, tuple(args), dict(kwargs), info) or {}
    except Exception:  # noqa: BLE001 - a flax of other internals: JAX's names are kept
        return {}
