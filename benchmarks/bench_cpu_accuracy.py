"""How well the calibrated ``cpu`` chip predicts this host: the accuracy goals, in one run.

    python benchmarks/bench_cpu_accuracy.py [--sweeps 3] [--llama-runs 3] [--mlp-runs 3]
                                            [--no-calibrate] [--allow-busy]

0. ``harness calibrate --strict`` (full; it refuses a busy host, or cores that changed speed
   while it measured; up to three tries; ``--allow-busy``: without ``--strict``, the
   calibration's spread kept, as ``harness calibrate`` does by default), into a scratch cache,
   unless ``--no-calibrate`` (then this host's saved calibration is used).

1. ``harness sweep sweeps/quick.toml``, ``--sweeps`` times in a row (fresh processes, as a user
   runs them). Per sweep: the median roofline efficiency of the large matmuls (matmul-category
   ops of the matmul points with B >= 1024) and the largest efficiency of any modeled op that
   holds >= 5% of its point's step. Goal: median within 0.8-1.05 and no op above 1.1, in every
   sweep.
2. ``harness run llama_train``, ``--llama-runs`` times: the median |ln(predicted / measured)|
   over all its modeled ops, per run (goal <= 0.5, a factor of 1.65, in every run); then
   ``llama_prefill`` and ``llama_decode`` as many times each.
3. ``harness.analyze`` of an MLP gradient step (batch 256 per device), data parallel over every
   device, ``--mlp-runs`` times; once more on one device alone, shown apart (the ``cpu`` chip
   holds the all-devices-busy rates, which a program on one device outruns).

For each sweep, llama run and MLP step, the roofs themselves: every modeled op's
efficiency against its own pricing (a matmul at its kernel's rate for its size, bytes at the
bandwidth of the memory they fit in): how many ops run above 110% of their roof (goal: none
that holds >= 5% of its step), the largest efficiency and the rate that priced that op, and
the matmuls' median efficiency (goal 0.6-1.0); for the MLP step, whose matmuls have shapes the
calibration never ran (``x.T @ g`` of a 256-row batch), the matmul farthest in efficiency from
the median of the others (goal: within 1.5x).
4. An op XLA:CPU runs asynchronously, timed to its completion (``harness.trace.completions``):
   an Eigen dot (``a.T @ b``, 768^3, one device, nothing beside it) traced for 15 steps, its
   median time in the trace against the median wall time of the same call (jax's
   ``block_until_ready``, 15 calls before the trace and 15 after); its event's own span (the
   dispatch) printed beside them. Goal: within 25% (a loaded host's calls vary that much).
   ``--async-only`` runs this check alone (seconds).

The host probe (``harness.chip.drift``'s reference matmul) runs first and last: its best /
median rate below 1.1 on both sides says the host was quiet. Take it on a quiet host: the
figures describe the host only as well as its calibration does (each run divides out the
host's drift since then).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the MLP step runs in this process, on this host's 8 virtual devices like the others
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from harness import schema
from harness.chip.cache import CACHE_ENV
from harness.record import Run, store

LARGE_B, VISIBLE, ROOF = 1024, 0.05, 1.1
MEDIAN, APART = (0.6, 1.0), 1.5  # the matmuls' median efficiency; one matmul from the others
QUIET = 1.1  # the host probe's best / median rate on a quiet host
CALIBRATIONS = 3  # tries at a calibration the host is steady through
LLAMA = ("llama_train", "llama_prefill", "llama_decode")
MLP = (256, 512, 1024, 256)  # batch, in, hidden, out of the MLP gradient step


def harness(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sweep_figures(sweep_dir: Path) -> tuple[float, float, str]:
    """(median large-matmul efficiency, largest visible op efficiency, that op)."""
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    large, worst, name = [], -math.inf, ""
    for rec in manifest["points"]:
        if rec["status"] != "done":
            continue
        run = Run.load(sweep_dir / rec["run"])
        ops = run.ops[run.ops[schema.PREDICTED_S].notna()]
        if rec["workload"] == "matmul" and int(rec["overrides"].get("B", 0)) >= LARGE_B:
            large += list(ops.loc[ops[schema.CATEGORY] == "matmul", schema.EFFICIENCY])
        visible = ops[ops[schema.SHARE] >= VISIBLE]
        if not visible.empty and visible[schema.EFFICIENCY].max() > worst:
            i = visible[schema.EFFICIENCY].idxmax()
            worst = float(visible.loc[i, schema.EFFICIENCY])
            name = f"{visible.loc[i, schema.OP]} ({rec['workload']} {rec['overrides']})"
    return (statistics.median(large) if large else math.nan), worst, name


def sweep_ops(sweep_dir: Path) -> pd.DataFrame:
    """Every done point's OPS table, one after another."""
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    return pd.concat([Run.load(sweep_dir / rec["run"]).ops for rec in manifest["points"]
                      if rec["status"] == "done"], ignore_index=True)


