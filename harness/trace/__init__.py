"""Stage 2: a profiler trace (``*.xplane.pb``) -> EVENTS, one row per device op execution.

``xplane`` decodes the protobuf, ``planes`` holds the lookups the layouts share, ``cpu`` and
``device`` read where each backend puts its ops, ``load`` picks the layout and builds the table.
"""
from harness.trace.load import TraceEvents, load_events, read_events

__all__ = ["TraceEvents", "load_events", "read_events"]
