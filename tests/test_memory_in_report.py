"""The memory section of a run's report (issue 56 part 5): ``harness run --memory`` shows the
figures ``harness memory RUN`` prints for the same run, they add up, the JSON carries them, the
HTML plots live bytes over the step; a run without it says how to get it."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness import schema
from harness.cli import main
from harness.record import Run
from harness.report import memory as section
from harness.report import render
from harness.units import fmt_bytes


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, dict]:
    """A matmul run with its memory section, and ``harness memory RUN``'s JSON of it."""
    root = tmp_path_factory.mktemp("memory-in-report")
    # priced on a data-sheet chip: no calibration of this host first
    assert main(["run", "matmul", "--memory", "--steps", "2", "--warmup", "1", "--chip", "h100",
                 "--out", str(root / "runs")]) == 0
    (path,) = (root / "runs").iterdir()
    assert main(["memory", str(path), "--json", str(root / "memory.json")]) == 0
    return path, json.loads((root / "memory.json").read_text())


def _per_device_argument_bytes() -> int:
    """The matmul's arguments on one device, from their shapes and shardings (no XLA)."""
    from harness.runs.workload import build_workload

    built = build_workload("matmul", mesh="4x2")
    return sum(math.prod(a.sharding.shard_shape(a.shape)) * a.dtype.itemsize
               for a in built.args)


def test_the_section_is_harness_memorys_figures(stored):
    path, alone = stored
    mine = json.loads(render(Run.load(path), "json"))[schema.MEMORY]
    for key in ("compiled", "live_peak_bytes", "book", "holds", "buffers", "timeline"):
        assert mine[key] == alone[key], key
    # measured: none on CPU, and the section says why (the run ran: not "compiled, not run")
    assert mine["measured_bytes"] is None and "memory_stats() is None" in mine["measured_note"]
    # the matmul has no book model: said, not shown as 0
    assert not mine["book"] and any("no book model" in n for n in mine["notes"])


def test_the_figures_add_up(stored):
    path, _ = stored
    m = json.loads(render(Run.load(path), "json"))[schema.MEMORY]
    # the buffers live at the peak add up to XLA's peak, and the kinds to the same bytes
    assert sum(b[schema.BUFFER_BYTES] for b in m["buffers"]) == m["live_peak_bytes"]
    kinds = [h for h in m["holds"] if h[schema.HOLDS] != "peak"]
    peak = next(h for h in m["holds"] if h[schema.HOLDS] == "peak")
    assert sum(h[schema.COMPILED_BYTES] for h in kinds) == peak[schema.COMPILED_BYTES] \
        == m["live_peak_bytes"]
    # memory_analysis's arguments are the shards the program takes, from their shapes
    assert m["compiled"]["arguments"] == _per_device_argument_bytes()
    # the timeline: each buffer's size over its live range, summed; it reaches XLA's peak
    live = np.array([p[schema.LIVE_BYTES] for p in m["timeline"]])
    assert live.max() >= m["live_peak_bytes"] and live.min() >= 0


def test_every_format_shows_the_section(stored):
    path, alone = stored
    run = Run.load(path)
    peak = fmt_bytes(alone["live_peak_bytes"])
    text = render(run, "text")
    assert f"compiled {peak}" in text and "memory_stats() is None" in text
    assert (f"compiled (memory_analysis, per device): arguments "
            f"{fmt_bytes(alone['compiled']['arguments'])}") in text
    assert "Buffers live at the compiled peak" in text
    md = (path / "report.md").read_text()
    assert "## Memory" in md and f"compiled {peak}" in md and "![memory](memory.png)" in md
    html = (path / "report.html").read_text()
    assert "<h2>Memory</h2>" in html
    # the plot of live bytes over the step, embedded, and stored beside the run
    assert 'alt="memory.png" src="data:image/png;base64,' in html
    assert (path / section.MEMORY_PNG).read_bytes().startswith(b"\x89PNG")
    # the run's meta in the JSON leaves the section to its own key
    assert schema.MEMORY not in json.loads(render(run, "json"))["meta"]


def test_a_run_without_it_says_how_to_get_it(stored):
    path, _ = stored
    run = Run.load(path)
    del run.meta[schema.MEMORY]
    text = render(run, "text")
    assert "harness run --memory adds them" in text
    assert "memory" in json.loads(render(run, "json"))[schema.MEMORY]["note"]
    # a user's own program: no book model, said so
    del run.meta[schema.WORKLOAD]
    assert "no model of a user's own program" in render(run, "md", plots=False)
    assert "<h2>Memory</h2>" in render(run, "html", plots=False)


def test_memory_with_distributed_is_one_line(capsys):
    assert main(["run", "matmul", "--memory", "--distributed"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--memory" in err and "harness memory" in err


def test_a_users_own_function_gets_the_section_without_a_book_model():
    import jax
    import jax.numpy as jnp

    import harness

    B, D, F = 64, 128, 256
    f = jax.jit(lambda x, w: jnp.tanh(x @ w) @ w.T)
    x, w = jnp.ones((B, D), jnp.float32), jnp.ones((D, F), jnp.float32)
    run = harness.analyze(f, x, w, chip="h100", steps=2, warmup=1, memory=True)
    m = json.loads(render(run, "json"))[schema.MEMORY]
    # memory_analysis from the shapes: x and w in, B x D f32 out
    assert m["compiled"]["arguments"] == 4 * (B * D + D * F)
    assert m["compiled"]["outputs"] == 4 * B * D
    assert sum(b[schema.BUFFER_BYTES] for b in m["buffers"]) == m["live_peak_bytes"]
    assert not m["book"] and any("no model of a user's own program" in n for n in m["notes"])
    text = render(run, "text")
    assert "What holds the compiled peak (no book model)" in text and "book (" not in text
    # a program compiled already cannot be compiled again with the dump: said, in a note
    compiled = f.lower(x, w).compile()
    again = harness.analyze(compiled, x, w, chip="h100", steps=2, warmup=1, memory=True)
    assert any("pass the jitted function" in n for n in again.notes)
    assert schema.MEMORY not in again.meta
