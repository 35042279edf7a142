"""``harness explain``'s report of a path: a stored run directory (its COLLECTIVES table, or for
a run saved before there was one, made from the HLO its trace carries), any profiler trace
(``*.xplane.pb`` or a directory holding one, analysed through ``pipeline.analyze_trace``) or a
file of compiled HLO text, explained as it is, not run (``chip`` for roofline times).

``explain_path`` gives the title, the table and the lines on repeated work; ``explained_text``
the table ranked by exposed time, then each collective's reason in a sentence and the book's
fix; ``rendered`` that in any of ``FORMATS`` (``harness explain --format``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import schema
from harness.errors import HarnessError

SHOWN = (schema.OP, schema.COLLECTIVE, schema.SOURCE_LINE, schema.MESH_AXES,
         schema.DEVICE_BYTES, schema.COUNT, schema.REASON, schema.PREDICTED_S,
         schema.MEASURED_S, schema.EXPOSED_COMM_S)


@dataclass
class Explained:
    """What is explained (its title), its COLLECTIVES table (None or empty: no collectives),
    one line per finding on the work the layout repeats and its routed matmuls (an MoE's
    expert matmuls, ``schema.ROUTED``; None or empty: none)."""

    title: str
    table: pd.DataFrame | None
    extra: list[str]
    routed: pd.DataFrame | None = None


def explain_path(path: Path, chip: str | None = None, program: str = "",
                 mesh: dict | None = None, network=None) -> Explained:
    """The collectives of ``path`` (a run directory, a trace or HLO text), of ``program``
    (default: the run's, else the longest that ran), on the named ``mesh`` axes (default: the
    run's), predicted for ``chip`` (default: the trace's accelerator); ``network`` (a
    ``harness.chip.network.Declared``): priced at the network levels each crosses, and each
    reason naming the level that binds."""
    from harness.explain import routed_report
    from harness.report import heading

    if not path.exists():
        raise HarnessError(f"{path}: no such run directory or trace file")
    if is_hlo_text(path):
        return _static(path, chip, mesh, network)
    run, table = _load(path, chip, program, mesh)
    check_mesh(mesh, run.meta.get(schema.DEVICE_COUNT))
    if network is not None and network.given:
        table = _on_network(run, path, chip, program, mesh, network)
    try:
        module = run_module(run, path)
    except HarnessError:  # a run that keeps no trace: no HLO to read
        module = None
    return Explained(heading.title(run), table, _redundant(run, module, mesh),
                     routed_report.table(module))


def _on_network(run, path: Path, chip: str | None, program: str, mesh: dict | None, network):
    """The run's COLLECTIVES table again with each collective priced at the levels it crosses
    on the declared network (its measured and exposed times the run's)."""
    from harness.analysis.mesh import run_mesh
    from harness.analysis.programs import of_program
    from harness.chip.network import resolve
    from harness.explain import collectives
    from harness.hlo import hlo_costs

    module = run_module(run, path)
    chip = chip or run.meta.get(schema.CHIP)
    system = resolve(network, chip, run.meta.get(schema.DEVICE_COUNT) or module.num_devices)
    table = collectives(module, mesh=mesh or run_mesh(run.meta), ops=run.ops, step=run.step,
                        program_id=str(run.meta.get(schema.PROGRAM_ID) or ""), system=system,
                        priced=hlo_costs(module, system.chip, system=system))
    return of_program(table, program or _step_program(run))


def explained_text(e: Explained, top: int) -> str:
    """The table (its ``top`` rows, all for 0) with its legend, each row's reason and fix, and
    the lines on repeated work; a program with no collectives says so."""
    from harness.report import tables

    extra = "".join(f"{line}\n" for line in e.extra)
    if e.table is None or not len(e.table):
        return f"{e.title}: no collectives: every op runs on its own device's data\n" + extra
    from harness.measure.programs import compilations

    shown = e.table if top == 0 else e.table.head(top)
    n = len(e.table)
    # several compilations: each row names its program and program id
    several = len(compilations(e.table)) > 1
    columns = [*((schema.PROGRAM, schema.PROGRAM_ID) if several else ()), *SHOWN]
    out = [tables.to_text(shown[[c for c in columns if c in shown.columns]],
                          title=f"{e.title}: {n} collective{'s' * (n != 1)}, most exposed first")]
    for _, row in shown.iterrows():
        where = f" ({row[schema.SOURCE_LINE]})" if row[schema.SOURCE_LINE] else ""
        out.append(f"{row[schema.OP]}{where}: {row[schema.WHY]}\n")
        if row[schema.FIX]:
            out.append(f"  fix: {row[schema.FIX]}\n")
    return "".join(out) + extra + tables.legend_text(columns) + "\n"


def _markdown(e: Explained, top: int) -> str:
    """The table (its ``top`` rows) as a Markdown table, each row's reason and fix a bullet."""
    from harness.report import tables

    extra = "".join(f"\n{line}\n" for line in e.extra)
    if e.table is None or not len(e.table):
        return f"**{e.title}**: no collectives\n{extra}"
    shown = e.table if top == 0 else e.table.head(top)
    table = tables.to_markdown(shown[[c for c in SHOWN if c in shown.columns]])
    bullets = []
    for _, row in shown.iterrows():
        fix = f"; fix: {row[schema.FIX]}" if row[schema.FIX] else ""
        bullets.append(f"- `{row[schema.OP]}`: {row[schema.WHY]}{fix}\n")
    return f"## {e.title}\n\n{table}\n{''.join(bullets)}{extra}"


def _json(e: Explained, top: int) -> str:
    """Every collective (``top`` is for reading; a file keeps them all), each row whole."""
    from harness.units import json_text

    rows = [] if e.table is None else json.loads(e.table.to_json(orient="records"))
    routed = [] if e.routed is None else json.loads(e.routed.to_json(orient="records"))
    return json_text({"title": e.title, "collectives": rows, "repeated_work": e.extra,
                      "routed_matmuls": routed}) + "\n"


def _csv(e: Explained, top: int) -> str:
    return "" if e.table is None else e.table.to_csv(index=False)


# harness explain --format: each writes the report of ``Explained`` (``top`` rows for reading)
FORMATS = {"text": explained_text, "md": _markdown, "json": _json, "csv": _csv}


def rendered(e: Explained, fmt: str, top: int) -> str:
    """The report in ``fmt``, an MoE's routed matmuls after the collectives (csv: a second
    table after one blank line; json holds them in its object)."""
    from harness.explain import routed_report as rr
    from harness.report import tables as t

    r = e.routed
    after = {"text": lambda: t.to_text(rr.shown(r), title=rr.title(r)) + rr.forms(r) +
             t.legend_text(list(rr.shown(r).columns)) + "\n",
             "md": lambda: f"\n### {rr.title(r)}\n\n{t.to_markdown(rr.shown(r))}\n"
                           f"{rr.forms(r, '- ')}",
             "csv": lambda: "\n" + r.to_csv(index=False), "json": lambda: ""}
    return FORMATS[fmt](e, top) + (after[fmt]() if r is not None and len(r) else "")


def _trace_of(run, path: Path) -> Path:
    """Where a stored run's trace is: the file it was analysed from, where it still is, else
    the run's own ``trace/`` (which may not exist)."""
    from harness.record.store import TRACE_DIR

    found = run.meta.get(schema.TRACE_FILE)
    return Path(found) if found and Path(found).exists() else path / TRACE_DIR


def run_module(run, path: Path):
    """The program's parsed HLO: from the trace the run was analysed from (a stored run's
    ``trace/``), else the HLO ``harness`` saved beside it."""
    from harness.hlo import parse_module
    from harness.trace.decode import NoHlo
    from harness.trace.hlo_proto import trace_program
    from harness.trace.load import find_trace_file, read_xspace
    from harness.trace.located import saved_beside

    where = _trace_of(run, path)
    if not where.exists():
        raise HarnessError(f"{path}: the run keeps no trace/, so its HLO is unknown; explain "
                           f"the trace it was made from instead")
    trace_file = find_trace_file(where)
    program = run.meta.get(schema.PROGRAM_ID) or run.meta.get(schema.PROGRAM, "")
    text, _ = trace_program(read_xspace(trace_file)[0], program)
    text = text or saved_beside(trace_file, trace_file.parent).get("hlo_text")
    if not text:
        raise NoHlo(f"{path}: its trace holds no HLO, and none was saved beside it")
    return parse_module(text)


def _load(path: Path, chip: str | None, program: str, mesh: dict | None):
    """The run (stored, or analysed from the trace) and its COLLECTIVES table."""
    from harness.analysis.mesh import run_mesh
    from harness.analysis.programs import of_program
    from harness.explain import collectives
    from harness.record import Run
    from harness.record.run import OPS_PARQUET
    from harness.record.store import META
    from harness.runs import pipeline

    # a run directory, or any folder holding a trace (a profile dir, a run reduced to its
    # meta and trace)
    if not (path.is_dir() and (path / META).is_file() and (path / OPS_PARQUET).is_file()):
        run = pipeline.analyze_trace(path, chip=chip, program=program, mesh=mesh)
        return run, run.collectives
    run = Run.load(path)
    if program and not _holds(run, program):  # not stored: from the run's trace
        where = _trace_of(run, path)
        if not where.exists():
            raise HarnessError(f"{path}: the run stores no program {program!r} and keeps "
                               f"no trace to find it in; it stores {_stored(run)}")
        run = pipeline.analyze_trace(where, chip=chip, program=program,
                                     mesh=mesh or run_mesh(run.meta))
        return run, run.collectives
    if run.collectives is not None and mesh is None:
        table = run.collectives
    else:  # a run saved before the table existed, or asked for on another mesh
        table = collectives(run_module(run, path), mesh=mesh or run_mesh(run.meta),
                            ops=run.ops, step=run.step,
                            program_id=run.meta.get(schema.PROGRAM_ID, ""))
    return run, of_program(table, program or _step_program(run))


def _holds(run, program: str) -> bool:
    """Whether the stored run's ops are of ``program`` (a name, a program id; all: of every
    program its programs table lists)."""
    from harness.measure.programs import ALL, chosen, compilations

    stored = compilations(run.ops)
    if program == ALL:
        return run.programs is None or len(run.programs) <= len(stored)
    return any(chosen(key, program) for key in stored)


def _stored(run) -> str:
    from harness.measure.programs import compilations, program_name

    return ", ".join(program_name(k) for k in compilations(run.ops)) or "none"


def _step_program(run) -> str:
    """The program id (else the name) of the program a stored run's step and summary are of."""
    return str(run.meta.get(schema.PROGRAM_ID) or run.meta.get(schema.PROGRAM) or "")


def _redundant(run, module, mesh: dict | None) -> list[str]:
    """Lines on the work the layout repeats: the program's FLOPs over the model's, and each
    dot that repeats its work over some mesh axes (``harness.explain.redundant``)."""
    from harness.analysis.mesh import run_mesh
    from harness.explain import redundant
    from harness.report.tables import fmt_number

    s = run.summary
    factor = redundant.program_factor(s.get(schema.HLO_FLOPS_PER_DEVICE), s.get(schema.DEVICES),
                                      s.get(schema.MODEL_FLOPS))
    lines = []
    if factor is not None:
        lines.append(f"{schema.REDUNDANT_WORK}: the program does {factor:.2f}x the model's "
                     f"FLOPs ({fmt_number(s[schema.HLO_FLOPS_PER_DEVICE])} per device x "
                     f"{s[schema.DEVICES]} devices / {fmt_number(s[schema.MODEL_FLOPS])})")
    mesh = mesh or run_mesh(run.meta)
    if mesh is None or module is None:
        return lines
    return lines + redundant.repeated_lines(module, mesh)


def check_mesh(mesh: dict | None, devices) -> None:
    """A ``--mesh`` must hold the program's devices: its groups are mapped onto it."""
    if mesh and devices and math.prod(mesh.values()) != int(devices):
        shape = ",".join(f"{k}={v}" for k, v in mesh.items())
        raise HarnessError(f"--mesh {shape} has {math.prod(mesh.values())} devices; the program "
                           f"runs on {int(devices)}")


def is_hlo_text(path: Path) -> bool:
    """A file of HLO text (``compiled.as_text()``, an XLA dump's ``*after_optimizations.txt``)
    rather than a trace."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(64).lstrip().startswith(b"HloModule")


def _static(path: Path, chip: str | None, mesh: dict | None, network=None) -> Explained:
    """A compiled program's HLO text, not run: each collective's roofline time on ``chip``
    where one is given (at the levels it crosses on a declared ``network``), nothing
    measured."""
    from harness.chip.network import resolve
    from harness.explain import collectives, redundant, routed_report
    from harness.hlo import hlo_costs, parse_module

    module = parse_module(path.read_text())
    check_mesh(mesh, module.num_devices)
    system = resolve(network, chip, module.num_devices) if network is not None else None
    ops = hlo_costs(module, chip, system=system) if chip else None
    said = f", predicted for {chip}" if chip else " (--chip for roofline times)"
    said += f" on {system.name}" if system is not None else ""
    title = f"{module.name} ({path.name}: HLO text, not run{said})"
    extra = redundant.repeated_lines(module, mesh) if mesh is not None else []
    return Explained(title, collectives(module, mesh=mesh, ops=ops, system=system), extra,
                     routed_report.table(module))
