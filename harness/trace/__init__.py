"""Stage 2: a profiler trace (``*.xplane.pb``) -> EVENTS, one row per device op execution.

``space`` opens a trace a piece at a time (planes' metadata read, lines left on disk),
``wire`` reads a line as columns with numpy (``varint``, ``stats``; ``xplane`` declares the
protobuf schema), ``parallel`` shares lines, planes or hosts among worker processes, ``planes``
holds the lookups the formats share (``codes``: the names they collect, as integer codes),
``cpu``, ``gpu`` and ``tpu`` read where each backend puts its ops (``graphs`` attributes the
kernels of CUDA graphs to HLO ops), ``hlo_proto`` reads the compiled HLO a trace carries,
``device`` what its device planes say about the hardware, ``load`` picks the format
(``formats``) and builds the table; ``hosts`` reads one profile's traces of several hosts as one
job's, ``segments`` one host's trace recorded in segments as one trace, ``located`` finds a trace
under a path with the other hosts' or segments and what ``harness`` saved beside it, and
``decode`` reads what was found once, with the HLO of each program that ran parsed once.

Importing this package imports neither pandas nor the formats' readers: the names below load
``harness.trace.load`` on first use, so that ``harness trace`` can open a trace and start its
decode first (``opener.start_decode``).
"""
__all__ = ["TraceEvents", "load_events", "read_events"]


def __getattr__(name: str):
    if name in __all__:
        from harness.trace import load

        return getattr(load, name)
    raise AttributeError(f"module 'harness.trace' has no attribute {name!r}")
