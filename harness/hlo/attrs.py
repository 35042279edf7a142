"""Attribute values of HLO instructions: ``lhs_contracting_dims={1}``, ``replica_groups=...``.

Each parser takes the value text (right of ``=``) and returns a plain Python value, or raises
:class:`HloParseError`; ``PARSERS`` is the registry, keyed by attribute name. Attributes with no
parser are kept as raw text (``metadata``, ``backend_config``, ``sharding``, ...).

Replica groups come in the three syntaxes XLA prints (`profiling.md`: the groups reveal the mesh
axis a collective runs over):

- explicit ``{{0,1,2,3},{4,5,6,7}}`` (``{}`` = every device);
- iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``: ``[num_groups, group_size]`` taken from the
  device iota reshaped to the second list and transposed by ``T(...)``;
- mesh ``mesh['axis_0'=1,'axis_1'=4,'axis_2'=2] {'axis_1'}``: a group spans the named axes
  (a sub-axis ``'x':(2)4`` spans 4 devices of axis x); group size = product of their sizes.

A trace's embedded ``HloProto`` keeps the groups in ``collective_device_list`` (explicit or
iota), which an older jaxlib prints as ``{}``; ``harness.trace.hlo_proto`` writes them back in
these syntaxes (``iota_text``, ``explicit_text``) before the text is parsed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.errors import HarnessError


class HloParseError(HarnessError):
    """HLO text that is malformed or truncated; the message names the line and what was expected."""


@dataclass(frozen=True)
class ReplicaGroups:
    """The devices a collective combines. ``kind``: "explicit" | "iota" | "mesh" | "all".

    ``group_size``: devices per group (0 when ``kind == "all"``: every device in the module).
    ``axes``/``axis_sizes``: the mesh axes one group spans (mesh form only).
    ``mesh``: the whole mesh as ((name, size), ...) (mesh form only).
    ``groups``: the device ids of every group when printed or cheaply expanded, else None.
    """

    kind: str
    group_size: int
    num_groups: int | None = None
    axes: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    mesh: tuple[tuple[str, int], ...] = ()
    groups: tuple[tuple[int, ...], ...] | None = None


_INT_LIST_RE = re.compile(r"\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}")
_GROUP_RE = re.compile(r"\{([^{}]*)\}")
_EXPLICIT_RE = re.compile(r"\{\s*(?:\{[\d,\s]*\}\s*(?:,\s*\{[\d,\s]*\}\s*)*)?\}")
_IOTA_RE = re.compile(r"\[(\d+),(\d+)\]<=\[(\d+(?:,\d+)*)\](?:T\((\d+(?:,\d+)*)\))?")
_MESH_RE = re.compile(r"mesh\[([^\]]*)\](?:\s*,\s*device_ids=\(([^)]*(?:\))?)\))?\s*\{([^{}]*)\}")
_MESH_AXIS_RE = re.compile(r"'?([\w.\-]+)'?=(\d+)")
_AXIS_REF_RE = re.compile(r"'?([\w.\-]+)'?(?::\((\d+)\)(\d+))?")
_COMP_NAME_RE = re.compile(r"%?([\w.\-]+)")
_WINDOW_ITEM_RE = re.compile(r"(\w+)=(\S+)")
_DIM_LABELS_RE = re.compile(r"(\w+)_(\w+)->(\w+)")
_STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_EXPAND_LIMIT = 1 << 16  # expand iota/mesh groups into device ids up to this many devices


def int_list(text: str) -> tuple[int, ...]:
    """``{1,0}`` -> (1, 0); ``{}`` -> ()."""
    m = _INT_LIST_RE.fullmatch(text.strip())
    if m is None:
        raise HloParseError(f"expected a list of integers like {{1,0}}, got {text[:60]!r}")
    return tuple(int(x) for x in m.group(1).split(",")) if m.group(1) else ()


def config_ints(values) -> tuple[int, ...]:
    """A list of integers from a JSON ``backend_config`` (protobuf's JSON writes int64 as
    strings: ``["1"]``) as ints; () when absent or not integers."""
    try:
        return tuple(int(v) for v in values or ())
    except (TypeError, ValueError):
        return ()


def integer(text: str) -> int:
    if not re.fullmatch(r"-?\d+", text.strip()):
        raise HloParseError(f"expected an integer, got {text[:60]!r}")
    return int(text)


def computation_names(text: str) -> tuple[str, ...]:
    """``%fused_computation`` or ``{%a, %b}`` -> names without ``%``."""
    inner = text.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    names = tuple(p.strip() for p in inner.split(",") if p.strip())
    out = []
    for n in names:
        m = _COMP_NAME_RE.fullmatch(n)
        if m is None:
            raise HloParseError(f"expected a computation name like %name, got {n[:60]!r}")
        out.append(m.group(1))
    if not out:
        raise HloParseError(f"expected at least one computation name, got {text[:60]!r}")
    return tuple(out)


def string(text: str) -> str:
    m = _STRING_RE.fullmatch(text.strip())
    if m is None:
        raise HloParseError(f"expected a quoted string, got {text[:60]!r}")
    return m.group(1)


def _explicit(text: str) -> tuple[tuple[int, ...], ...]:
    if _EXPLICIT_RE.fullmatch(text) is None:
        raise HloParseError(f"expected groups like {{{{0,1}},{{2,3}}}}, got {text[:60]!r}")
    return tuple(tuple(int(x) for x in g.split(",") if x.strip())
                 for g in _GROUP_RE.findall(text[1:-1]))


def _iota_devices(reshape: tuple[int, ...], perm: tuple[int, ...]) -> list[int]:
    """iota(prod(reshape)) reshaped to ``reshape`` and transposed by ``perm``, flattened."""
    strides = [math.prod(reshape[i + 1:]) for i in range(len(reshape))]
    dims = [reshape[p] for p in perm]
    out_strides = [strides[p] for p in perm]
    devices = [0]
    for size, stride in zip(dims, out_strides):
        devices = [d + k * stride for d in devices for k in range(size)]
    return devices


def _iota(m: re.Match) -> ReplicaGroups:
    num_groups, group_size = int(m.group(1)), int(m.group(2))
    reshape = tuple(int(x) for x in m.group(3).split(","))
    perm = (tuple(int(x) for x in m.group(4).split(",")) if m.group(4)
            else tuple(range(len(reshape))))
    total = math.prod(reshape)
    if (sorted(perm) != list(range(len(reshape))) or total != num_groups * group_size
            or group_size < 1):
        raise HloParseError(f"inconsistent iota replica groups {m.group(0)!r}")
    groups = None
    if total <= _EXPAND_LIMIT:
        flat = _iota_devices(reshape, perm)
        groups = tuple(tuple(flat[i:i + group_size]) for i in range(0, total, group_size))
    return ReplicaGroups("iota", group_size, num_groups, groups=groups)


def _mesh(m: re.Match) -> ReplicaGroups:
    mesh = tuple((name, int(size)) for name, size in _MESH_AXIS_RE.findall(m.group(1)))
    if not mesh:
        raise HloParseError(f"mesh replica groups without axes: {m.group(0)[:60]!r}")
    sizes = dict(mesh)
    axes, axis_sizes = [], []
    for ref in (r.strip() for r in m.group(3).split(",") if r.strip()):
        am = _AXIS_REF_RE.fullmatch(ref)
        if am is None or am.group(1) not in sizes:
            raise HloParseError(f"replica group axis {ref!r} is not one of {sorted(sizes)}")
        axes.append(am.group(1) if am.group(3) is None else ref.replace("'", ""))
        axis_sizes.append(int(am.group(3)) if am.group(3) else sizes[am.group(1)])
    total = math.prod(sizes.values())
    group_size = math.prod(axis_sizes)
    if group_size == 0 or total % group_size:
        raise HloParseError(f"replica group axes {axes} do not divide the mesh {mesh}")
    return ReplicaGroups("mesh", group_size, total // group_size, axes=tuple(axes),
                         axis_sizes=tuple(axis_sizes), mesh=mesh)


def replica_groups(text: str) -> ReplicaGroups:
    """Any of XLA's three replica-group syntaxes (module docstring)."""
    text = text.strip()
    if text.startswith("mesh"):
        m = _MESH_RE.fullmatch(text)
        if m is None:
            raise HloParseError(f"expected mesh[...] {{axes}}, got {text[:80]!r}")
        return _mesh(m)
    if text.startswith("["):
        m = _IOTA_RE.fullmatch(text)
        if m is None:
            raise HloParseError(f"expected iota groups like [2,4]<=[8], got {text[:80]!r}")
        return _iota(m)
    groups = _explicit(text)
    if not groups:
        return ReplicaGroups("all", 0, 1)
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise HloParseError(f"replica groups of unequal sizes {sorted(sizes)}: {text[:80]!r}")
    return ReplicaGroups("explicit", sizes.pop(), len(groups), groups=groups)


