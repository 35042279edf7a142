"""One module per ``harness`` subcommand (see ``harness.cli.COMMANDS``).

A command module may name its checked options in ``CHECKED`` (option -> kind of ``CHECKS``):
``harness.cli`` checks each one given (``check_options``) before the command reads a trace,
compiles a program or runs a script, so that a path it cannot write ends the command in one line
with nothing printed before it, not after the work. Every output path (``--csv``, ``--json``,
``--html``, ``--junit``, ``--out``, ``--keep-trace``, ``--save``) is checked so.

One flag per idea across the commands (the table in docs/commands.md; tests/test_flags.py reads
every command's ``--help`` against it): the options several commands share are added here
(``add_format``, ``add_mesh``, ``add_layout``, ``add_warmup``, ``add_no_compile_cache``,
``add_network``), and a flag renamed keeps its old spelling for one release (``deprecated``: it
still works, hidden from ``--help``, and prints one line naming the new one).
"""
import argparse
import sys
import tempfile
from pathlib import Path

from harness.errors import HarnessError

# the one set of --format choices; each command says which of them it writes (add_format)
FORMATS = ("text", "md", "html", "json", "csv")
MESH_METAVAR = "NAME=N,..."
MESH_HELP = ("axes by name and size: by role (fsdp=4,model=2; data, fsdp, model, see "
             "docs/layouts.md) or by the book's letters (X=4,Y=2); a shape like 4x2 is still read "
             "(axes X, Y by position)")


def deprecated(p, old: str, new: str, **kwargs) -> None:
    """``old``, a spelling renamed to ``new``: it still works for one release (as ``kwargs``
    say: ``dest`` and ``action`` of the new option, or what the old one did), hidden from
    ``--help``, and prints ``harness X: --old is deprecated; use --new`` to stderr."""
    kind = kwargs.pop("action", "store")
    base = p._registry_get("action", kind, kind)

    class Deprecated(base):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"{parser.prog}: {old} is deprecated; use {new}", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    p.add_argument(old, action=Deprecated, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                   **kwargs)


def add_format(p, writes=FORMATS, default: str = "text") -> None:
    """``--format``, choices ``FORMATS`` in every command; one this command does not write is a
    one-line error naming those it does."""
    writes = tuple(f for f in FORMATS if f in writes)

    class Format(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            if values not in writes:
                parser.error(f"argument --format: {parser.prog} writes {', '.join(writes)}, "
                             f"not {values}")
            setattr(namespace, self.dest, values)

    p.add_argument("--format", choices=FORMATS, default=default, action=Format,
                   help=f"output format: this command writes {', '.join(writes)} (default "
                        f"{default})")


def add_mesh(p, default: str | None = None, what: str = "the device mesh") -> None:
    """``--mesh``: one syntax everywhere (``predictions.mesh.parse_mesh`` reads it)."""
    p.add_argument("--mesh", default=default, metavar=MESH_METAVAR,
                   help=f"{what}; {MESH_HELP}"
                        + (f" (default {default})" if default else ""))


def add_layout(p, repeat: bool = False, default: str | None = None, what: str = "") -> None:
    """``--layout``: a layout of the one registry (``predictions.layouts``)."""
    from predictions import layouts

    names = ", ".join(layouts.LAYOUTS)
    p.add_argument("--layout", dest="layouts" if repeat else "layout", metavar="LAYOUT",
                   action="append" if repeat else "store", default=[] if repeat else default,
                   help=(what or "how the model is split over the mesh") + f": {names}, or "
                        f"parts joined by '+' (docs/layouts.md)"
                        + (f"; default {default}" if default else ""))


def add_warmup(p, default: int, what: str) -> None:
    """``--warmup N``: steps left out of the measurement at the start."""
    p.add_argument("--warmup", type=count, default=default, metavar="N",
                   help=f"{what} (default {default})")


def add_no_compile_cache(p, what: str) -> None:
    """``--no-compile-cache``: compile again rather than reuse a cached compile."""
    p.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                   help=f"compile every program afresh (default: reuse {what})")


def add_network(p) -> None:
    """``--system``, ``--sharp``, ``--nodes``, ``--gpus-per-node``, ``--slices``: the network
    past one GPU node or TPU slice, which a trace cannot show (``harness.chip.network`` makes
    them a ``predictions.network.System``; docs/networks.md)."""
    from predictions import network

    g = p.add_argument_group("the network past one node or slice (docs/networks.md)")
    g.add_argument("--system", metavar="NAME", help=f"the GPU cluster's network: "
                   f"{', '.join(network.SYSTEMS)} (default the chip's, with --nodes)")
    g.add_argument("--sharp", choices=tuple(network.SHARP),
                   help="SHARP in-network AllReduce: theory (2x) or measured (1.3x) (gpus.md)")
    g.add_argument("--nodes", type=positive, metavar="N", help="GPU nodes the job spans")
    g.add_argument("--gpus-per-node", type=positive, metavar="N",
                   help="GPUs in each node's NVLink domain (default the system's)")
    g.add_argument("--slices", type=positive, metavar="N", help="TPU slices joined by DCN")


def _whole(text: str, minimum: int, too_small: str) -> int:
    """``text`` as a whole number of at least ``minimum`` (argparse's one-line error else;
    ``too_small`` says why a smaller one is refused, ``{n}`` in it the number)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {minimum}") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(too_small.format(n=n))
    return n


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    return _whole(text, 1, "{n} is not a whole number >= 1")


def level(text: str) -> float:
    """An argparse type: a number in (0, 1), a significance level."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in (0, 1)") from None
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"{x:g} is not in (0, 1)")
    return x


