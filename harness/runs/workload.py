"""A registered workload end to end: build -> capture -> ``pipeline.from_capture`` -> a Run
stored in results/<run-id>/."""
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
from harness.capture import memory
from harness.capture.steps import STEPS, capture
from harness.chip import drift
from harness.errors import HarnessError
from harness.record import Run
from harness.report import files as report_files
from harness.report.heading import mesh_str
from harness.runs.loop import run_loop
from harness.runs.pipeline import from_capture
from harness.runs.scratch import clean_stale_scratch, scratch_prefix
from harness.step import routing
from harness.units import fmt_bytes
from predictions import hardware
from predictions.step import Analytic

log = logging.getLogger(__name__)


def new_run_name(workload: str) -> str:
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
    return [f"{name} ({fmt_bytes(sum(w.memory(cfg, None).values()))})"
            for name, cfg in w.presets.items()]


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

    def run_meta(self, preset: str, overrides: dict | None) -> dict:
        """What a run of it keeps of what ran: ``meta``, the preset and the overrides."""
        return dict(self.meta, **{schema.PRESET: preset, schema.OVERRIDES: overrides or {}})

    def title(self, preset: str, suffix: str = "") -> str:
        return (f"{self.workload.name} ({preset}) on mesh {mesh_str(self.meta[schema.MESH])}"
                f"{suffix}")

    def expected_collectives(self) -> dict[str, int] | None:
        return self.workload.expected_collectives(self.cfg, self.mesh)

    def book(self, chip) -> Analytic | None:
        """The book's workload-level figures on ``chip`` (the record's ``Workload.book``)."""
        book = self.workload.book
        return book(self.cfg, self.mesh, chip) if book is not None else None

    def estimate(self, chip) -> tuple[Analytic | None, str]:
        """``book(chip)``, or None and a note saying why the chip has no estimate."""
        try:
            return self.book(chip), ""
        except (ValueError, KeyError) as e:  # e.g. a mesh axis the chip's topology cannot hold
            return None, f"no workload-level prediction on {chip.name}: {e}"


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
                 command_buffers: bool = False, with_plots: bool = True,
                 with_memory: bool = False) -> Run:
    """Run workload ``name`` and store it under ``out`` (``run.path``), its report beside it
    (``harness.report.files``). ``command_buffers``: on GPU, trace the executable with XLA's
    command buffers on; ``with_plots`` False: store the run without its PNG plots (a sweep
    point: matplotlib costs more than the step); ``with_memory``: add the memory section
    (``harness.memory.report.of_run``: a second compile, with XLA's dump) under
    ``schema.MEMORY`` in its meta."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out}: is a file; give a directory for the runs "
                           "(default results/)")
    if chip is not None:  # a bad chip name fails before anything is compiled
        chip = hardware.chip_entry(chip)
    what = f"{name} ({preset})" + (f" on mesh {mesh}" if mesh else "")
    with memory.oom_as_error(what, _knobs(name)):
        built = build_workload(name, preset, overrides, mesh)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HarnessError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    clean_stale_scratch(out)
    # Capture into a scratch directory beside the run; Run.save moves it into place. Its
    # name holds this process's id, so a later run can tell a killed run's scratch.
    scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix("capture"), dir=out))
    try:
        with memory.oom_as_error(what, _knobs(name)):
            if getattr(built.workload, "loop", None) is not None:  # a loop of programs, whole
                run = run_loop(built, preset=preset, overrides=overrides,
                               out_dir=scratch / "trace", chip=chip)
            else:
                run = run_built(built, preset=preset, overrides=overrides, steps=steps,
                                warmup=warmup, out_dir=scratch / "trace", chip=chip,
                                command_buffers=command_buffers)
        if with_memory:
            run.meta[schema.MEMORY] = _memory(built, preset, overrides, run).to_dict()
        moe = _routing(built, run)  # an MoE's routing, measured (issue 54)
        if moe:
            run.meta[routing.ROUTING] = moe
        run.save(out / new_run_name(name), files=lambda r: report_files(r, plots=with_plots))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return run


def run_built(built: Built, *, preset: str, overrides: dict | None, out_dir: Path,
              steps: int = STEPS, warmup: int = 2, chip=None, command_buffers: bool = False,
              meta: dict | None = None) -> Run:
    """Capture a built workload into ``out_dir`` and make its Run (not saved): on a CPU host,
    the host's speed is measured right before and after the capture (``calibrate.drift``).
    ``meta`` adds to what the run keeps of what ran."""
    log.info("running %s (%s) on mesh %s", built.workload.name, preset, dict(built.mesh.shape))
    before = drift.probe(built.mesh.devices.flat)
    cap = capture(built.fn, built.args, warmup=warmup, steps=steps, out_dir=out_dir,
                  mesh=built.mesh, command_buffers=command_buffers, carry=built.workload.carry)
    host = drift.record(before, drift.probe(built.mesh.devices.flat))
    return from_capture(cap, chip=chip, workload=built, host_drift=host, notes=cap.notes,
                        meta=dict(meta or {}, **built.run_meta(preset, overrides)),
                        title=built.title(preset))


def _memory(built: Built, preset: str, overrides: dict | None, run: Run):
    """The run's memory report (``harness.memory.report.of_run``), compiled as ``harness
    memory RUN`` compiles it (the run's workload, preset, overrides and mesh by role), for the
    TPU slice the run ran on where it ran on one (else on virtual CPU devices)."""
    from harness.memory.report import of_run
    from predictions.mesh import mesh_label

    chip = getattr(run.chip, "name", None) if run.meta.get("platform") == "tpu" else None
    return of_run(built.workload.name, preset, overrides,
                  mesh_label(built.meta[schema.MESH]) or None, chip, built.mesh.devices.flat)


def _routing(built: Built, run: Run) -> dict | None:
    """The routing section of an MoE run (``harness.step.routing.of_built``; None if dense),
    from the captured program's HLO as the analysis parsed it (``run.modules``: not again)."""
    if not getattr(built.cfg, "E", 0):
        return None
    from harness.explain.routed import routed_matmuls

    captured = getattr(run.capture, "program", "")
    module = next((m for (name, _), m in run.modules.items() if name == captured), None)
    return routing.of_built(built, run, module,
                            routed_matmuls(module) if module is not None else None)


def _knobs(name: str) -> str:
    """The memory knobs workload ``name`` has: a bigger mesh, then its own
    (``Workload.memory_knobs``)."""
    import workloads

    try:
        own = workloads.get(name).memory_knobs
    except workloads.WorkloadError:  # an unknown workload: only the mesh
        own = {}
    return ", ".join(["--mesh over more devices", *own.values()])


def _config_dict(cfg) -> dict:
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {"repr": repr(cfg)}
