"""One module per ``harness`` subcommand (see ``harness.cli.COMMANDS``)."""
import argparse


def count(text: str) -> int:
    """An argparse type: a whole number >= 0 (``--top 0`` = all rows)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; give a number >= 0 (0 = all)")
    return n
