"""Protobuf message classes for XSpace profiles (``*.xplane.pb``), built at import time.

The profiler writes an XSpace: planes -> lines -> events, with per-plane metadata tables for event
names and stat names. The schema (field numbers of ``xplane.proto`` in XLA's tsl) is declared here
as a descriptor so that decoding runs in protobuf's C implementation without a generated module.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "scaling_harness.xplane"

# message -> [(field name, number, type, label, message type name or None, oneof index or None)]
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCHEMA: dict[str, list[tuple]] = {
    "XSpace": [("planes", 1, _F.TYPE_MESSAGE, _REP, "XPlane", None),
               ("errors", 2, _F.TYPE_STRING, _REP, None, None),
               ("warnings", 3, _F.TYPE_STRING, _REP, None, None),
               ("hostnames", 4, _F.TYPE_STRING, _REP, None, None)],
    "XPlane": [("id", 1, _F.TYPE_INT64, _OPT, None, None),
               ("name", 2, _F.TYPE_STRING, _OPT, None, None),
               ("lines", 3, _F.TYPE_MESSAGE, _REP, "XLine", None),
               ("event_metadata", 4, _F.TYPE_MESSAGE, _REP, "XPlane.EventMetadataEntry", None),
               ("stat_metadata", 5, _F.TYPE_MESSAGE, _REP, "XPlane.StatMetadataEntry", None),
               ("stats", 6, _F.TYPE_MESSAGE, _REP, "XStat", None)],
    "XLine": [("id", 1, _F.TYPE_INT64, _OPT, None, None),
              ("display_id", 10, _F.TYPE_INT64, _OPT, None, None),
              ("name", 2, _F.TYPE_STRING, _OPT, None, None),
              ("display_name", 11, _F.TYPE_STRING, _OPT, None, None),
              ("timestamp_ns", 3, _F.TYPE_INT64, _OPT, None, None),
              ("duration_ps", 9, _F.TYPE_INT64, _OPT, None, None),
              ("events", 4, _F.TYPE_MESSAGE, _REP, "XEvent", None)],
    "XEvent": [("metadata_id", 1, _F.TYPE_INT64, _OPT, None, None),
               ("offset_ps", 2, _F.TYPE_INT64, _OPT, None, 0),
               ("num_occurrences", 5, _F.TYPE_INT64, _OPT, None, 0),
               ("duration_ps", 3, _F.TYPE_INT64, _OPT, None, None),
               ("stats", 4, _F.TYPE_MESSAGE, _REP, "XStat", None)],
    "XStat": [("metadata_id", 1, _F.TYPE_INT64, _OPT, None, None),
              ("double_value", 2, _F.TYPE_DOUBLE, _OPT, None, 0),
              ("uint64_value", 3, _F.TYPE_UINT64, _OPT, None, 0),
              ("int64_value", 4, _F.TYPE_INT64, _OPT, None, 0),
              ("str_value", 5, _F.TYPE_STRING, _OPT, None, 0),
              ("bytes_value", 6, _F.TYPE_BYTES, _OPT, None, 0),
              ("ref_value", 7, _F.TYPE_UINT64, _OPT, None, 0)],
    "XEventMetadata": [("id", 1, _F.TYPE_INT64, _OPT, None, None),
                       ("name", 2, _F.TYPE_STRING, _OPT, None, None),
                       ("display_name", 4, _F.TYPE_STRING, _OPT, None, None),
                       ("metadata", 3, _F.TYPE_BYTES, _OPT, None, None),
                       ("stats", 5, _F.TYPE_MESSAGE, _REP, "XStat", None),
                       ("child_id", 6, _F.TYPE_INT64, _REP, None, None)],
    "XStatMetadata": [("id", 1, _F.TYPE_INT64, _OPT, None, None),
                      ("name", 2, _F.TYPE_STRING, _OPT, None, None),
                      ("description", 3, _F.TYPE_STRING, _OPT, None, None)],
}
# A plane whose lines stay bytes (harness.trace.space parses a plane's metadata with it).
_SCHEMA["XPlaneLazy"] = [
    (n, num, _F.TYPE_BYTES, _REP, None, None) if n == "lines"
    else (n, num, t, lab, tn.replace("XPlane.", "XPlaneLazy.") if tn else tn, o)
    for n, num, t, lab, tn, o in _SCHEMA["XPlane"]]
# A line with each event left as its bytes: protobuf's C parser splits the events, numpy reads
# their fields (harness.trace.wire).
_SCHEMA["XLineSplit"] = [(n, num, _F.TYPE_BYTES, _REP, None, None) if n == "events"
                         else (n, num, t, lab, tn, o) for n, num, t, lab, tn, o in _SCHEMA["XLine"]]
_ONEOFS = {"XEvent": "data", "XStat": "value"}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


def _add_fields(msg: descriptor_pb2.DescriptorProto, fields: list[tuple]) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


def _build() -> dict[str, type]:
    fdp = descriptor_pb2.FileDescriptorProto(name="scaling_harness_xplane.proto",
                                             package=_PACKAGE, syntax="proto3")
    for name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=name)
        if name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[name])
        _add_fields(msg, fields)
        if name in ("XPlane", "XPlaneLazy"):
            for entry, value in _MAPS.items():
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                _add_fields(nested, [("key", 1, _F.TYPE_INT64, _OPT, None, None),
                                     ("value", 2, _F.TYPE_MESSAGE, _OPT, value, None)])
    return message_classes(fdp, _SCHEMA)


def message_classes(fdp: descriptor_pb2.FileDescriptorProto, names) -> dict[str, type]:
    """The message classes, by name, of the messages ``names`` of a file descriptor declared
    by hand (``fdp``): protobuf's C implementation decodes them without a generated module."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{n}"))
            for n in names}


_CLASSES = _build()
XSpace = _CLASSES["XSpace"]
XPlane = _CLASSES["XPlane"]
XLine = _CLASSES["XLine"]
XEvent = _CLASSES["XEvent"]
XStat = _CLASSES["XStat"]
XPlaneLazy = _CLASSES["XPlaneLazy"]
XLineSplit = _CLASSES["XLineSplit"]