def count(text: str) -> int:
    """An argparse type: a whole number >= 0 (``--top 0`` = all rows)."""
    return _whole(text, 0, "{n} is negative; give a number >= 0 (0 = all)")


def parse_sets(items: list[str]) -> dict[str, str]:
    """``--set`` values: ``["B=128", "dtype=bf16"]`` -> ``{"B": "128", "dtype": "bf16"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HarnessError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _writable(option: str, path: Path, folder: Path) -> None:
    """A file can be made in ``folder``: tried, not asked (``os.access`` says yes to root for
    any folder, and to folders that take no files, such as /proc), the file removed at once."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".harness-check-"):
            pass
    except OSError as e:
        raise HarnessError(f"--{option} {path}: cannot write in {folder} "
                           f"({(e.strerror or str(e)).lower()})") from None


def _appendable(option: str, path: Path) -> None:
    """An existing file can be written over: opened to append (nothing written, not emptied)."""
    try:
        with path.open("a"):
            pass
    except OSError as e:
        raise HarnessError(f"--{option} {path}: cannot write it "
                           f"({(e.strerror or str(e)).lower()})") from None


def _existing_folder(option: str, path: Path, what: str) -> Path:
    """The nearest folder above ``path`` that exists; it must be a folder one can write in."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise HarnessError(f"--{option} {path}: {folder} is a file, not a directory; give {what}")
    _writable(option, path, folder)
    return folder


def output_file(option: str, path: Path) -> None:
    """A file the command will write: not a directory, in a directory that exists and can be
    written in. Nothing is created."""
    what = "a file path in an existing directory"
    if path.is_dir():
        raise HarnessError(f"--{option} {path}: is a directory; give {what}")
    if not path.parent.is_dir():
        why = "does not exist" if not path.parent.exists() else "is a file"
        raise HarnessError(f"--{option} {path}: {path.parent} is not a directory (it {why}); "
                           f"give {what}")
    if path.exists():
        _appendable(option, path)
    else:
        _writable(option, path, path.parent)


def output_dir(option: str, path: Path) -> None:
    """A directory the command will write in, made with its parents if missing: not a file, nor
    below one, and writable where it is or would be made. Nothing is created."""
    what = "a directory"
    if path.exists():
        if not path.is_dir():
            raise HarnessError(f"--{option} {path}: is a file; give {what}")
        _writable(option, path, path)
    else:
        _existing_folder(option, path, what)


def new_dir(option: str, path: Path) -> None:
    """A directory the command fills itself: as ``output_dir``, and empty if it exists."""
    output_dir(option, path)
    if path.exists() and any(path.iterdir()):
        raise HarnessError(f"--{option} {path}: not empty; give a new or empty directory")


def chip(option: str, names) -> None:
    """A chip name (or a list of them, a repeatable option) that the registry knows."""
    from predictions.hardware import chip_entry

    for name in [names] if isinstance(names, str) else names:
        chip_entry(name)


# kind of a checked option -> its check(option, value)
CHECKS = {"file": output_file, "dir": output_dir, "new-dir": new_dir, "chip": chip}


def check_options(module, args) -> None:
    """Check each option of ``module.CHECKED`` that was given (or has a default)."""
    for option, kind in getattr(module, "CHECKED", {}).items():
        value = getattr(args, option.replace("-", "_"), None)
        if value is not None:
            CHECKS[kind](option, Path(value) if kind != "chip" else value)


def add_distributed_arguments(p) -> None:
    """The options of a command that runs as one process of a multi-process JAX job."""
    g = p.add_argument_group("multi-host (jax.distributed; see `harness launch` to rehearse)")
    g.add_argument("--distributed", action="store_true",
                   help="run as one process of a multi-process JAX job; without the next three "
                        "options the job is auto-detected (TPU VM, SLURM, Open MPI)")
    g.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address and a port")
    g.add_argument("--num-processes", type=int, metavar="N", help="processes in the job")
    g.add_argument("--process-id", type=int, metavar="I", help="this process, 0..N-1")
    g.add_argument("--init-timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for every process to join (default 300)")


def in_job(args, command: str, body) -> int:
    """Join the multi-process job and return ``body(cluster)``.

    A process that fails after joining leaves at once (``multihost.run.leave``) with one line:
    its peers may be waiting for it in a collective, and jax's exit would wait for them.
    """
    import sys
    import traceback

    from harness.errors import one_line
    from harness.multihost import run as distributed

    def timed_out(message: str) -> None:
        print(f"harness {command}: error: {message}", file=sys.stderr)

    who = "this process" if args.process_id is None else f"process {args.process_id}"
    try:
        cluster = distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                                         timeout_s=args.init_timeout, on_timeout=timed_out)
        who = f"process {cluster.process_index}"
        return body(cluster)
    except BaseException as e:
        if not distributed.joined():
            raise  # nothing started yet: the CLI reports it
        import jax

        if isinstance(e, (HarnessError, ValueError, KeyError, jax.errors.JaxRuntimeError)):
            # A runtime error here is mostly a peer gone in mid-collective: one line is enough.
            message = e.args[0] if isinstance(e, KeyError) and e.args else one_line(e)
            print(f"harness {command}: error: {who}: {message}", file=sys.stderr)
            distributed.leave(2)
        if isinstance(e, KeyboardInterrupt):
            print(f"harness {command}: {who} interrupted", file=sys.stderr)
            distributed.leave(130)
        traceback.print_exc()
        distributed.leave(1)
