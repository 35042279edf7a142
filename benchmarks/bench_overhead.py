"""What measuring costs: tracing overhead per step, step_s against a directly timed step, and a
sweep point's cost with and without per-point plots and garbage collection. One run, ratios.

    python benchmarks/bench_overhead.py [--repeats 5] [--steps 10]

1. llama_train tiny on 8 virtual CPU devices: blocks of plain steps (timed with perf_counter)
   and traced steps (``harness.capture.steps``'s lean profiler, and jax's default options for
   comparison) alternate ``--repeats`` times, so host drift hits both alike. Printed: the median
   traced step / the median plain step (goal <= 1.05 with the lean options), and the
   ``stop_trace`` time per traced step.
2. ``step_s`` of a ``capture`` + ``pipeline.from_capture`` of the same program against the
   plain steps timed beside it (goal within 5%).
3. A quick sweep point (matmul tiny, ``run_workload``) with the point's plots and a
   ``gc.collect()`` (before) and without them (after), alternated: after / before.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.devices import quiet_absent_tpu

quiet_absent_tpu()  # as the harness command does, before jax starts

import jax

from harness.capture.steps import STEP_NAME, capture, lean_profile_options
from harness.runs.pipeline import from_capture
from harness.runs.workload import build_workload, run_workload


def timed_steps(compiled, args, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        out.append(time.perf_counter() - t0)
    return out


def traced_steps(compiled, args, n: int, options) -> tuple[list[float], float]:
    """Step times inside one trace, and the stop_trace time."""
    d = tempfile.mkdtemp(prefix="bench-overhead-")
    if options is None:
        jax.profiler.start_trace(d)
    else:
        jax.profiler.start_trace(d, profiler_options=options)
    out = []
    for i in range(n):
        with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            out.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    jax.profiler.stop_trace()
    return out, time.perf_counter() - t0


def tracing(repeats: int, steps: int) -> None:
    built = build_workload("llama_train")
    fn = built.fn if hasattr(built.fn, "lower") else jax.jit(built.fn)
    compiled = fn.lower(*built.args).compile()
    timed_steps(compiled, built.args, 3)
    plain, lean, default, stop_lean, stop_default = [], [], [], [], []
    for _ in range(repeats):
        plain += timed_steps(compiled, built.args, steps)
        t, s = traced_steps(compiled, built.args, steps, lean_profile_options())
        lean += t
        stop_lean.append(s / steps)
        plain += timed_steps(compiled, built.args, steps)
        t, s = traced_steps(compiled, built.args, steps, None)
        default += t
        stop_default.append(s / steps)
    p = statistics.median(plain)
    print(f"llama_train tiny: plain step {p * 1e3:.2f} ms (median of {len(plain)})")
    print(f"  traced, lean options:    {statistics.median(lean) / p:.3f} x plain "
          f"(goal <= 1.05); stop_trace {statistics.median(stop_lean) * 1e3:.0f} ms per step")
    print(f"  traced, default options: {statistics.median(default) / p:.3f} x plain; "
          f"stop_trace {statistics.median(stop_default) * 1e3:.0f} ms per step")
    # step_s as the harness reports it, beside plain steps timed in the same minute
    before = timed_steps(compiled, built.args, steps)
    cap = capture(fn, built.args, warmup=1, steps=steps,
                  out_dir=tempfile.mkdtemp(prefix="bench-overhead-"))
    after = timed_steps(compiled, built.args, steps)
    step_s = from_capture(cap).summary["step_s"]
    direct = statistics.median(before + after)
    print(f"  step_s {step_s * 1e3:.2f} ms vs directly timed {direct * 1e3:.2f} ms: "
          f"{step_s / direct - 1:+.1%} (goal within 5%)")


def sweep_point(repeats: int) -> None:
    before, after = [], []
    out = Path(tempfile.mkdtemp(prefix="bench-overhead-sweep-"))
    overrides = {"case": "no_comm"}
    run_workload("matmul", overrides=overrides, out=out, steps=2, warmup=1)  # compile caches
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_workload("matmul", overrides=overrides, out=out, steps=2, warmup=1, with_plots=True)
        jax.clear_caches()
        gc.collect()
        before.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_workload("matmul", overrides=overrides, out=out, steps=2, warmup=1, with_plots=False)
        jax.clear_caches()
        after.append(time.perf_counter() - t0)
    b, a = statistics.median(before), statistics.median(after)
    print(f"sweep point (matmul tiny): {b:.2f} s with plots + gc.collect, {a:.2f} s without: "
          f"after / before = {a / b:.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args(argv)
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
          "(figures are only as quiet as the host)")
    tracing(args.repeats, args.steps)
    sweep_point(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