def roofs(ops: pd.DataFrame) -> dict:
    """Each modeled op against its own roof: ops above ``ROOF`` (all; those holding >=
    ``VISIBLE`` of the step), the largest efficiency with its op and rate, the matmuls'
    median efficiency."""
    ok = ops[(ops[schema.PREDICTED_S] > 0) & (ops[schema.MEASURED_S] > 0)]
    eff = ok[schema.EFFICIENCY]
    i = eff.idxmax()
    column = getattr(schema, "RATE", "rate")  # older checkouts have no rate column
    rate = ok.loc[i, column] if column in ok.columns else "-"
    matmuls = eff[ok[schema.CATEGORY] == "matmul"]
    # each matmul's efficiency over the median of the others' (goal 3: within 1.5x)
    apart = [e / matmuls.drop(j).median() for j, e in matmuls.items()] if len(matmuls) > 1 else []
    far = max(apart, key=lambda a: max(a, 1 / a)) if apart else 1.0
    return {"ops": len(ok), "above": int((eff > ROOF).sum()),
            "visible_above": int((eff[ok[schema.SHARE] >= VISIBLE] > ROOF).sum()),
            "worst": float(eff.max()), "op": str(ok.loc[i, schema.OP]), "rate": rate,
            "matmul_median": float(matmuls.median()) if len(matmuls) else math.nan,
            "matmul_apart": float(max(far, 1 / far))}


def show(what: str, r: dict, apart: bool = False) -> bool:
    """Print ``roofs``' figures; whether the roof goal and the matmul median's are met (and,
    ``apart``, the goal that every matmul lands within ``APART`` of the others)."""
    median_ok = MEDIAN[0] <= r["matmul_median"] <= MEDIAN[1]
    apart_ok = r["matmul_apart"] <= APART
    print(f"{what}: {r['above']} of {r['ops']} modeled ops above {ROOF:.0%} of their roof "
          f"({r['visible_above']} holding >= {VISIBLE:.0%} of the step); largest "
          f"{r['worst']:.0%} ({r['op']}, priced by {r['rate']}); matmuls' median efficiency "
          f"{r['matmul_median']:.2f} (goal {MEDIAN[0]}-{MEDIAN[1]}: "
          f"{'met' if median_ok else 'NOT met'})"
          + (f"; the matmul farthest from the others' median efficiency: "
             f"{r['matmul_apart']:.2f}x (goal <= {APART}x: {'met' if apart_ok else 'NOT met'})"
             if apart else "") + r.get("speed", ""))
    return r["visible_above"] == 0 and median_ok and (apart_ok or not apart)


