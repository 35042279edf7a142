"""Every ``harness.x.y`` the README and docs name is there: a module that imports, or a name
that the longest importable module before it defines (old module paths are not kept, so a page
that still names one fails here)."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(r"(?<![\w./-])harness(?:\.[A-Za-z_]\w*)+")


def named() -> list[tuple[str, str]]:
    """(page, dotted name) for every ``harness.`` path a page names."""
    seen = set()
    for page in PAGES:
        for name in DOTTED.findall(page.read_text()):
            seen.add((page.name, name.rstrip(".")))
    return sorted(seen)


def resolve(dotted: str):
    """The object ``dotted`` names: its longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_pages_name_something():
    # the scan itself works: the README names harness.analyze, the API page harness.Run
    names = {n for _, n in named()}
    assert {"harness.analyze", "harness.Run"} <= names


@pytest.mark.parametrize(("page", "dotted"), named())
def test_named_path_exists(page, dotted):
    try:
        resolve(dotted)
    except (ModuleNotFoundError, AttributeError) as e:
        pytest.fail(f"{page} names {dotted}, which is not there ({e})")


# benchmarks/ only as ours are named (bench_*): the pages also cite other projects' benchmarks/
SLASHED = re.compile(r"(?<![\w./-])((?:(?:harness|workloads|predictions|tests)/"
                     r"|benchmarks/bench_)[\w/.-]*\w)")


def paths() -> list[tuple[str, str]]:
    """(page, path) for every file or folder of the repository a page names."""
    return sorted({(page.name, p) for page in PAGES for p in SLASHED.findall(page.read_text())})


@pytest.mark.parametrize(("page", "path"), paths())
def test_named_file_exists(page, path):
    assert (ROOT / path).exists(), f"{page} names {path}, which is not in the repository"
