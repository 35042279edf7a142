"""pytest plugin: the ``harness_run`` fixture profiles a workload (or any jitted fn) in a test.

    def test_matmul(benchmark, harness_run):
        run = harness_run("matmul", preset="tiny", overrides={"case": "allreduce"})
        assert run.summary["step_s"] > 0

``harness_run(target, *args, ...)`` captures ``steps`` profiled steps after ``warmup`` and runs
the one pipeline of every entry point (``harness.runs.pipeline``; a registered workload as
``harness run`` runs it) and returns the ``harness.record.Run``: per-op times against each op's
roofline time
(`roofline.md`). If the test also asks for pytest-benchmark's ``benchmark`` fixture, the compiled
step is timed with ``benchmark.pedantic`` outside the profiler (so ``--benchmark-autosave`` and
``--benchmark-compare`` see wall-clock step times) and the harness figures go into
``benchmark.extra_info`` under ``harness_*`` keys (``harness_step_s``, ``harness_efficiency``...);
pass ``time=False`` to time it yourself. ``--harness-save DIR`` also stores every profiled run
as ``DIR/<run-id>/`` so that ``harness compare`` can set two nights against each other;
``--harness-compare DIR`` compares each run with the newest run of the same test saved under
``DIR`` (``harness.regress.judge``, the verdicts of ``harness compare``, its thresholds from
``--harness-fail-on``) and fails the test whose run regressed; every verdict goes into the
test's JUnit properties (``harness_verdict``). On a host without TPUs an installed libtpu is
kept quiet, as the ``harness`` command keeps it (``harness.devices.quiet_absent_tpu``).

Importing this module imports pytest and the standard library only (jax, pandas and the
pipeline load when the fixture runs), so the package registers it as a ``pytest11`` entry point.
"""
from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import pytest

from harness.capture.steps import STEPS
from harness.devices import quiet_absent_tpu, set_host_device_count

# Deferred on purpose: this module is a pytest11 entry point, loaded by every pytest session, so
# pandas (harness.schema, harness.analysis.gaps) and jax load only when a result is read or the
# fixture
# runs: the imports marked "deferred" below.

log = logging.getLogger(__name__)

PREFIX = "harness_"
BASELINES = pytest.StashKey[tuple]()  # --harness-compare's newest run and spread per test
TOP_OPS = 5  # ops listed in extra_info, slowest first


def efficiency(run) -> float | None:
    """The run's roofline efficiency (``harness.analysis.gaps.workload_efficiency``), None if
    none."""
    from harness.analysis.gaps import workload_efficiency  # deferred

    eff = workload_efficiency(run.ops)
    return eff if math.isfinite(eff) else None