def iota_text(num_groups: int, group_size: int, reshape: tuple[int, ...] = (),
              perm: tuple[int, ...] = ()) -> str:
    """The iota form XLA prints for a proto's ``IotaReplicaGroupListProto``:
    (4, 2, (2, 4), (1, 0)) -> ``[4,2]<=[2,4]T(1,0)``; the transpose is left out when it is the
    identity, the reshape defaults to all devices in one dimension. ``replica_groups`` reads it
    back."""
    dims = tuple(reshape) or (num_groups * group_size,)
    text = f"[{num_groups},{group_size}]<=[{','.join(map(str, dims))}]"
    if perm and tuple(perm) != tuple(range(len(dims))):
        text += f"T({','.join(map(str, perm))})"
    return text


def explicit_text(groups: tuple[tuple[int, ...], ...]) -> str:
    """((0, 1), (2, 3)) -> ``{{0,1},{2,3}}``, the explicit form (a proto's ``ReplicaGroup``s)."""
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``source_target_pairs={{0,1},{1,2}}`` -> ((0, 1), (1, 2))."""
    groups = _explicit(text.strip())
    if any(len(g) != 2 for g in groups):
        raise HloParseError(f"expected source/target pairs like {{{{0,1}}}}, got {text[:60]!r}")
    return tuple((g[0], g[1]) for g in groups)


def window(text: str) -> dict[str, tuple]:
    """``{size=3x3 stride=2x2 pad=1_1x1_1}`` ->
    {"size": (3, 3), "stride": (2, 2), "pad": ((1, 1), (1, 1))}."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise HloParseError(f"expected a window like {{size=3x3}}, got {text[:60]!r}")
    out: dict[str, tuple] = {}
    for key, value in _WINDOW_ITEM_RE.findall(inner[1:-1]):
        parts = value.split("x")
        try:
            if key == "pad":
                out[key] = tuple(tuple(int(v) for v in p.split("_")) for p in parts)
            else:
                out[key] = tuple(int(p) for p in parts)
        except ValueError as e:
            raise HloParseError(f"bad window item {key}={value!r}") from e
    return out


