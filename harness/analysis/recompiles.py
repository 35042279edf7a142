"""What differs between two compilations of one program: the entry parameters whose shape,
dtype or sharding changed (``jax.jit`` compiles a function again for each new signature of its
arguments, ``harness.hlo.signature``), for the note a report gives on a program compiled more
than once. Each parameter is named as the user's code names it where the capture recorded its
path (``schema.ARGUMENT_PATHS``: a Flax ``nnx.jit`` program's ``model.states[0][3]`` as
``model.linear1.kernel``; ``harness.hlo.signature.user_name``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.hlo.ir import Module
from harness.hlo.shardings import split_axes
from harness.hlo.signature import Parameter, parameters, user_name

SHOWN = 3  # parameters named per note; the rest counted
NOTES = 3  # other compilations a report gives a note each (the most device time first)


def spec(p: Parameter, mesh: Mapping[str, int] | None) -> str:
    """The parameter's sharding as a user writes it: ``replicated``, ``P('data', None)`` (on a
    named mesh), else the HLO's annotation."""
    if not p.split:
        return "replicated"
    axes = split_axes(p.sharding, len(p.dims), dict(mesh)) if mesh else None
    if axes is None:
        return "{" + p.sharding + "}"
    names = [None if not a else next(iter(a)) if len(a) == 1 else tuple(n for n in mesh if n in a)
             for a in axes]
    return "P(" + ", ".join(repr(n) for n in names) + ")"


def _shape(p: Parameter) -> str:
    return f"{p.dtype}[{','.join(map(str, p.global_dims))}]"


def _times(n: int) -> str:
    return "1 execution" if n == 1 else f"{n} executions"


Names = Sequence[str] | Mapping[str, str] | None  # a program's schema.ARGUMENT_PATHS


def _named(p: Parameter, names: Names = None) -> str:
    plain = f"parameter {p.index}"
    shown = user_name(p.index, p.name, names)
    return plain + (f" {shown!r}" if shown != plain else "")


def differences(before: Module, after: Module, mesh: Mapping[str, int] | None = None,
                names: Names = None) -> list[str]:
    """One phrase per entry parameter that differs from ``before`` to ``after``, by index:
    ``parameter 14 'x': f32[64,128] -> f32[32,128]``, its sharding where that changed
    (``replicated -> P('model')``); a parameter only one of them takes is said so. ``names``:
    the program's recorded paths (``schema.ARGUMENT_PATHS``, either form), which name a
    parameter where JAX's name does not say (``model.states[0][3]``, ``Arg_0.1``)."""
    a = {p.index: p for p in parameters(before)}
    b = {p.index: p for p in parameters(after)}
    out = []
    for i in sorted({*a, *b}):
        pa, pb = a.get(i), b.get(i)
        if pa is None or pb is None:
            p = pa or pb
            out.append(f"{_named(p, names)} ({_shape(p)}) only in the "
                       f"{'first' if pb is None else 'second'}")
            continue
        moved = []
        if (pa.dtype, pa.global_dims) != (pb.dtype, pb.global_dims):
            moved.append(f"{_shape(pa)} -> {_shape(pb)}")
        sa, sb = spec(pa, mesh), spec(pb, mesh)
        if sa != sb:
            moved.append(f"{sa} -> {sb}")
        if moved:
            out.append(f"{_named(pb, names)}: {', '.join(moved)}")
    return out


def note(name: str, main: tuple[str, str], other: tuple[str, str], runs: Mapping,
         modules: Mapping, mesh: Mapping[str, int] | None = None, names: Names = None) -> str:
    """The report's line on ``other``, another compilation of the reported program ``main``:
    its executions and what differs between them (``differences``, the lower program id
    first: on CPU and GPU, ids count up as programs compile; ``names``: the program's
    recorded paths)."""
    first, second = sorted((main, other), key=lambda k: (len(k[1]), k[1]))
    head = (f"{name} compiled again: program {other[1]} ({_times(runs[other])}) beside the "
            f"reported {main[1]} ({_times(runs[main])})")
    ma, mb = modules.get(first), modules.get(second)
    if ma is None or mb is None or ma is mb:
        return head + "; no HLO of each to tell what differs"
    found = differences(ma, mb, mesh, names)
    la, lb = _lines(ma), _lines(mb)
    if not found and la and lb and not la & lb:
        return head + "; a different function of the same name: its ops come from other lines"
    if not found:
        return (head + "; their entry parameters have the same shapes, dtypes and shardings "
                "(a static argument or a compile option differs)")
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (head + f"; from program {first[1]} to {second[1]}: " + "; ".join(found[:SHOWN])
            + more)


def _lines(module: Module) -> set[str]:
    """The source lines (``file:line``) the entry computation's ops were made by (none where
    the HLO keeps no metadata: then two modules are not told apart by them)."""
    from harness.hlo.source import source_line

    return {line for i in module.entry.instructions if (line := source_line(i, module))}
