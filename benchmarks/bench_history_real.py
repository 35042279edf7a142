"""Ten nights from a few real sweeps, one point slower from night 6: does ``harness history``
find the change, at night 6, and name its commit range?

    python benchmarks/bench_history_real.py SWEEP [SWEEP ...] --out DIR [--nights 10]
        [--slower-from 6] [--keep KEY ...] [--trim]

Each SWEEP is a real ``harness sweep`` directory of ``sweeps/quick.toml`` with one more point,
the matmul ``case=no_comm B=6144 D=1024 F=1024`` (1.5x the FLOPs of ``B=4096``). Night i
(1-based) copies the runs of sweep (i - 1) mod len(SWEEPS) into ``DIR/night-XX/``, each run's
meta rewritten to the night's commit (a made-up sha, one per night) and time (one day apart);
from ``--slower-from`` on, the runs of ``B=4096`` are replaced by those of ``B=6144`` relabelled
as ``B=4096`` (the same point running a program that does more work: a slower variant). The
traces and report pages are not copied. ``--keep`` keeps only the points whose key contains one
of the strings; ``--trim`` also drops the run's large meta (calibration, notes, step object)
and keeps of its tables only the ops' columns history reads: what ``tests/fixtures/history/``
was made with. Then the history is judged (``harness.regress.trend``) and the change points
printed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from harness import schema  # noqa: E402
from harness.record import store  # noqa: E402
from harness.regress import history, pairs, trend  # noqa: E402

SLOW, AS = "6144", "4096"  # the slower variant's B, and the B it is relabelled as
TRIM = ("calibration", schema.NOTES, schema.STEP_OBJECT, schema.CROSS_CHECK, "config")
OPS = (schema.PROGRAM, schema.OP, schema.COUNT, schema.MEASURED_S, schema.PREDICTED_S,
       schema.EFFICIENCY, schema.FLOPS, schema.HBM_BYTES, schema.COMM_BYTES, schema.COLLECTIVE,
       schema.CATEGORY)
COPIED = ("meta.json", "ops.parquet", "steps.parquet", "categories.csv", "programs.csv",
          "collectives.parquet")


def sha(night: int) -> str:
    return hashlib.sha1(f"night {night}".encode()).hexdigest()


def _is(meta: dict, b: str) -> bool:
    o = meta.get(schema.OVERRIDES) or {}
    return meta.get(schema.WORKLOAD) == "matmul" and o.get("case") == "no_comm" \
        and str(o.get("B")) == b


def make(sweeps: list[Path], out: Path, nights: int, slower_from: int, keep: list[str],
         trim: bool) -> None:
    """Write the nights under ``out`` (the module docstring)."""
    start = datetime(2026, 11, 1, 3, 0)
    for i in range(1, nights + 1):
        src = sweeps[(i - 1) % len(sweeps)]
        for d in store.run_dirs(src):
            meta = json.loads((d / store.META).read_text())
            if _is(meta, AS if i >= slower_from else SLOW):
                continue
            if _is(meta, SLOW):
                meta[schema.OVERRIDES] = dict(meta[schema.OVERRIDES], B=int(AS))
            if keep and not any(k in pairs.key(_Meta(meta)) for k in keep):
                continue
            meta[schema.GIT_SHA] = sha(i)
            meta[schema.GIT_DIRTY] = False
            t = datetime.fromisoformat(str(meta[schema.TIME])[:19])
            meta[schema.TIME] = (start + timedelta(days=i - 1, hours=t.hour - 5, minutes=t.minute,
                                                   seconds=t.second)).isoformat()
            for k in TRIM if trim else ():
                meta.pop(k, None)
            to = out / f"night-{i:02d}" / d.relative_to(src)
            to.mkdir(parents=True, exist_ok=True)
            for name in () if trim else COPIED[1:]:
                if (d / name).exists():
                    shutil.copy2(d / name, to / name)
            if trim:  # the ops' columns that history reads: their time, roofline and work
                ops = pd.read_parquet(d / COPIED[1])
                ops[[c for c in OPS if c in ops]].to_parquet(to / COPIED[1], index=False)
            (to / store.META).write_text(json.dumps(meta, indent=1) + "\n")


class _Meta:
    """What ``pairs.key`` reads of a run: its meta."""

    def __init__(self, meta: dict):
        self.meta, self.name = meta, ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweeps", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--nights", type=int, default=10)
    p.add_argument("--slower-from", type=int, default=6)
    p.add_argument("--keep", nargs="*", default=[])
    p.add_argument("--trim", action="store_true")
    args = p.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out}: exists; give a new directory")
    make(args.sweeps, args.out, args.nights, args.slower_from, args.keep, args.trim)
    found = 0
    for k, s in history.load(args.out).items():
        t = trend.judge_trend(s)
        for c in t.changes:
            print(f"{k}: change at {c.after.name} ({c.change:+.0%}, p={c.p_value:.3f}), "
                  f"commits {c.commits}, {c.cause}: {c.what}")
            found += 1
    print(f"{found} change points over {len(history.load(args.out))} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
