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

from harness import report as report_mod
from harness.analysis import Analysis, analyze_capture
from harness.book import Analytic, analytic
from harness.calibrate import drift
from harness.capture import capture
from harness.runs import store

log = logging.getLogger(__name__)

REPORT_FORMATS = {"report.md": "md", "report.html": "html"}


def new_run_id(workload: str) -> str:
    now = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{now}-{workload}-{secrets.token_hex(2)}"


def list_workloads() -> pd.DataFrame:
    import workloads

    return pd.DataFrame([{"workload": w.name, "presets": ", ".join(w.presets),
                          "default mesh": w.default_mesh, "description": w.description}
                         for w in workloads.WORKLOADS.values()])


def save_analysis(a: Analysis, path: Path, extra: dict[str, str | bytes] | None = None) -> Path:
    """Store an analysis as a run directory (atomically), with its reports and plots;
    ``extra`` maps more file names to contents (a multi-host run's per-device table)."""
    reports: dict[str, str | bytes] = {name: report_mod.render(a.report, fmt)
                                       for name, fmt in REPORT_FORMATS.items()}
    reports.update(a.report.plots)
    reports.update(extra or {})
    if a.report.unexpected is not None and not a.report.unexpected.empty:
        reports[store.UNEXPECTED_CSV] = a.report.unexpected.to_csv(index=False)
    meta = dict(a.meta, title=a.report.title, summary=a.summary, notes=a.report.notes,
                cross_check=a.cross_check, git_sha=store.git_sha())
    return store.save(path, meta, a.ops, steps=a.steps, categories=a.categories,
                      reports=reports, trace_dir=a.capture.trace_dir)


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
        return {"workload": self.workload.name, "config": _config_dict(self.cfg),
                "mesh": {str(k): int(v) for k, v in dict(self.mesh.shape).items()}}

    def expected_collectives(self) -> dict[str, int] | None:
        return self.workload.expected_collectives(self.cfg, self.mesh)

    def book(self, chip) -> Analytic | None:
        """The book's workload-level figures on ``chip`` (`harness.book`)."""
        return analytic(self.workload.name, self.cfg, self.mesh, chip)


def build_workload(name: str, preset: str = "tiny", overrides: dict | None = None,
                   mesh: str | None = None) -> Built:
    """Build registered workload ``name`` on ``mesh`` (default: the workload's own)."""
    import workloads
    from workloads.mesh import make_mesh

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    jmesh = make_mesh(mesh or wl.default_mesh, axis_names=wl.mesh_axes)
    fn, args = wl.build(cfg, jmesh)
    return Built(wl, cfg, jmesh, fn, tuple(args))


def run_workload(name: str, *, preset: str = "tiny", overrides: dict | None = None,
                 mesh: str | None = None, steps: int = 5, warmup: int = 2,
                 out: Path = Path("results"), chip=None,
                 with_plots: bool = True) -> tuple[Analysis, Path]:
    """Run workload ``name`` and store it under ``out``; returns the analysis and the run path
    (``with_plots`` False: the run's report without its PNG plots)."""
    if chip is not None:  # a bad chip name fails before anything is compiled
        from predictions import hardware

        chip = hardware.chip_entry(chip)
    built = build_workload(name, preset, overrides, mesh)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Capture into a scratch directory beside the run; store.save moves it into place.
    scratch = Path(tempfile.mkdtemp(prefix=store.TMP_PREFIX + "capture-", dir=out))
    try:
        log.info("running %s (%s) on mesh %s", name, preset, dict(built.mesh.shape))
        before = _host_reference(built.mesh)
        cap = capture(built.fn, built.args, warmup=warmup, steps=steps,
                      out_dir=scratch / "trace", mesh=built.mesh)
        meta = dict(built.meta, preset=preset, overrides=overrides or {})
        if before is not None:  # a CPU run: the host's speed around it (harness.calibrate.drift)
            meta[drift.HOST_DRIFT] = {"reference_flops_per_s": [before,
                                                                _host_reference(built.mesh)]}
        analysis = analyze_capture(cap, chip=chip, meta=meta, book=built.book,
                                   expected_collectives=built.expected_collectives(),
                                   title=f"{name} ({preset}) on mesh {meta['mesh']}",
                                   with_plots=with_plots)
        path = save_analysis(analysis, out / new_run_id(name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return analysis, path


def _host_reference(mesh) -> float | None:
    """The drift reference kernel's rate on the mesh's devices; None off CPU."""
    devices = list(mesh.devices.flat)
    if devices[0].platform != "cpu":
        return None
    return drift.reference_rate(devices)


def _config_dict(cfg) -> dict:
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {"repr": repr(cfg)}
