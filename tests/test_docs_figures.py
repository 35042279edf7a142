"""The pictures the docs show are made by docs/make_figures.py from the traces the tests ship:
run into a fresh directory, it writes each one the pages link, a PNG of the committed picture's
size (not compared pixel by pixel: matplotlib's text rendering moves with its version)."""
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "make_figures.py"
PNG = b"\x89PNG\r\n\x1a\n"


def _size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height, from its IHDR chunk (the first, right after the signature)."""
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _linked() -> set[str]:
    """The docs/ pictures README.md and docs/*.md show."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {Path(m).name for p in pages
            for m in re.findall(r"!\[[^\]]*\]\(((?:docs/)?[\w.-]+\.png)\)", p.read_text())}


@pytest.mark.slow  # over 12 s on a 2-core host: CI's slow step runs it
def test_the_script_draws_every_picture_the_pages_show(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], cwd=ROOT, check=True,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    drawn = {Path(line).name for line in done.stdout.split()}
    assert _linked() == {"roofline.png", "step.png"} <= drawn
    for name in drawn:
        new, committed = (tmp_path / name).read_bytes(), (ROOT / "docs" / name).read_bytes()
        assert _size(new) == _size(committed), f"docs/{name}: run python docs/make_figures.py"
