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

from harness import memory, schema
from harness.analysis import Analysis, analyze_capture
from harness.calibrate import drift
from harness.capture import STEPS, capture
from harness.errors import HarnessError
from harness.runs import store
from predictions import hardware
from predictions.step import Analytic

log = logging.getLogger(__name__)


def new_run_id(workload: str) -> str:
    now = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{now}-{workload}-{secrets.token_hex(2)}"


def list_workloads() -> pd.DataFrame:
    import jax

    import workloads
    from workloads.mesh import default_shape, shape_str

    n = jax.device_count()
    return pd.DataFrame([{"workload": w.name, "presets": ", ".join(_presets(w)),
                          "default mesh": shape_str(default_shape(n, len(w.mesh_axes))),
                          "description": w.description}
                         for w in workloads.WORKLOADS.values()])


def _presets(w) -> list[str]:
    """Preset names, each with its analytic memory need on one device when the workload has one
    (``Workload.memory``)."""
    if w.memory is None:
        return list(w.presets)
    return [f"{name} ({sum(w.memory(cfg, None).values()) / 2**30:.3g} GiB)"
            for name, cfg in w.presets.items()]


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
        """The book's workload-level figures on ``chip`` (the record's ``Workload.book``)."""
        book = self.workload.book
        return book(self.cfg, self.mesh, chip) if book is not None else None


def build_workload(name: str, preset: str = "tiny", overrides: dict | None = None,
                   mesh: str | None = None) -> Built:
    """Build registered workload ``name`` on ``mesh`` (default: every device; a missing axis has
    size 1, so ``"1"`` is ``1x1`` for a 2-axis workload)."""
    import workloads  # deferred: importing workloads imports jax
    from workloads.mesh import workload_mesh

    wl = workloads.get(name)
    cfg = workloads.make_config(name, preset, overrides or {})
    jmesh = workload_mesh(wl.mesh_axes, mesh or None)
    fn, args = wl.build(cfg, jmesh)
    return Built(wl, cfg, jmesh, fn, tuple(args))


def run_workload(name: str, *, preset: str = "tiny", overrides: dict | None = None,
                 mesh: str | None = None, steps: int = STEPS, warmup: int = 2,
                 out: Path = Path("results"), chip=None,
                 command_buffers: bool = False, with_plots: bool = True
                 ) -> tuple[Analysis, Path]:
    """Run workload ``name`` and store it under ``out``; returns the analysis and the run path.
    ``command_buffers``: on GPU, trace the executable with XLA's command buffers on;
    ``with_plots`` False: the run's report without its PNG plots."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out}: is a file; give a directory for the runs "
                           "(default results/)")
    if chip is not None:  # a bad chip name fails before anything is compiled
        chip = hardware.chip_entry(chip)
    what = f"{name} ({preset})" + (f" on mesh {mesh}" if mesh else "")
    with memory.oom_as_error(what, _knobs(name, preset, overrides)):
        built = build_workload(name, preset, overrides, mesh)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HarnessError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    store.clean_stale_scratch(out)
    # Capture into a scratch directory beside the run; store.save moves it into place. Its
    # name holds this process's id, so a later run can tell a killed run's scratch.
    scratch = Path(tempfile.mkdtemp(prefix=store.scratch_prefix("capture"), dir=out))
    try:
        log.info("running %s (%s) on mesh %s", name, preset, dict(built.mesh.shape))
        before = _host_reference(built.mesh)
        with memory.oom_as_error(what, _knobs(name, preset, overrides)):
            cap = capture(built.fn, built.args, warmup=warmup, steps=steps,
                          out_dir=scratch / "trace", mesh=built.mesh,
                          command_buffers=command_buffers, carry=built.workload.carry)
        meta = dict(built.meta, **{schema.PRESET: preset, schema.OVERRIDES: overrides or {}})
        if before is not None:  # a CPU run: the host's speed around it (harness.calibrate.drift)
            meta[drift.HOST_DRIFT] = {drift.REFERENCE: [before, _host_reference(built.mesh)]}
        analysis = analyze_capture(cap, chip=chip, meta=meta, book=built.book,
                                   expected_collectives=built.expected_collectives(),
                                   title=f"{name} ({preset}) on mesh {meta[schema.MESH]}",
                                   with_plots=with_plots)
        path = save_analysis(analysis, out / new_run_id(name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return analysis, path


def _knobs(name: str, preset: str, overrides: dict | None) -> str:
    """The memory knobs workload ``name`` has: a bigger mesh, then its own
    (``Workload.memory_knobs``, the same for every preset and override)."""
    import workloads

    try:
        own = workloads.get(name).memory_knobs
    except workloads.WorkloadError:  # an unknown workload: only the mesh
        own = {}
    return ", ".join(["--mesh over more devices", *own.values()])


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
