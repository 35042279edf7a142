"""A registered workload end to end: build -> capture -> analyse -> store in results/<run-id>/."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import secrets
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from harness import schema
from harness.analysis import Analysis, analyze_capture
from harness.book import Analytic, analytic
from harness.capture import capture
from harness.runs import store
from predictions import hardware

log = logging.getLogger(__name__)


def new_run_id(workload: str) -> str:
    now = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{now}-{workload}-{secrets.token_hex(2)}"


def list_workloads() -> pd.DataFrame:
    import workloads  # deferred: importing workloads imports jax

    return pd.DataFrame([{"workload": w.name, "presets": ", ".join(w.presets),
                          "default mesh": w.default_mesh, "description": w.description}
                         for w in workloads.WORKLOADS.values()])


def save_analysis(a: Analysis, path: Path, extra: dict[str, str | bytes] | None = None) -> Path:
    """Store an analysis as a run directory (atomically): its report, per-step samples, XLA
    cross-check and trace; ``extra`` maps more file names to contents (a multi-host run's
    per-device table). ``store.load(path).report`` gives the report back."""
    return store.save_report(path, a.report, steps=a.steps,
                             meta={schema.CROSS_CHECK: a.cross_check}, extra=extra,
                             trace_dir=a.capture.trace_dir)


@dataclasses.dataclass
class Built:
    """A workload ready to run: its record, config, mesh, and ``fn(*args)``."""

    workload: object
    cfg: object
    mesh: object
    fn: object
    args: tuple

    @property
    def meta(self) -> dict:
        return {schema.WORKLOAD: self.workload.name, schema.CONFIG: _config_dict(self.cfg),
                schema.MESH: {str(k): int(v) for k, v in dict(self.mesh.shape).items()}}

    def expected_collectives(self) -> dict[str, int] | None:
        return self.workload.expected_collectives(self.cfg, self.mesh)

    def book(self, chip) -> Analytic | None:
        """The book's workload-level figures on ``chip`` (`harness.book`)."""
        return analytic(self.workload.name, self.cfg, self.mesh, chip)


def build_workload(name: str, preset: str = "tiny", overrides: dict | None = None,
                   mesh: str | None = None) -> Built:
    """Build registered workload ``name`` on ``mesh`` (default: the workload's own)."""
    import workloads  # deferred: importing workloads imports jax
    from workloads.mesh import make_mesh

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    jmesh = make_mesh(mesh or wl.default_mesh, axis_names=wl.mesh_axes)
    fn, args = wl.build(cfg, jmesh)
    return Built(wl, cfg, jmesh, fn, tuple(args))


def run_workload(name: str, *, preset: str = "tiny", overrides: dict | None = None,
                 mesh: str | None = None, steps: int = 5, warmup: int = 2,
                 out: Path = Path("results"), chip=None,
                 command_buffers: bool = False) -> tuple[Analysis, Path]:
    """Run workload ``name`` and store it under ``out``; returns the analysis and the run path.
    ``command_buffers``: on GPU, trace the executable with XLA's command buffers on."""
    if chip is not None:  # a bad chip name fails before anything is compiled
        chip = hardware.chip_entry(chip)
    built = build_workload(name, preset, overrides, mesh)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Capture into a scratch directory beside the run; store.save moves it into place.
    scratch = Path(tempfile.mkdtemp(prefix=store.TMP_PREFIX + "capture-", dir=out))
    try:
        log.info("running %s (%s) on mesh %s", name, preset, dict(built.mesh.shape))
        cap = capture(built.fn, built.args, warmup=warmup, steps=steps,
                      out_dir=scratch / "trace", mesh=built.mesh, command_buffers=command_buffers)
        meta = dict(built.meta, **{schema.PRESET: preset, schema.OVERRIDES: overrides or {}})
        analysis = analyze_capture(cap, chip=chip, meta=meta, book=built.book,
                                   expected_collectives=built.expected_collectives(),
                                   title=f"{name} ({preset}) on mesh {meta[schema.MESH]}")
        path = save_analysis(analysis, out / new_run_id(name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return analysis, path


def _config_dict(cfg) -> dict:
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {"repr": repr(cfg)}