def host_speed(meta: dict) -> str:
    """The run's drift factor and its cores' speed before and after it (the host probe's best
    FLOPs per CPU second, ``harness.chip.drift``): this host's cores run at two speeds about
    1.7x apart, in spells of seconds, whatever else runs (docs/accuracy.md)."""
    from harness.chip import drift

    d = meta.get(drift.HOST_DRIFT) or {}
    cpu = [max(r) / 1e9 for r in d.get(drift.CPU_RATES) or [] if r]
    if not cpu:
        return ""
    return (f" [drift factor {d.get(drift.FACTOR, math.nan):.2f}; cores at "
            f"{' / '.join(f'{c:.0f}' for c in cpu)} GFLOP per CPU second before / after]")


def llama_log_error(out: Path, workload: str = "llama_train") -> tuple[float, int, dict]:
    harness("run", workload, "--out", str(out), "--top", "1")
    (path,) = [p for p in out.iterdir() if (p / store.META).exists()]
    run = Run.load(path)
    ops = run.ops
    ok = (ops[schema.PREDICTED_S] > 0) & (ops[schema.MEASURED_S] > 0)
    err = np.abs(np.log(ops.loc[ok, schema.PREDICTED_S] / ops.loc[ok, schema.MEASURED_S]))
    return float(np.median(err)), int(ok.sum()), {**roofs(ops), "speed": host_speed(run.meta)}


