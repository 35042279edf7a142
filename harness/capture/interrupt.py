"""Ctrl-C in the script's process under ``harness profile``: the script stops at once, as it
would alone, and what it ran is kept.

The first SIGINT raises ``KeyboardInterrupt`` in the script, as Python's own handler does; more
(the terminal's Ctrl-C reaches this process and ``harness`` passes its own on) are the same
interrupt, and one that comes once the script has ended (``script_ended``: while its last
segment is written out) raises nothing. A script blocked in a long XLA call only sees it when
the call returns, so a thread woken by the signal itself (``signal.set_wakeup_fd``) waits
``GRACE_S`` for the process to end and then ends it itself (``on_stuck``, then exit 130), unless
the script handles SIGINT itself (its own handler installed), which it is left to do.

A process started from a shell's background job (``cmd &`` where the shell has no job control,
as in CI scripts) starts with SIGINT ignored, and Python then installs no handler: Ctrl-C, or
the SIGINT ``harness profile`` passes on, would do nothing. ``raising_sigint`` restores
Python's own handling, in ``harness profile`` and in the script's process.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted"
GRACE_S = 2.0  # seconds the process has to end after SIGINT before it ends itself
# seconds the trace's last segment has to be written after SIGINT; else it is left out
FINISH_WRITING_S = 3.0
# ... when no segment is written yet: the open one is all the report there can be, so it gets
# longer, within the KILL_AFTER_S (15 s) the parent gives an interrupted script
FIRST_SEGMENT_S = 12.0


@contextmanager
def raising_sigint() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` inside the block (Python's default), whatever this
    process was started with; the handler it had is put back after. Off the main thread, where
    handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Interrupt:
    """SIGINT handled once; ``done()`` when the process is about to end."""

    def __init__(self, on_stuck: Callable[[], object]):
        self.at: float | None = None  # time.monotonic() of the first SIGINT
        self._on_stuck, self._ended = on_stuck, threading.Event()
        self._script_ended = False
        signal.signal(signal.SIGINT, self._handler)
        try:
            self._wake, self._signalled = socket.socketpair()
            self._signalled.setblocking(False)
            signal.set_wakeup_fd(self._signalled.fileno(), warn_on_full_buffer=False)
        except (OSError, ValueError) as e:  # no watcher: the script ends when it sees the signal
            log.debug("no SIGINT watcher: %s", e)
            return
        threading.Thread(target=self._watch, name="harness-interrupt", daemon=True).start()

    def _handler(self, signum, frame) -> None:
        if self.at is None:
            self.at = time.monotonic()
            if not self._script_ended:
                raise KeyboardInterrupt

    def _watch(self) -> None:
        while True:
            woken = self._wake.recv(64)
            if not woken:
                return
            if int(signal.SIGINT) in woken:
                break
        if self._ended.wait(GRACE_S) or signal.getsignal(signal.SIGINT) != self._handler:
            return
        log.warning("the process did not end within %.0f s of SIGINT; ending it", GRACE_S)
        try:
            self._on_stuck()
        finally:
            os._exit(130)

    def script_ended(self) -> None:
        """The script has returned: a SIGINT from now on raises nothing."""
        self._script_ended = True

    def done(self) -> None:
        self._ended.set()
