"""``import harness``: the names it re-exports lazily (``harness.EXPORTS``), none of them the
name of one of its subpackages or modules, and an import that loads neither jax nor pandas."""
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent


def test_compare_is_the_baseline_candidate_verdict():
    from harness.regress import judge

    assert harness.compare is judge.compare
    assert "compare" in harness.__all__ and "compare" in dir(harness)


def test_every_export_is_its_modules_name():
    for name, module in harness.EXPORTS.items():
        defined = getattr(importlib.import_module(module), name)
        assert getattr(harness, name) is defined, name


def test_analyze_is_the_function_of_that_name_and_its_old_name_warns():
    import warnings

    from harness.runs import pipeline

    assert harness.analyze is pipeline.analyze
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            pipeline.profile(None)  # warns first, then fails on no function
        except Exception:  # noqa: BLE001 - what a None function raises is not the point
            pass
    assert any(issubclass(w.category, DeprecationWarning) and "harness.analyze" in
               str(w.message) for w in said)


def test_no_export_is_the_name_of_a_subpackage_or_module():
    """``import harness.<name>`` would rebind ``harness.<name>`` to the module."""
    found = {m.name for m in pkgutil.iter_modules(harness.__path__)}
    assert {"capture", "trace", "regress", "cli", "schema"} <= found  # the listing sees them
    assert not set(harness.EXPORTS) & found
    assert "capture" not in harness.EXPORTS  # the stage package, not a function


def test_import_harness_imports_neither_jax_nor_pandas():
    code = ("import sys, harness; harness.EXPORTS['compare']; "
            "print(sorted(m for m in ('jax', 'pandas') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