def mlp_step(sharded: bool) -> dict:
    """``harness.analyze`` of one MLP gradient step, tanh(x W1) W2: data parallel over every
    device (as the calibration's all-busy figures are measured), or on one device alone."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import harness as h

    b, d, f, o = MLP
    n = len(jax.devices()) if sharded else 1

    def loss(w, x):
        return jnp.mean((jnp.tanh(x @ w[0]) @ w[1]) ** 2)

    w = [jnp.full((d, f), 0.01), jnp.full((f, o), 0.01)]
    x = jnp.ones((b * n, d))
    if sharded:
        mesh = jax.make_mesh((n,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
        x = jax.device_put(x, NamedSharding(mesh, P("X", None)))
        w = jax.device_put(w, NamedSharding(mesh, P()))
    run = h.analyze(jax.jit(jax.grad(loss)), w, x)
    return {**roofs(run.ops), "speed": host_speed(run.meta)}


def async_span(n: int = 768, calls: int = 15) -> bool:
    """Check 3 of the module docstring: prints the figures, returns whether the goal is met."""
    from unittest import mock

    import jax
    import jax.numpy as jnp

    from harness.capture.steps import capture
    from harness.trace import completions
    from harness.trace.load import load_events

    a, b = (jax.device_put(jnp.ones((n, n), jnp.float32), jax.devices()[0]) for _ in "ab")
    f = jax.jit(lambda a, b: a.T @ b)
    f(a, b).block_until_ready()

    def walls() -> list[float]:
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            f(a, b).block_until_ready()
            out.append(time.perf_counter() - t)
        return out

    wall = walls()
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        cap = capture(f, (a, b), warmup=1, steps=calls, out_dir=tmp)
        spans = load_events(cap.trace_dir)
        with mock.patch.object(completions, "durations", lambda start, duration, *_: duration):
            dispatch = load_events(cap.trace_dir)
    wall += walls()

    def median_ms(ev) -> float:
        dot = ev[ev[schema.OP].astype(str).str.startswith("dot")]
        return float(dot[schema.DURATION_NS].median()) * 1e-6

    traced, own, called = median_ms(spans), median_ms(dispatch), statistics.median(wall) * 1e3
    ok = abs(traced / called - 1) <= 0.25
    print(f"async dot {n}^3: {traced:.2f} ms to its completion in the trace, {called:.2f} ms "
          f"per call ({traced / called:.2f}x; goal within 25%); its event alone {own:.2f} ms: "
          f"{'met' if ok else 'NOT met'} (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          f"cores)")
    return ok


def quiet(after: bool) -> float:
    """The host probe's best / median rate (``harness.chip.drift``), printed: below ``QUIET``
    the host was quiet enough for these figures to describe it."""
    from harness.chip import drift

    s = drift.spread(drift.reference_rates())
    print(f"host probe {'after' if after else 'before'}: best / median rate {s:.2f} "
          f"({'quiet' if s < QUIET else f'NOT quiet: {QUIET} or more'})")
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=int, default=3)
    p.add_argument("--llama-runs", type=int, default=3)
    p.add_argument("--mlp-runs", type=int, default=3)
    p.add_argument("--no-calibrate", action="store_true", help="use the saved calibration")
    p.add_argument("--allow-busy", action="store_true", help="calibrate even on a busy host")
    p.add_argument("--async-only", action="store_true", help="only check 3 (an async op's span)")
    args = p.parse_args(argv)
    if args.async_only:
        return 0 if async_span() else 1
    quiet(after=False)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cpu-accuracy-"))
    if not args.no_calibrate:
        os.environ[CACHE_ENV] = str(tmp / "cache")
        busy = [] if args.allow_busy else ["--strict"]  # the goals want a steady calibration
        for attempt in range(1, CALIBRATIONS + 1):  # a refused calibration: the host was unsteady
            done = subprocess.run([sys.executable, "-m", "harness", "calibrate", *busy],
                                  cwd=ROOT, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                break
            print(f"calibration {attempt}: {done.stderr.strip().splitlines()[-1]}")
        else:
            return 1
        print(f"calibrated into {tmp / 'cache'}")
    met = roof = True
    for i in range(args.sweeps):
        out = tmp / f"sweep{i}"
        harness("sweep", str(ROOT / "sweeps" / "quick.toml"), "--out", str(out))
        (sweep_dir,) = list(out.iterdir())
        med, worst, name = sweep_figures(sweep_dir)
        ok = 0.8 <= med <= 1.05 and worst <= 1.1
        met &= ok
        print(f"quick sweep {i + 1}: large matmuls median efficiency {med:.2f} (goal 0.8-1.05); "
              f"largest visible op {worst:.2f} {name} (goal <= 1.1): "
              f"{'met' if ok else 'NOT met'}")
        roof &= show(f"quick sweep {i + 1}, every point", roofs(sweep_ops(sweep_dir)))
    errs = [llama_log_error(tmp / f"llama{i}") for i in range(args.llama_runs)]
    for i, (_, _, r) in enumerate(errs):
        roof &= show(f"llama_train run {i + 1}", r)
    for workload in LLAMA[1:]:
        for i in range(args.llama_runs):
            roof &= show(f"{workload} run {i + 1}",
                         llama_log_error(tmp / f"{workload}{i}", workload)[2])
    if errs:
        worst = max(e for e, _, _ in errs)
        print(f"llama_train: median |ln(predicted/measured)| over {errs[0][1]} modeled ops, "
              f"{args.llama_runs} runs: {', '.join(f'{e:.2f}' for e, _, _ in errs)} (worst a "
              f"factor of {math.exp(worst):.2f}; goal <= 0.5): "
              f"{'met' if worst <= 0.5 else 'NOT met'}")
    for i in range(args.mlp_runs):
        roof &= show(f"MLP gradient step {MLP}, every device, run {i + 1}", mlp_step(True),
                     apart=True)
    if args.mlp_runs:  # a limit, shown apart: the chip's rates are the all-busy ones
        show(f"MLP gradient step {MLP}, one device alone (priced at all-busy rates)",
             mlp_step(False))
    print(f"sweep goal {'met' if met else 'NOT met'} in {args.sweeps} sweeps in a row")
    print(f"roof goal (no op holding >= {VISIBLE:.0%} of its step above {ROOF:.0%} of its roof, "
          f"matmuls' median within {MEDIAN[0]}-{MEDIAN[1]}, an MLP step's matmuls within "
          f"{APART}x of each other) {'met' if roof else 'NOT met'}")
    quiet(after=True)
    async_span()
    return 0


if __name__ == "__main__":
    sys.exit(main())
