"""Compile-cache benchmark: ``harness run llama_train`` with a cold cache, then a warm one.

Both runs are fresh processes (``python -m harness run llama_train``) sharing one empty cache
directory (``SCALING_HARNESS_CACHE``): the first compiles every program and fills JAX's
persistent compilation cache, the second loads them. A run with ``--no-compile-cache`` goes
first: it is the uncached reference and it saves the CPU calibration into the cache directory,
so that neither timed run includes calibrating. The script prints each wall time and the
speed-up of the warm run over the cold one, all measured in this one invocation (ratios are
robust to a busy host; the absolute seconds are not).

    python benchmarks/bench_compile_cache.py [--workload llama_train] [--preset tiny] [--repeat 1]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed_run(workload: str, preset: str, cache: Path, out: Path, *flags: str) -> float:
    env = dict(os.environ, SCALING_HARNESS_CACHE=str(cache))
    cmd = [sys.executable, "-m", "harness", "run", workload, "--preset", preset,
           "--out", str(out), "--top", "1", *flags]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="llama_train")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm pairs (fresh cache each)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as tmp:
        root = Path(tmp)
        for r in range(args.repeat):
            cache, out = root / f"cache-{r}", root / f"results-{r}"
            off = timed_run(args.workload, args.preset, cache, out, "--no-compile-cache")
            cold = timed_run(args.workload, args.preset, cache, out)
            warm = timed_run(args.workload, args.preset, cache, out)
            rows.append((cold, warm, off))
            print(f"pair {r + 1}: cold cache {cold:.2f} s, warm cache {warm:.2f} s, "
                  f"no cache {off:.2f} s: warm is {cold / warm:.2f}x faster than cold")
    cold = sum(c for c, _, _ in rows) / len(rows)
    warm = sum(w for _, w, _ in rows) / len(rows)
    print(f"harness run {args.workload} ({args.preset}): second run with a warm compile cache "
          f"is {cold / warm:.2f}x faster ({cold:.2f} s -> {warm:.2f} s, mean of {len(rows)})")


if __name__ == "__main__":
    main()
