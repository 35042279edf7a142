"""pytest plugin: the ``harness_run`` fixture profiles a workload (or any jitted fn) in a test.

    def test_matmul(benchmark, harness_run):
        result = harness_run("matmul", preset="tiny", overrides={"case": "allreduce"})
        assert result.step_s > 0

``harness_run(target, *args, ...)`` captures ``steps`` profiled steps after ``warmup`` and runs
the whole pipeline (``harness.analysis.analyze``): per-op times against each op's roofline time
(`roofline.md`). If the test also asks for pytest-benchmark's ``benchmark`` fixture, the compiled
step is timed with ``benchmark.pedantic`` outside the profiler (so ``--benchmark-autosave`` and
``--benchmark-compare`` see wall-clock step times) and the harness figures go into
``benchmark.extra_info`` under ``harness_*`` keys (``harness_step_s``, ``harness_efficiency``...);
pass ``time=False`` to time it yourself. ``--harness-save DIR`` also stores every profiled run
as ``DIR/<run-id>/`` so that ``harness compare`` can set two nights against each other.

Importing this module imports pytest and the standard library only (jax, pandas and the
pipeline load when the fixture runs), so the package registers it as a ``pytest11`` entry point.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.capture import STEPS
from harness.devices import set_host_device_count

# Deferred on purpose: this module is a pytest11 entry point, loaded by every pytest session, so
# pandas (harness.schema, harness.compare) and jax load only when a result is read or the fixture
# runs: the imports marked "deferred" below.

log = logging.getLogger(__name__)

PREFIX = "harness_"
TOP_OPS = 5  # ops listed in extra_info, slowest first


@dataclass
class HarnessResult:
    """What one profiled run gave: the analysis, its step time (s) and efficiency."""

    analysis: Any                 # harness.analysis.Analysis
    path: Path | None = None      # the stored run, with --harness-save

    @property
    def ops(self):
        return self.analysis.ops

    @property
    def summary(self) -> dict:
        return self.analysis.summary

    @property
    def meta(self) -> dict:
        return self.analysis.meta

    @property
    def step_s(self) -> float:
        from harness import schema  # deferred

        return float(self.summary.get(schema.STEP_S, math.nan))

    @property
    def efficiency(self) -> float | None:
        """The workload's roofline efficiency (``harness.compare.workload_efficiency``)."""
        from harness.compare import workload_efficiency  # deferred

        eff = workload_efficiency(self.ops)
        return eff if math.isfinite(eff) else None

    def extra_info(self) -> dict:
        """JSON-able figures for pytest-benchmark's ``extra_info`` (NaN becomes None)."""
        from harness import schema  # deferred

        info = {schema.STEP_S: self.step_s, "ops_s": float(self.ops[schema.MEASURED_S].sum()),
                schema.EFFICIENCY: self.efficiency,
                schema.DEVICE_KIND: self.meta.get(schema.DEVICE_KIND),
                schema.DEVICES: self.meta.get(schema.DEVICE_COUNT),
                schema.WORKLOAD: self.meta.get(schema.WORKLOAD),
                schema.CHIP: self.meta.get(schema.CHIP)}
        for key in (schema.COVERAGE, schema.HFU, schema.MFU):
            if key in self.summary:
                info[key] = self.summary[key]
        cols = [c for c in (schema.OP, schema.CATEGORY, schema.MEASURED_S, schema.EFFICIENCY)
                if c in self.ops.columns]
        top = self.ops.sort_values(schema.MEASURED_S, ascending=False).head(TOP_OPS)[cols]
        info["top_ops"] = [{c: _plain(v) for c, v in row.items()}
                           for row in top.to_dict("records")]
        if self.path is not None:
            info[schema.RUN] = str(self.path)
        if self.analysis.report.notes:
            info[schema.NOTES] = list(self.analysis.report.notes)
        return {PREFIX + k: _plain(v) for k, v in info.items() if v is not None}


def _plain(v):
    if isinstance(v, (list, dict, str, bool)) or v is None:
        return v
    if hasattr(v, "item"):  # numpy scalar
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def pytest_addoption(parser) -> None:
    group = parser.getgroup("harness", "scaling-harness")
    group.addoption("--harness-save", metavar="DIR", default=None,
                    help="store every harness_run profile as DIR/<run-id>/ for `harness compare`")
    group.addoption("--harness-devices", metavar="N", type=int, default=None,
                    help="virtual CPU devices (sets XLA_FLAGS; only before jax is imported)")


def pytest_configure(config) -> None:
    n = config.getoption("--harness-devices", default=None)
    if n:
        set_host_device_count(n)


@pytest.fixture
def harness_run(request, tmp_path):
    """``harness_run(workload_or_fn, *args, preset=, overrides=, mesh=, steps=, warmup=, chip=,
    rounds=, time=True) -> HarnessResult``; fills ``benchmark.extra_info`` when present."""
    benchmark = request.getfixturevalue("benchmark") if "benchmark" in request.fixturenames \
        else None
    save_root = request.config.getoption("--harness-save", default=None)

    def run(target, *args, preset: str = "tiny", overrides: dict | None = None,
            mesh: str | None = None, steps: int = STEPS, warmup: int = 2, chip=None,
            rounds: int | None = None, time: bool = True) -> HarnessResult:
        import jax  # deferred: see the note at the top

        from harness.analysis import analyze  # deferred
        from harness.runs.run import build_workload, new_run_id, save_analysis  # deferred

        meta = {"test": request.node.nodeid}
        expected = book = None
        if isinstance(target, str):
            built = build_workload(target, preset, overrides, mesh)
            fn, args = built.fn, built.args
            meta.update(built.meta, preset=preset, overrides=dict(overrides or {}))
            expected, book = built.expected_collectives(), built.book
        else:
            fn = target
        analysis = analyze(fn, *args, chip=chip, steps=steps, warmup=warmup,
                           out_dir=tmp_path / "trace", meta=meta, book=book,
                           expected_collectives=expected)
        result = HarnessResult(analysis)
        if save_root:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")[:80]
            result.path = save_analysis(analysis, Path(save_root) / new_run_id(name))
        if benchmark is not None:
            benchmark.extra_info.update(result.extra_info())
            if time:
                jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
                benchmark.pedantic(lambda: jax.block_until_ready(jitted(*args)),
                                   rounds=rounds or max(steps, 5), warmup_rounds=1)
        return result

    return run
