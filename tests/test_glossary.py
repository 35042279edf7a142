"""One word per idea: each word of docs/pipeline.md's table is defined (a function, class,
module, field, variable or parameter of that name) only in the files the table names, so a
word that means something else somewhere gets another name there."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "predictions", "workloads")
ROW = re.compile(r"^\| `(\w+)` \| (.+) \| (.+) \|$")


@cache
def glossary() -> dict[str, set[str]]:
    """word -> the files it may be defined in, from the table under docs/pipeline.md's
    "## Words"."""
    page = (ROOT / "docs" / "pipeline.md").read_text()
    table = page.split("## Words", 1)[1].split("\n## ", 1)[0]
    return {m[1]: set(re.findall(r"`([\w/]+\.py)`", m[3]))
            for m in map(ROW.match, table.splitlines()) if m}


def _names(node: ast.AST) -> list[str]:
    """The names a node defines: a def or class, assignment targets (names and attributes),
    a parameter."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [getattr(e, "id", None) or e.attr for t in targets for e in ast.walk(t)
                if isinstance(e, (ast.Name, ast.Attribute))]
    return []


@cache
def definitions(words: frozenset[str]) -> dict[str, set[str]]:
    """word -> the files (relative paths) that define it, itself a module's name included."""
    found = defaultdict(set)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if path.stem in words:
                found[path.stem].add(rel)
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                for name in _names(node):
                    if name in words:
                        found[name].add(rel)
    return found


def test_the_table_is_read():
    words = glossary()
    assert {"analyze", "Run", "run_id", "Plan", "compare", "figures", "plots"} <= set(words)
    assert all(words.values()), "every word names the files it lives in"


@pytest.mark.parametrize("word", sorted(glossary()))
def test_each_word_is_defined_only_where_the_glossary_says(word):
    allowed = glossary()[word]
    assert all((ROOT / f).is_file() for f in allowed), f"{word}: a file the table names is gone"
    elsewhere = definitions(frozenset(glossary()))[word] - allowed
    assert not elsewhere, (f"{word!r} is defined in {sorted(elsewhere)} too: give it another "
                           f"name there, or say in docs/pipeline.md's Words why it means the same")