def dim_labels(text: str) -> tuple[str, str, str]:
    """``b01f_01io->b01f`` -> ("b01f", "01io", "b01f")."""
    m = _DIM_LABELS_RE.fullmatch(text.strip())
    if m is None:
        raise HloParseError(f"expected dim_labels like b01f_01io->b01f, got {text[:60]!r}")
    return m.group(1), m.group(2), m.group(3)


PARSERS = {
    "lhs_contracting_dims": int_list,
    "rhs_contracting_dims": int_list,
    "lhs_batch_dims": int_list,
    "rhs_batch_dims": int_list,
    "lhs_ragged_dims": int_list,  # ragged-dot (jax.lax.ragged_dot): the ragged dimension
    "rhs_group_dims": int_list,   # ragged-dot: the rhs dimension indexing the groups
    "dimensions": int_list,
    "index": integer,
    "channel_id": integer,
    "feature_group_count": integer,
    "batch_group_count": integer,
    "replica_groups": replica_groups,
    "source_target_pairs": pairs,
    "window": window,
    "dim_labels": dim_labels,
    "custom_call_target": string,
    "calls": computation_names,
    "to_apply": computation_names,
    "body": computation_names,
    "condition": computation_names,
    "branch_computations": computation_names,
    "true_computation": computation_names,
    "false_computation": computation_names,
    "called_computations": computation_names,
}

# Attributes naming other computations.
CALL_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
              "true_computation", "false_computation", "called_computations")
