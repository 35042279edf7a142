"""After Ctrl-C, the script's process gives its trace's open segment a few seconds to be written
(``FINISH_WRITING_S``) when earlier segments hold what ran, and longer (``FIRST_SEGMENT_S``,
within the parent's ``KILL_AFTER_S``) when it is the first: then it is all the report there can
be."""
import pytest

from harness.capture import child, interrupt
from harness.capture.script import KILL_AFTER_S


class Tracer:
    def __init__(self, k):
        self.k, self.waited = k, None

    def close_within(self, wait_s):
        self.waited = wait_s


class Exited(Exception):
    pass


@pytest.mark.parametrize("written, wait", [(0, interrupt.FIRST_SEGMENT_S),
                                           (2, interrupt.FINISH_WRITING_S)])
def test_the_first_segment_gets_longer_to_be_written(written, wait, tmp_path, monkeypatch):
    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(child.os, "_exit", exit_)
    monkeypatch.setattr(child, "_ENDING", child.threading.Lock())  # a fresh lock per test
    tracer = Tracer(written)
    with pytest.raises(Exited):
        child.end_now(tracer, tmp_path / "script.json", {child.CODE: 130})
    assert tracer.waited == wait
    assert interrupt.FINISH_WRITING_S < interrupt.FIRST_SEGMENT_S < KILL_AFTER_S
