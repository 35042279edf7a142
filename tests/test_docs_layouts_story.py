"""docs/layouts.md's story, as a user runs it: ``python docs/layouts_story.py DIR``, then
``harness explain`` of the bad layout and ``harness compare`` of the two. What the page says of
the bad layout's collectives is checked against the book's arithmetic, not against a pasted
output."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import schema
from harness.cli import main
from harness.record import Run

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "layouts_story.py"
B, D, LAYERS, X, Y = 256, 1024, 4, 4, 2  # the script's sizes and mesh
FLOAT32 = 4


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    out = tmp_path_factory.mktemp("story")
    subprocess.run([sys.executable, str(SCRIPT), str(out)], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    return Run.load(out / "bad"), Run.load(out / "good")


def _layer_line() -> str:
    lines = SCRIPT.read_text().splitlines()
    return f"docs/layouts_story.py:{next(i for i, s in enumerate(lines, 1) if 'x @ w' in s)}"


def test_explain_names_each_layers_all_reduce_its_line_axis_and_fix(story, tmp_path, capsys):
    bad, good = story
    out = tmp_path / "bad.json"
    assert main(["explain", str(bad.path), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == LAYERS  # one all-reduce per layer
    for row in rows:
        assert row[schema.COLLECTIVE] == "all-reduce" and row[schema.MESH_AXES] == "X"
        assert row[schema.REASON] == "case 3: partial sums" and row[schema.FIX]
        assert row[schema.SOURCE_LINE] == _layer_line()
        # V: the layer's output on one device, the batch split over Y only
        assert row[schema.DEVICE_BYTES] == B // Y * D * FLOAT32 == 512 * 1024
    printed = capsys.readouterr().out
    assert "fix:" in printed and _layer_line() in printed
    assert good.collectives is None or good.collectives.empty  # data parallel: none


def test_compare_puts_the_slower_layout_first_and_names_the_all_reduces(story, capsys):
    bad, good = story
    main(["compare", str(good.path), str(bad.path), "--format", "json"])
    verdict = json.loads(capsys.readouterr().out)["pairs"][0]
    pair = verdict["layouts"]
    slower = "B" if bad.step[schema.STEP_S] >= good.step[schema.STEP_S] else "A"
    # "B is 1.2x slower" beside a regression (or an improvement: A slower); "B measured 1.2x
    # slower than A, within the noise of one run a side" beside anything else
    said = "is" if pair["headline"].split()[1] == "is" else "measured"
    assert pair["headline"].startswith(f"{slower} {said} ") or "the same step" in \
        pair["headline"]
    if verdict["verdict"] in ("regression", "improvement"):  # the step told: plain
        assert said == "is" and slower == {"regression": "B", "improvement": "A"}[
            verdict["verdict"]], (verdict["verdict"], pair["headline"])
    elif said == "is":  # slower beyond the noise, and the host explains it
        assert verdict["verdict"] == "inconclusive", pair["headline"]
    only_b = [c for c in pair["collectives"] if c[schema.SIDE] == "only in B"]
    assert [c[schema.COLLECTIVE] for c in only_b] == ["all-reduce"]
    assert only_b[0][schema.AXES] == "X"
    if slower == "B":  # the bad layout's extra step is its exposed all-reduces
        assert f"exposed all-reduce from dot_general ({_layer_line()}) over axis X" in \
            pair["headline"]
