"""The one error type the CLI turns into a one-line message and exit code 2."""
from __future__ import annotations


class HarnessError(Exception):
    """Bad input or an unusable artefact. The message is one line naming what was wrong."""


class TraceError(HarnessError):
    """A profiler trace that is missing, truncated, corrupt or holds no XLA ops."""


def one_line(e: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    return next((line.strip() for line in str(e).splitlines() if line.strip()),
                type(e).__name__)
