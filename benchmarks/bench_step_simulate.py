"""The simulated step's cost on a real program: LLaMA-3 70B's training step on v5p 16x16 (FSDP,
per-device batch 4, sequence 4096, remat full), compiled ahead of time by libtpu (1-2 minutes
the first time, then read from the AOT cache), its 80-layer loops played op by op.

Times, in one process and each the median of ``--repeat`` runs: parsing the HLO text, costing
it (``hlo_costs``: the per-op table predict-hlo builds anyway, the baseline), building the
roofline durations and playing the schedule (its first call apart: it fills the module's
caches of categories); prints each and its ratio to the costing, plus the
ops played per second.

    python benchmarks/bench_step_simulate.py [--repeat 5] [--hlo FILE]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.hlo import hlo_costs, parse_module  # noqa: E402
from harness.step.simulate import simulate  # noqa: E402
from harness.step.transfers import roofline_durations  # noqa: E402

OVERRIDES = {"parallelism": "fsdp", "B": "1024", "T": "4096", "remat": "full"}


def hlo_text(path: str | None) -> str:
    if path:
        return Path(path).read_text()
    from harness.plan.compiles import aot_cache_dir
    from workloads.aot import start_compile

    job = start_compile("llama_train", "70b", OVERRIDES, "16x16", tpu_chip="tpu-v5p",
                        cache_dir=aot_cache_dir())
    return job.result().hlo_text


def timed(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hlo", help="an HLO text file instead of the 70B compile")
    args = ap.parse_args()
    text = hlo_text(args.hlo)
    parse_s, module = timed(lambda: parse_module(text), args.repeat)
    # a fresh module per costing run: hlo_costs caches per-instruction costs on the module
    cost_s, table = timed(lambda: hlo_costs(parse_module(text), "tpu-v5p"), args.repeat)
    cost_s -= parse_s
    table = hlo_costs(module, "tpu-v5p")
    dur_s, d = timed(lambda: roofline_durations(module, table), args.repeat)
    cold_s, _ = timed(lambda: simulate(module, d.core_s, d.transfer_s), 1)  # fills the caches
    sim_s, sim = timed(lambda: simulate(module, d.core_s, d.transfer_s), args.repeat)
    played = len(sim.spans)
    print(f"{module.name}: {len(text) / 1e6:.2f} MB of HLO; {played:,} spans played "
          f"(ops and transfers); step {sim.step_s:.4g} s")
    for what, s in (("parse", parse_s), ("hlo_costs (baseline)", cost_s),
                    ("roofline_durations", dur_s), ("simulate, first call", cold_s),
                    ("simulate", sim_s)):
        print(f"  {what:22s} {s * 1e3:8.1f} ms  {s / cost_s:6.2f}x the costing")
    print(f"  {played / sim_s:,.0f} spans played per second")


if __name__ == "__main__":
    main()
