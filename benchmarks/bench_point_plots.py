"""What a sweep's per-point plots cost: the time drawing each point's step, roofline and category
plots (``harness.report.plots.drawing_time``, kept per point as ``plot_seconds``) as a share of
the time the same sweep's points took. One run, one sweep: the share is measured inside it.

    python benchmarks/bench_point_plots.py [--file sweeps/quick.toml]

Printed: the plots' share of the points' time, and per workload the median drawing time and
point time (the first point's drawing includes importing matplotlib).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.devices import quiet_absent_tpu

quiet_absent_tpu()  # as the harness command does, before jax starts

from harness.sweep import report as sweep_report
from harness.sweep import run as sweep
from harness.sweep.grid import load_sweep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", type=Path, default=ROOT / "sweeps" / "quick.toml")
    args = p.parse_args(argv)
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
          "(figures are only as quiet as the host)")
    plan = load_sweep(args.file)
    out = Path(tempfile.mkdtemp(prefix="bench-point-plots-"))
    result = sweep.run_sweep(plan, out / plan.name, close=False)
    ran = [r for r in result.records if r["status"] == sweep.DONE]
    print(f"{plan.name}: {sweep_report.timing(ran)}")
    for workload in dict.fromkeys(r["workload"] for r in ran):
        mine = [r for r in ran if r["workload"] == workload]
        draw = statistics.median(r["plot_seconds"] for r in mine)
        took = statistics.median(r["seconds"] for r in mine)
        print(f"  {workload}: {len(mine)} point(s), median {draw:.2f} s drawing of {took:.2f} s "
              f"({draw / took:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