def extra_info(run) -> dict:
    """JSON-able figures of a ``harness.record.Run`` for pytest-benchmark's ``extra_info``, under
    ``harness_*`` keys (NaN becomes None)."""
    from harness import schema  # deferred

    ops, meta, summ = run.ops, run.meta, run.summary
    info = {schema.STEP_S: float(summ.get(schema.STEP_S, math.nan)),
            schema.WALL_STEP_S: float(summ.get(schema.WALL_STEP_S, math.nan)),
            "ops_s": float(ops[schema.MEASURED_S].sum()), schema.EFFICIENCY: efficiency(run),
            schema.DEVICE_KIND: meta.get(schema.DEVICE_KIND),
            schema.DEVICES: meta.get(schema.DEVICE_COUNT),
            schema.WORKLOAD: meta.get(schema.WORKLOAD), schema.CHIP: meta.get(schema.CHIP)}
    for key in (schema.COVERAGE, schema.HFU, schema.MFU):
        if key in summ:
            info[key] = summ[key]
    cols = [c for c in (schema.OP, schema.CATEGORY, schema.MEASURED_S, schema.EFFICIENCY)
            if c in ops.columns]
    top = ops.sort_values(schema.MEASURED_S, ascending=False).head(TOP_OPS)[cols]
    info["top_ops"] = [{c: _plain(v) for c, v in row.items()} for row in top.to_dict("records")]
    if run.path is not None:
        info[schema.RUN] = str(run.path)
    if run.notes:
        info[schema.NOTES] = list(run.notes)
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
    group.addoption("--harness-compare", metavar="DIR", default=None,
                    help="compare every harness_run profile with the newest run of the same "
                         "test under DIR; fail the test whose run regressed")
    group.addoption("--harness-fail-on", metavar="METRIC=PCT", action="append", default=None,
                    help="with --harness-compare: what counts as a regression (default "
                         "step=10%%), as `harness compare --fail-on`")
    group.addoption("--harness-devices", metavar="N", type=int, default=None,
                    help="virtual CPU devices (sets XLA_FLAGS; only before jax is imported)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    quiet_absent_tpu()  # before a conftest can import jax, as the harness command does


def pytest_configure(config) -> None:
    n = config.getoption("--harness-devices", default=None)
    if n:
        set_host_device_count(n)


def _verdict(request, run):
    """The verdict of ``run`` against the newest run of its test under ``--harness-compare``
    (None without a baseline there, said in a warning)."""
    import argparse
    import warnings

    from harness.commands.compare import fail_on  # deferred
    from harness.regress import judge, noise, pairs  # deferred

    config = request.config
    if BASELINES not in config.stash:  # read once per session: the newest, each test's spread
        runs = pairs.load_all(config.getoption("--harness-compare"))
        config.stash[BASELINES] = pairs.newest(runs), noise.spreads([runs])
    newest, spreads = config.stash[BASELINES]
    base = newest.get(pairs.key(run))
    if base is None:
        warnings.warn(f"harness: no baseline run of {pairs.key(run)} to compare with",
                      stacklevel=2)
        return None
    try:
        rules = [fail_on(x) for x in config.getoption("--harness-fail-on") or ()]
    except argparse.ArgumentTypeError as e:
        raise pytest.UsageError(f"--harness-fail-on {e}") from None
    return judge.compare(base, run, judge.Rule(tuple(rules) or judge.Rule.fail_on),
                         spread=spreads.get(pairs.key(run)))


def test_name(request) -> str:
    """The test as ``path/to/test_file.py::test_name[params]``, its path from where pytest was
    started: the same every night, whatever options make pytest choose another rootdir (any
    existing path among them, ``--harness-compare DIR`` too, can)."""
    node, start = request.node, request.config.invocation_params.dir
    try:
        where = Path(node.path).resolve().relative_to(Path(start).resolve()).as_posix()
    except ValueError:
        where = Path(node.path).name
    return "::".join([where, *node.nodeid.split("::")[1:]])


@pytest.fixture
def harness_run(request, tmp_path):
    """``harness_run(workload_or_fn, *args, preset=, overrides=, mesh=, steps=, warmup=, chip=,
    rounds=, time=True, **kwargs) -> harness.record.Run`` (``kwargs`` go to a function target);
    fills ``benchmark.extra_info`` when present."""
    benchmark = request.getfixturevalue("benchmark") if "benchmark" in request.fixturenames \
        else None
    save_root = request.config.getoption("--harness-save", default=None)
    compare_root = request.config.getoption("--harness-compare", default=None)

    def run(target, *args, preset: str = "tiny", overrides: dict | None = None,
            mesh: str | None = None, steps: int = STEPS, warmup: int = 2, chip=None,
            rounds: int | None = None, time: bool = True, **kwargs):
        from harness import report, schema  # deferred
        from harness.regress import judge  # deferred
        from harness.runs import pipeline, workload

        meta = {schema.TEST: test_name(request)}
        trace = tmp_path / "trace"
        if isinstance(target, str):
            built = workload.build_workload(target, preset, overrides, mesh)
            fn, args = built.fn, built.args
            result = workload.run_built(built, preset=preset, overrides=overrides, steps=steps,
                                        warmup=warmup, out_dir=trace, chip=chip, meta=meta)
        else:
            fn = target
            result = pipeline.analyze(fn, *args, chip=chip, steps=steps, warmup=warmup,
                                      out_dir=trace, **kwargs)
            result.meta.update(meta)
        if save_root:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")[:80]
            result.save(Path(save_root) / workload.new_run_name(name), files=report.files)
        judged = _verdict(request, result) if compare_root else None
        if judged is not None:
            request.node.user_properties.append(
                ("harness_verdict", f"{judged.verdict} ({judged.cause}): {judged.message}"))
        if benchmark is not None:
            benchmark.extra_info.update(extra_info(result))
            if time:
                _time(benchmark, fn, args, kwargs, rounds or max(steps, 5))
        if judged is not None and judged.verdict == judge.REGRESSION:
            pytest.fail(f"harness: regression ({judged.cause}): {judged.message}",
                        pytrace=False)
        return result

    return run


def _time(benchmark, fn, args: tuple, kwargs: dict, rounds: int) -> None:
    """Time ``fn(*args, **kwargs)`` with ``benchmark.pedantic``, outside the profiler; inputs
    the function donates are copied afresh before each round, outside the timing."""
    import jax  # deferred

    from harness.capture.arguments import donated_copies  # deferred
    from harness.capture.program import Program  # deferred

    program = Program(fn, args, kwargs)  # jitted as the harness's capture jits it
    fresh = donated_copies(program.jitted.lower(*args, **kwargs))

    def step(*a, **kw):
        return jax.block_until_ready(program.own(a, kw))

    setup = (lambda: (fresh(args), kwargs)) if fresh else (lambda: (args, kwargs))
    benchmark.pedantic(step, setup=setup, rounds=rounds, warmup_rounds=1)
