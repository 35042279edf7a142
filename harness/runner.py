"""The pipeline on a registered workload: build -> capture -> parse -> per-op table."""
from __future__ import annotations

import datetime as _dt
import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.capture import Capture, capture
from harness.ops import op_times
from harness.trace import load_events

log = logging.getLogger(__name__)


@dataclass
class Run:
    path: Path
    capture: Capture
    events: pd.DataFrame
    ops: pd.DataFrame
    meta: dict = field(default_factory=dict)

    @property
    def title(self) -> str:
        m = self.meta
        return (f"{m.get('workload', '')} on {m.get('device_count', '?')}x "
                f"{m.get('device_kind', '?')} mesh {m.get('mesh', {})}")


def new_run_id(workload: str) -> str:
    now = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{now}-{workload}-{secrets.token_hex(2)}"


def list_workloads() -> pd.DataFrame:
    import workloads

    return pd.DataFrame([{"workload": w.name, "presets": ", ".join(w.presets),
                          "description": w.description} for w in workloads.WORKLOADS.values()])


def run_workload(name: str, *, preset: str = "tiny", overrides: dict | None = None,
                 mesh: str | None = None, steps: int = 5, warmup: int = 2,
                 out: Path = Path("results")) -> Run:
    import workloads
    from workloads.mesh import make_mesh

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    jmesh = make_mesh(mesh, axis_names=wl.mesh_axes)
    fn, args = wl.build(cfg, jmesh)
    path = Path(out) / new_run_id(name)
    log.info("running %s into %s", name, path)
    cap = capture(fn, args, warmup=warmup, steps=steps, out_dir=path / "trace", mesh=jmesh)
    events = load_events(cap.trace_dir)
    meta = dict(cap.meta, workload=name, preset=preset, overrides=overrides or {})
    return Run(path=path, capture=cap, events=events, ops=op_times(events), meta=meta)
