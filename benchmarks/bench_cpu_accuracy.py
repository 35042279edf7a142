"""How well the calibrated ``cpu`` chip predicts this host: the accuracy goals, in one run.

    python benchmarks/bench_cpu_accuracy.py [--sweeps 3] [--llama-runs 3] [--no-calibrate]
                                            [--allow-busy]

0. ``harness calibrate`` (full; it refuses a busy host unless ``--allow-busy``), into a scratch
   cache, unless ``--no-calibrate`` (then this host's saved calibration is used).

1. ``harness sweep sweeps/quick.toml``, ``--sweeps`` times in a row (fresh processes, as a user
   runs them). Per sweep: the median roofline efficiency of the large matmuls (matmul-category
   ops of the matmul points with B >= 1024) and the largest efficiency of any modeled op that
   holds >= 5% of its point's step. Goal: median within 0.8-1.05 and no op above 1.1, in every
   sweep.
2. ``harness run llama_train``, ``--llama-runs`` times: the median |ln(predicted / measured)|
   over all its modeled ops, per run (goal <= 0.5, a factor of 1.65, in every run).

Take it on a quiet host: the figures describe the host only as well as its calibration does
(each run divides out the host's drift since then).
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import schema
from harness.chip.cache import CACHE_ENV
from harness.runs import store
from harness.runs.run import Run

LARGE_B, VISIBLE = 1024, 0.05


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


def llama_log_error(out: Path) -> tuple[float, int]:
    harness("run", "llama_train", "--out", str(out), "--top", "1")
    (path,) = [p for p in out.iterdir() if (p / store.META).exists()]
    ops = Run.load(path).ops
    ok = (ops[schema.PREDICTED_S] > 0) & (ops[schema.MEASURED_S] > 0)
    err = np.abs(np.log(ops.loc[ok, schema.PREDICTED_S] / ops.loc[ok, schema.MEASURED_S]))
    return float(np.median(err)), int(ok.sum())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=int, default=3)
    p.add_argument("--llama-runs", type=int, default=3)
    p.add_argument("--no-calibrate", action="store_true", help="use the saved calibration")
    p.add_argument("--allow-busy", action="store_true", help="calibrate even on a busy host")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cpu-accuracy-"))
    if not args.no_calibrate:
        os.environ[CACHE_ENV] = str(tmp / "cache")
        busy = ["--allow-busy"] if args.allow_busy else []
        done = subprocess.run([sys.executable, "-m", "harness", "calibrate", *busy], cwd=ROOT,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr.strip().splitlines()[-1])
            return 1
        print(f"calibrated into {tmp / 'cache'}")
    met = True
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
    errs = [llama_log_error(tmp / f"llama{i}") for i in range(args.llama_runs)]
    worst = max(e for e, _ in errs)
    print(f"llama_train: median |ln(predicted/measured)| over {errs[0][1]} modeled ops, "
          f"{args.llama_runs} runs: {', '.join(f'{e:.2f}' for e, _ in errs)} (worst a factor of "
          f"{math.exp(worst):.2f}; goal <= 0.5): {'met' if worst <= 0.5 else 'NOT met'}")
    print(f"sweep goal {'met' if met else 'NOT met'} in {args.sweeps} sweeps in a row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
