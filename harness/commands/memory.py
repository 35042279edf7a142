"""``harness memory WORKLOAD|RUN|FILE.py:NAME``: the peak per device, predicted and compiled,
what holds it, and the buffers live at it.

``FILE.py:NAME`` is a user's own function (``harness.memory.ahead.memory_of``): NAME() returns
``(fn, args)`` or ``(fn, args, kwargs)``; compiled here, or with ``--chip tpu-*`` for that TPU
slice through libtpu, and where it does not fit, the cheapest ways to fit as advice.

A registered workload (``--preset``, ``--set``, ``--mesh``; ``--chip tpu-*`` compiles for that
TPU slice through libtpu, another chip prices its HBM as the limit) or a stored run directory
(its workload, preset, overrides and mesh are read from it and compiled again) is compiled in a
child process with XLA's dump on (``harness.memory``): the three peaks side by side (measured:
none, the program is compiled, not run), the book's model beside the compiled peak per kind
with each difference over 10% explained, and the top buffers at the peak with their source
lines. ``$SCALING_HARNESS_DEVICE_MEMORY`` sets the device's limit (then the verdict says
whether the program fits). Exit 0, or 1 where it does not fit.
"""
from __future__ import annotations

from pathlib import Path

from harness import schema
from harness.commands import add_format, add_mesh, count, parse_sets
from harness.errors import HarnessError
from predictions.mesh import mesh_label

CHECKED = {"chip": "chip", "json": "file"}


def add_arguments(p) -> None:
    p.add_argument("target", metavar="WORKLOAD|RUN|FILE.py:NAME",
                   help="a registered workload (harness list), a stored run directory, or a "
                        "function of your own: NAME() in FILE.py returns (fn, args[, kwargs])")
    p.add_argument("--preset", default="tiny", metavar="NAME",
                   help="the workload's preset (default tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable), e.g. --set remat=full")
    add_mesh(p, what="the device mesh (default: one device)")
    p.add_argument("--chip", metavar="CHIP",
                   help="a TPU chip compiles for its slice (libtpu); any chip's HBM is the "
                        "device's limit (default: CPU, no limit)")
    add_format(p, ("text", "md", "json"))
    p.add_argument("--top", type=count, default=20, metavar="N",
                   help="buffers to print (default 20; 0 = all)")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the whole report as JSON here")


def _from_run(path: Path) -> tuple[str, str, dict, str | None]:
    from harness.record import Run

    run = Run.load(path)
    workload = run.meta.get(schema.WORKLOAD)
    if not workload:
        raise HarnessError(f"{path}: not a workload's run (no workload in its meta.json); "
                           "harness memory compiles a workload again")
    mesh = mesh_label(run.meta.get(schema.MESH) or {}) or None  # by role where it has roles
    return workload, run.meta.get(schema.PRESET, "tiny"), \
        dict(run.meta.get(schema.OVERRIDES) or {}), mesh


def _is_function(target: str) -> bool:
    """``FILE.py:NAME``: a user's own function (``harness.memory.ahead.load_target``)."""
    return target.rpartition(":")[0].endswith(".py")


def main(args) -> int:
    from harness.memory import of_workload
    from harness.memory.render import render, to_json

    target = Path(args.target)
    if _is_function(args.target):
        name = preset = mesh = None
    elif target.suffix == ".py":
        raise HarnessError(f"{target}: name the function in it, {target}:NAME, where NAME() "
                           "returns (fn, args) or (fn, args, kwargs)")
    elif target.is_dir():
        name, preset, overrides, mesh = _from_run(target)
        overrides.update(parse_sets(args.overrides))
    else:
        name, preset, overrides, mesh = args.target, args.preset, parse_sets(args.overrides), None
    if _is_function(args.target):  # FILE.py:NAME, a user's own function (harness.memory.ahead)
        from harness.memory.ahead import load_target, memory_of

        fn, fargs, fkwargs = load_target(args.target)
        report = memory_of(fn, *fargs, chip=args.chip, **fkwargs)
    else:
        report = of_workload(name, preset, overrides, args.mesh or mesh, args.chip)
    print(render(report, args.format, args.top), end="")
    if args.json is not None:
        try:
            args.json.write_text(to_json(report))
        except OSError as e:
            raise HarnessError(f"--json {args.json}: cannot write it ({e.strerror or e})"
                               ) from None
    return 1 if report.fits is False else 0
