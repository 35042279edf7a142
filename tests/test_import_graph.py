"""The import graph of harness/: every import statement (top-level and inside functions) read
from the source, not run. The packages import each other one way, down the floors that
docs/pipeline.md lists (each imports only those listed above it, and the shell's ``errors``,
``units``, ``schema``, ``devices``); no module imports itself around a circle; the record
(``harness.record``: the Run) sits on the lowest floor, beside ``schema``."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"
LOW_SHELL = ("errors", "units", "schema", "devices")  # any package may import them
TOP_SHELL = ("__init__", "__main__", "cli", "pytest_plugin")  # they may import any package
RECORD_IMPORTS = {"schema", "errors", "units"}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of harness/."""
    out = {}
    for path in HARNESS.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _deepest(name: str) -> str:
    """The deepest module of harness that a dotted name lies in ("" outside harness)."""
    parts = name.split(".")
    return next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                 if ".".join(parts[:k]) in MODULES), "")


def _imported(module: str, node: ast.AST) -> list[str]:
    """The harness modules an import statement of ``module`` names: ``from a.b import c``
    names ``a.b.c`` where that is a module, else ``a.b``. The root package ``harness`` (always
    loaded, its names re-exported lazily) is left out."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else (
                module.rpartition(".")[0])
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                 for a in node.names]
    return [m for m in map(_deepest, names) if m and m != "harness"]


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(harness module, line, under ``if TYPE_CHECKING``) of every import in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    out = []

    def walk(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.extend((m, child.lineno, typing_only) for m in _imported(module, child))
            walk(child, typing_only or (isinstance(child, ast.If) and _type_checking(child)))

    walk(tree, False)
    return out


IMPORTS = {m: _imports(m) for m in MODULES}


def package(module: str) -> str:
    """harness.report.document -> "report"; harness.cli -> "cli"; harness -> "__init__"."""
    return module.split(".")[1] if "." in module else "__init__"


def _arrows(typing_too: bool = True) -> dict[tuple[str, str], list[str]]:
    """(package, package it imports) -> where (file:line), over every module."""
    out = defaultdict(list)
    for module, found in IMPORTS.items():
        for target, line, typing_only in found:
            if (typing_too or not typing_only) and package(target) != package(module):
                out[package(module), package(target)].append(
                    f"{MODULES[module].relative_to(ROOT)}:{line}")
    return out


def _circle(edges: dict[str, set[str]]) -> list[str]:
    """One circle of the directed graph ``edges`` (node -> nodes it points to), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def floors() -> list[str]:
    """The packages of harness/ in the order docs/pipeline.md lists them (``name/`` lines of
    its layout block)."""
    page = (ROOT / "docs" / "pipeline.md").read_text()
    return [name for name in re.findall(r"^  (\w+)/ ", page, flags=re.M)
            if name not in LOW_SHELL]


def test_no_two_packages_import_each_other_even_through_others():
    edges = defaultdict(set)
    for a, b in _arrows():
        edges[a].add(b)
    circle = _circle(edges)
    where = {f"{a} -> {b}": _arrows()[a, b][:3] for a, b in zip(circle, circle[1:])}
    assert not circle, f"packages import each other around {' -> '.join(circle)}: {where}"


def test_no_module_imports_itself_around_a_circle():
    """At run time (an import under ``if TYPE_CHECKING`` runs for the type checker only)."""
    edges = defaultdict(set)
    for module, found in IMPORTS.items():
        edges[module] |= {t for t, _, typing_only in found if not typing_only and t != module}
    circle = _circle(edges)
    assert not circle, f"modules import each other around {' -> '.join(circle)}"


def test_the_pages_floors_are_every_package():
    listed = floors()
    packages = {p.parent.name for p in HARNESS.glob("*/__init__.py")}
    assert sorted(listed) == sorted(packages - set(LOW_SHELL)), "docs/pipeline.md's layout"
    assert listed.index("record") == 0  # the Run: the lowest floor above the shell


def test_each_package_imports_only_those_above_it():
    order = {name: i for i, name in enumerate(floors())}
    up = {f"{a} -> {b}": where[:3] for (a, b), where in _arrows().items()
          if a not in TOP_SHELL and b not in LOW_SHELL
          and (a in LOW_SHELL or b in TOP_SHELL or order[b] > order[a])}
    assert not up, f"imports back up the floors of docs/pipeline.md: {up}"


def test_the_low_shell_imports_only_the_shell():
    up = {f"{a} -> {b}": where for (a, b), where in _arrows().items()
          if a in LOW_SHELL and b not in LOW_SHELL}
    assert not up


def test_the_record_imports_only_schema_errors_and_units():
    """The Run is under every stage: any of them can name the type it handles."""
    got = {b: where for (a, b), where in _arrows().items() if a == "record"}
    assert set(got) <= RECORD_IMPORTS, got
    assert {"report", "analysis"} <= {a for (a, b) in _arrows() if b == "record"}
