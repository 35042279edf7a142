"""Real A/A pairs, as a nightly CI job makes them: does ``harness compare`` cry wolf?

    python benchmarks/bench_regress_real.py [--pairs 10] [--out DIR] [--export FILE]

Each pair is two ``python -m pytest`` sessions of a user's own benchmark
(``tests/fixtures/regress/user_model.py``, copied out of the project as ``test_user_model.py``:
a data-parallel MLP training step through the ``harness_run`` fixture, 10 steps) saved with
``--harness-save``: the baseline as the host is,
the candidate with a CPU load beside it (``python -c "while True: pass"``, started before the
session and killed after it). Then ``harness compare BASE CAND --json`` on the two directories
as they are; every verdict is counted (goal: no regression). With ``--whole-batch`` the
candidate runs the layout that gives every device the whole batch (goal: every pair a
regression whose cause is the program). ``--export FILE`` writes each run's wall step times and
host probe rates (the data ``bench_regress_sim.py`` draws from); given existing pair
directories under ``--out`` (``base*``, ``cand*``), only the comparisons run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "regress" / "user_model.py"
sys.path.insert(0, str(ROOT))


def session(dest: Path, cwd: Path, load: bool, whole_batch: bool = False) -> None:
    """One pytest session of the user's benchmark, saved under ``dest``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **({"WHOLE_BATCH": "1"} if whole_batch else {}))
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load else None
    try:
        subprocess.run([sys.executable, "-m", "pytest", "test_user_model.py", "-q",
                        "-p", "no:cacheprovider",
                        "-p", "harness.pytest_plugin", "--harness-devices", "8",
                        "--harness-save", str(dest), "--rootdir", str(cwd)],
                       cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()


def compare(base: Path, cand: Path) -> dict:
    """``harness compare``'s verdict object and exit code for one pair of directories."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        rc = subprocess.run([sys.executable, "-m", "harness", "compare", str(base), str(cand),
                             "--json", f.name], cwd=ROOT, stdout=subprocess.DEVNULL).returncode
        return dict(json.loads(Path(f.name).read_text()), exit=rc)


def export(out: Path, dest: Path) -> None:
    """Each run's wall step times and probe rates, and whether a load ran beside it."""
    from harness import schema
    from harness.chip import drift
    from harness.record import Run, store

    rows = []
    for d in store.run_dirs(out):
        run = Run.load(d)
        probe = run.meta.get(drift.HOST_DRIFT) or {}
        rows.append({"run": str(d.relative_to(out)), "loaded": d.parent.name.startswith("cand"),
                     **{k: run.meta.get(k) for k in (schema.STEP_TIMES_S,
                                                     schema.STEP_CPU_TIMES_S)},
                     **{k: probe.get(k) for k in (drift.RATES, drift.CPU_RATES)}})
    dest.write_text(json.dumps(rows) + "\n")
    print(f"{len(rows)} runs exported to {dest}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--out", type=Path, default=None, help="where the pairs' runs go (default: "
                   "a temporary directory); existing pairs there are compared as they are")
    p.add_argument("--whole-batch", action="store_true",
                   help="the candidate does the whole batch on every device (a real regression)")
    p.add_argument("--export", type=Path, default=None, metavar="FILE")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-regress-real-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "test_user_model.py").write_text(MODEL.read_text())  # outside this project
    done = sorted(d.name[4:] for d in out.glob("cand*"))
    for i in range(len(done), args.pairs if not done else len(done)):
        session(out / f"base{i:02d}", out, load=False)
        session(out / f"cand{i:02d}", out, load=not args.whole_batch,
                whole_batch=args.whole_batch)
        print(f"pair {i + 1}/{args.pairs} run", file=sys.stderr)
    seen, exits = Counter(), Counter()
    for cand in sorted(out.glob("cand*")):
        v = compare(out / ("base" + cand.name[4:]), cand)
        (pair,) = v["pairs"]
        seen[f"{pair['verdict']} ({pair['cause']})"] += 1
        exits[v["exit"]] += 1
        print(f"  {cand.name}: {pair['verdict']} ({pair['cause']}): {pair['message']}")
    n = sum(seen.values())
    what = "whole batch on every device" if args.whole_batch else "A/A, a CPU load beside"
    print(f"{n} pairs ({what}; runs in {out}): "
          + ", ".join(f"{k} {c}" for k, c in sorted(seen.items()))
          + "; exit codes " + ", ".join(f"{k}: {c}" for k, c in sorted(exits.items())))
    if args.export:
        export(out, args.export)
    return 0


if __name__ == "__main__":
    sys.exit(main())
