"""One module per ``harness`` subcommand (see ``harness.cli.COMMANDS``)."""
import argparse

from harness.errors import HarnessError


def count(text: str) -> int:
    """An argparse type: a whole number >= 0 (``--top 0`` = all rows)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; give a number >= 0 (0 = all)")
    return n


def parse_sets(items: list[str]) -> dict[str, str]:
    """``--set`` values: ``["B=128", "dtype=bf16"]`` -> ``{"B": "128", "dtype": "bf16"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HarnessError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


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
