"""The optimized HLO a trace carries: each compiled module's ``HloProto`` on ``/host:metadata``.

The profiler stores every module it saw as an event metadata named after the module
(``jit_step(0)``) with a stat ``Hlo Proto``: an ``HloProto`` whose field 1 is the
``HloModuleProto``. ``module_text`` prints it through jaxlib; ``async_names`` reads the few
fields the text hides (the text prints an async fusion as ``fusion-start`` and leaves out the
name of the fusion it wraps, which is the name the trace's kernels carry).
"""
from __future__ import annotations

import logging
import os
import re

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from harness.errors import TraceError
from harness.hlo.attrs import explicit_text, iota_text
from harness.trace.planes import PlaneIndex, plane
from harness.trace.space import Space
from harness.trace.xplane import message_classes

log = logging.getLogger(__name__)

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
_PROGRAM_ID = re.compile(r"^(.*)\((\d+)\)$")  # "jit_step(12)" -> ("jit_step", "12")
_INSTR_NAME = re.compile(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")

_F = descriptor_pb2.FieldDescriptorProto
# The fields of xla/service/hlo.proto read here: (message, field, number, type, message type)
_FIELDS = [
    ("HloProto", "hlo_module", 1, _F.TYPE_MESSAGE, "HloModuleProto"),
    ("HloModuleProto", "name", 1, _F.TYPE_STRING, None),
    ("HloModuleProto", "computations", 3, _F.TYPE_MESSAGE, "HloComputationProto"),
    ("HloComputationProto", "name", 1, _F.TYPE_STRING, None),
    ("HloComputationProto", "instructions", 2, _F.TYPE_MESSAGE, "HloInstructionProto"),
    ("HloComputationProto", "id", 5, _F.TYPE_INT64, None),
    ("HloComputationProto", "root_id", 6, _F.TYPE_INT64, None),
    ("HloInstructionProto", "name", 1, _F.TYPE_STRING, None),
    ("HloInstructionProto", "opcode", 2, _F.TYPE_STRING, None),
    ("HloInstructionProto", "id", 35, _F.TYPE_INT64, None),
    ("HloInstructionProto", "called_computation_ids", 38, _F.TYPE_INT64, None),
    # replica groups: the old list (49), the device list of current XLA (87: explicit or iota)
    # and its iota-only form (92); xla_data.proto's messages they hold
    ("HloInstructionProto", "replica_groups", 49, _F.TYPE_MESSAGE, "ReplicaGroup"),
    ("HloInstructionProto", "collective_device_list", 87, _F.TYPE_MESSAGE,
     "CollectiveDeviceListProto"),
    ("HloInstructionProto", "iota_collective_device_list", 92, _F.TYPE_MESSAGE,
     "IotaReplicaGroupListProto"),
    ("ReplicaGroup", "replica_ids", 1, _F.TYPE_INT64, None),
    ("CollectiveDeviceListProto", "replica_groups", 1, _F.TYPE_MESSAGE, "ReplicaGroup"),
    ("CollectiveDeviceListProto", "iota_replica_group_list", 2, _F.TYPE_MESSAGE,
     "IotaReplicaGroupListProto"),
    ("IotaReplicaGroupListProto", "num_replica_groups", 1, _F.TYPE_INT64, None),
    ("IotaReplicaGroupListProto", "num_devices_per_group", 2, _F.TYPE_INT64, None),
    ("IotaReplicaGroupListProto", "iota_reshape_dims", 3, _F.TYPE_INT64, None),
    ("IotaReplicaGroupListProto", "iota_transpose_perm", 4, _F.TYPE_INT32, None),
    # the partition count the printed text drops: the module's device assignment
    ("HloModuleProto", "device_assignment", 15, _F.TYPE_MESSAGE, "DeviceAssignmentProto"),
    ("DeviceAssignmentProto", "replica_count", 1, _F.TYPE_INT32, None),
    ("DeviceAssignmentProto", "computation_count", 2, _F.TYPE_INT32, None),
]
_REPEATED = {"computations", "instructions", "called_computation_ids", "replica_groups",
             "replica_ids", "iota_reshape_dims", "iota_transpose_perm"}


def _classes() -> dict[str, type]:
    pkg = "scaling_harness.hlo"
    fdp = descriptor_pb2.FileDescriptorProto(name="scaling_harness_hlo.proto", package=pkg,
                                             syntax="proto3")
    messages = {}
    for msg, name, number, ftype, type_name in _FIELDS:
        if msg not in messages:
            messages[msg] = fdp.message_type.add(name=msg)
        f = messages[msg].field.add(name=name, number=number, type=ftype,
                                    label=_F.LABEL_REPEATED if name in _REPEATED
                                    else _F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = f".{pkg}.{type_name}"
    return message_classes(fdp, messages)


_PROTO = _classes()


def embedded_modules(space: Space, damaged: list | None = None
                     ) -> dict[tuple[str, str], bytes]:
    """(module name, program id) -> serialized ``HloModuleProto``, for every module whose HLO
    the trace holds (the id is "" where the metadata's name carries none); empty when it holds
    none. A trace embeds every module compiled while it ran, not only those that ran. A module
    whose proto cannot be read is left out, its metadata name appended to ``damaged``. A trace
    that carries its HLO as text (``harness.trace.chrome.ChromeTrace.hlo_texts``: rebuilt from
    a Chrome JSON trace's ops) gives that text instead of the proto (``module_text`` passes it
    through)."""
    texts = getattr(space, "hlo_texts", None)
    if texts is not None:
        return dict(texts)
    meta = plane(space, METADATA_PLANE)
    if meta is None:
        return {}
    idx = PlaneIndex(meta)
    found = {}
    for m in meta.event_metadata.values():
        for st in m.stats:
            if idx.stat_names.get(st.metadata_id) == HLO_PROTO_STAT and st.bytes_value:
                try:
                    module = _PROTO["HloProto"].FromString(st.bytes_value).hlo_module
                except DecodeError:
                    log.warning("the HLO embedded for %s is damaged; left out", m.name)
                    if damaged is not None:
                        damaged.append(m.name)
                    continue
                named = _PROGRAM_ID.match(m.name)
                key = (named.group(1), named.group(2)) if named else (m.name, "")
                found[key] = module.SerializeToString()
    return found


def _xla_computation():
    """jaxlib's ``XlaComputation``: ``jaxlib.xla_client`` (jaxlib 0.4 to 0.10; 0.17 s to import
    here, against 0.9 s through ``jax._src.lib``, which imports all of jax), else
    ``jax._src.lib.xla_client``, else jaxlib's ``_hlo`` extension (newer jaxlibs)."""
    # as ``import jax`` does before it loads jaxlib: XLA's C++ logs warnings and errors only
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        from jaxlib import xla_client
        return xla_client.XlaComputation
    except (ImportError, AttributeError):
        pass
    try:
        from jax._src.lib import xla_client
        return xla_client.XlaComputation
    except (ImportError, AttributeError):
        from jaxlib import _hlo
        return _hlo.XlaComputation


def _print_options():
    """jaxlib's short parsable print options with each instruction's ``metadata`` kept (its
    ``op_name``, source line and stack frame: where a collective came from), or None where
    this jaxlib has no ``HloPrintOptions``."""
    try:
        from jaxlib import _hlo
        options = _hlo.HloPrintOptions.short_parsable()
        options.print_metadata = True
        return options
    except (ImportError, AttributeError):
        return None


def module_text(module_bytes: bytes) -> str:
    """The HLO text of a serialized ``HloModuleProto`` (what ``compiled.as_text()`` prints),
    with each instruction's metadata where jaxlib can print it, and the replica groups and
    partition count that an older jaxlib's printer leaves out (``restore_groups``). HLO text
    already (``embedded_modules`` of a trace that carries text) is returned as it is."""
    if isinstance(module_bytes, str):
        return module_bytes
    try:
        computation = _xla_computation()(module_bytes)
        options = _print_options()
        if options is not None and hasattr(computation, "get_hlo_module"):
            text = computation.get_hlo_module().to_string(options)
        else:
            text = computation.as_hlo_text()
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own error types
        raise TraceError(f"cannot print the HLO embedded in the trace: {e}") from None
    return restore_groups(text, module_bytes)


def _groups_text(instr) -> str | None:
    """An instruction's replica groups from the proto, in the syntax XLA prints: the iota form
    ``[4,2]<=[2,4]T(1,0)`` or explicit ``{{0,1},{2,3}}``; None when it holds none."""
    iota = None
    if instr.HasField("iota_collective_device_list"):
        iota = instr.iota_collective_device_list
    elif instr.HasField("collective_device_list"):
        cdl = instr.collective_device_list
        if cdl.HasField("iota_replica_group_list"):
            iota = cdl.iota_replica_group_list
        elif cdl.replica_groups:
            return explicit_text(tuple(tuple(g.replica_ids) for g in cdl.replica_groups))
    if iota is not None and iota.num_devices_per_group:
        return iota_text(iota.num_replica_groups, iota.num_devices_per_group,
                         tuple(iota.iota_reshape_dims), tuple(iota.iota_transpose_perm))
    if instr.replica_groups:
        return explicit_text(tuple(tuple(g.replica_ids) for g in instr.replica_groups))
    return None


_EMPTY_GROUPS = "replica_groups={}"


def restore_groups(text: str, module_bytes: bytes) -> str:
    """``text`` with ``replica_groups={}`` replaced by the groups the proto holds in
    ``collective_device_list`` (jaxlib 0.10's printer reads only the old field and prints
    ``{}``, "every device"), and the header given ``num_partitions`` from the device assignment
    where the text has none (the module's config, which the proto does not carry, is lost)."""
    module = _PROTO["HloModuleProto"].FromString(module_bytes)
    groups = {i.name: g for c in module.computations for i in c.instructions
              if (g := _groups_text(i)) is not None}
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if _EMPTY_GROUPS not in line:
            continue
        m = _INSTR_NAME.match(line)
        if m and m.group(1) in groups:
            lines[k] = line.replace(_EMPTY_GROUPS, f"replica_groups={groups[m.group(1)]}", 1)
    da = module.device_assignment
    if da.computation_count > 1 and lines and lines[0].startswith("HloModule") and \
            "num_partitions=" not in lines[0]:
        lines[0] += f", replica_count={max(da.replica_count, 1)}, " \
                    f"num_partitions={da.computation_count}"
    return "\n".join(lines)


def async_names(module_bytes: bytes) -> dict[str, str]:
    """``{async-start name: name of the instruction it wraps}`` for the async ops of a module
    (``fusion-start.18`` -> ``loop_dynamic_slice_fusion.37``). The trace names such an op by
    the wrapped instruction; the printed HLO only by the ``-start``. HLO text (a Chrome JSON
    trace's, which names every op as its text does): none."""
    if isinstance(module_bytes, str):
        return {}
    module = _PROTO["HloModuleProto"].FromString(module_bytes)
    roots = {}
    for comp in module.computations:
        by_id = {i.id: i for i in comp.instructions}
        root = by_id.get(comp.root_id)
        if root is not None:
            roots[comp.id] = root.name
    names = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == "async-start" and instr.called_computation_ids:
                wrapped = roots.get(instr.called_computation_ids[0])
                if wrapped and wrapped != instr.name:
                    names[instr.name] = wrapped
    return names



def trace_program(space: Space, program: str = "") -> tuple[str | None, dict[str, str]]:
    """(HLO text, async names) of the program ``program`` (a name or a program id) in a decoded
    trace (default: its largest module); (None, {}) when the trace holds no HLO."""
    modules = embedded_modules(space)
    if not modules:
        return None, {}
    named = [k for k in modules if program and program in k]
    key = named[0] if named else max(modules, key=lambda k: len(modules[k]))
    return module_text(modules[key]), async_names(modules[key])
