"""xprof's own per-op statistics of a trace, the peer the trace tests compare with: its
``hlo_stats`` tool (``xprof.convert.raw_to_tool_data.xspace_to_tool_data``), run on a copy of
the trace in a directory of the test's (xprof writes cache files beside the trace)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from harness.trace.load import find_trace_file


def hlo_stats(trace: Path, scratch: Path) -> pd.DataFrame:
    """One row per (program id, op) as xprof lists them: ``program_id``, ``hlo_op_name``,
    ``occurrences`` (over every device and execution), ``total_self_time`` (microseconds),
    ``model_flop_rate``, ``measured_memory_bw``, ..."""
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    copy = scratch / "vm.xplane.pb"
    shutil.copy(find_trace_file(trace), copy)
    data = json.loads(xspace_to_tool_data([str(copy)], "hlo_stats", {})[0])
    cols = [c["id"] for c in data["cols"]]
    return pd.DataFrame([{c: (v or {}).get("v") for c, v in zip(cols, r["c"])}
                         for r in data["rows"]], columns=cols)
