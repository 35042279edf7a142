"""The scratch space of runs in progress: a capture writes into ``.tmp-capture-p<pid>-*`` beside
the runs (``harness.record.store.TMP_PREFIX``: never read as a run) until ``Run.save`` moves its
trace into the stored run; a killed run's scratch is removed by the next run."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from harness.record.store import TMP_PREFIX

log = logging.getLogger(__name__)


def scratch_prefix(kind: str) -> str:
    """``.tmp-capture-p<pid>-``: scratch names carry the owner's process id."""
    return f"{TMP_PREFIX}{kind}-p{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_stale_scratch(root: str | os.PathLike, kind: str = "capture") -> list[Path]:
    """Remove ``root``'s scratch directories whose process is gone (a killed run's); those of
    a live process (a concurrent run) stay. Returns what was removed."""
    gone = []
    for d in Path(root).glob(f"{TMP_PREFIX}{kind}-p*-*"):
        pid = d.name[len(f"{TMP_PREFIX}{kind}-p"):].split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s, left by a run that was killed", d)
            gone.append(d)
    return gone
