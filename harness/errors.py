"""The one error type the CLI turns into a one-line message and exit code 2."""
from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path


class HarnessError(Exception):
    """Bad input or an unusable artefact. The message is one line naming what was wrong."""


class TraceError(HarnessError):
    """A profiler trace that is missing, truncated, corrupt or holds no XLA ops."""


class UserError(HarnessError):
    """An exception raised by the user's own code (their function, or their ``carry``) while
    the harness traced or ran it: one line naming it and their last frame. The exception
    itself is the ``__context__`` (kept, not printed)."""


def one_line(e: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    return next((line.strip() for line in str(e).splitlines() if line.strip()),
                type(e).__name__)


def _not_users() -> tuple[str, ...]:
    """Folders whose code is not the user's: the harness's packages, Python's own library and
    the installed packages (jax, flax, optax...)."""
    root = Path(__file__).resolve().parent.parent
    paths = sysconfig.get_paths()
    ours = [root / name for name in ("harness", "workloads", "predictions")]
    theirs = [Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    return tuple(f"{p}/" for p in ours + theirs)


def last_user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``e``'s traceback in the user's code (outside ``_not_users``);
    None when every frame is the harness's or a library's."""
    skip = _not_users()
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        name = frame.filename
        if name.startswith("<frozen"):
            continue
        if name.startswith("<") or not str(Path(name).resolve()).startswith(skip):
            return frame
    return None


def user_error(e: BaseException, what: str) -> UserError | None:
    """``e`` as a ``UserError`` when it came from the user's code: "WHAT raised TYPE: first
    line (at FILE:LINE, in FUNCTION)", their last frame; None when no frame of ``e`` is
    theirs (the harness's or a library's own error: left as it is)."""
    if isinstance(e, HarnessError):
        return None
    frame = last_user_frame(e)
    if frame is None:
        return None
    err = UserError(f"{what} raised {type(e).__name__}: {one_line(e)} "
                    f"(at {frame.filename}:{frame.lineno}, in {frame.name})")
    err.__context__, err.__suppress_context__ = e, True
    return err
