"""Whole sweeps of the same code, as a nightly job compares them: does ``harness compare`` cry wolf,
and does it catch a same-program slowdown with one run a side?

    python benchmarks/bench_sweep_aa.py [--out DIR] [--sweep sweeps/quick.toml] [--confirm 2]
    python benchmarks/bench_sweep_aa.py --slowdown [--out DIR]

A/A: four sweeps of one commit into ``DIR/nights/`` (the fourth beside a CPU-bound process,
``python -c "while True: pass"``), then ``harness compare`` of every pair of them (1-2, 2-3,
1-3, 3-4, 1-4, 2-4) with ``--root DIR/nights`` (the history each point's own noise comes from)
and ``--confirm N``; each comparison's exit code and verdicts are printed (goal: exit 0 every
time; unstable points, listed apart, counted). ``--slowdown``: one ``matmul`` run with
``trips=10`` and one with ``trips=13`` (one program, 1.3x the work: ``workloads.matmul``),
compared with ``--confirm N`` and no history (goal: a regression, confirmed). Given sweeps
already under ``DIR/nights``, only the comparisons run.
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
PAIRS = ((0, 1), (1, 2), (0, 2), (2, 3), (0, 3), (1, 3))  # every pair; sweep 4 beside a CPU load
SLOW_POINT = ("--set", "case=no_comm", "--set", "B=512", "--set", "D=1024", "--set", "F=1024",
              "--steps", "10")


def harness(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env,
                          check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sweep(sweep_file: Path, nights: Path, load: bool) -> Path:
    """One sweep under ``nights`` (beside a spinning process when ``load``); its directory."""
    before = set(nights.glob("*")) if nights.exists() else set()
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load else None
    try:
        harness("sweep", str(sweep_file), "--out", str(nights), "--no-point-plots")
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()
    (made,) = set(nights.glob("*")) - before
    return made


def compare(base: Path, cand: Path, root: Path, confirm: int) -> tuple[int, dict]:
    """``harness compare``'s exit code and verdict object for one pair of sweeps."""
    out = harness("compare", str(base), str(cand), "--root", str(root), "--confirm",
                  str(confirm), "--format", "json", check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(f"harness compare failed ({out.returncode}): {out.stderr.strip()}")
    return out.returncode, json.loads(out.stdout)


def aa(out: Path, sweep_file: Path, confirm: int) -> list[dict]:
    """The four comparisons of four sweeps of one commit (made under ``out/nights`` unless
    there), each as {pair, exit, verdicts, unstable: [(name, s)]}."""
    nights = out / "nights"
    made = sorted(p for p in nights.glob("*") if p.is_dir() and p.name != "confirmations") \
        if nights.exists() else []
    for i in range(len(made), 4):
        print(f"sweep {i + 1} of 4{' (beside a CPU load)' if i == 3 else ''}", flush=True)
        made.append(sweep(sweep_file, nights, load=i == 3))
    results = []
    for a, b in PAIRS:
        code, obj = compare(made[a], made[b], nights, confirm)
        pairs = obj["pairs"]
        results.append({"pair": f"{a + 1}-{b + 1}", "exit": code,
                        "verdicts": dict(Counter(p["verdict"] for p in pairs)),
                        "unstable": [(p["name"], p["noise"].get("s")) for p in pairs
                                     if p["verdict"] == "unstable"],
                        "regressions": [(p["name"], p["message"]) for p in pairs
                                        if p["verdict"] == "regression"]})
    return results


def slowdown(out: Path, confirm: int) -> tuple[int, dict]:
    """A 1.3x same-program slowdown of a matmul point, one run a side, no history."""
    runs = []
    for trips in (10, 13):
        dest = out / f"trips{trips}"
        harness("--devices", "8", "run", "matmul", *SLOW_POINT, "--set", f"trips={trips}",
                "--out", str(dest))
        runs.append(next(p.parent for p in dest.rglob("meta.json")))
    return compare(runs[0], runs[1], out / "root", confirm)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where the sweeps go (default: a "
                                                           "temporary directory)")
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "quick.toml")
    ap.add_argument("--confirm", type=int, default=2)
    ap.add_argument("--slowdown", action="store_true", help="the 1.3x check instead of A/A")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-sweep-aa-"))
    if args.slowdown:
        code, obj = slowdown(out, args.confirm)
        p = obj["pairs"][0]
        print(f"matmul trips 10 -> 13: exit {code}, {p['verdict']} ({p['cause']}): "
              f"{p['message']}")
        return 0
    for r in aa(out, args.sweep, args.confirm):
        print(f"{r['pair']}: exit {r['exit']}, " + ", ".join(
            f"{n} {v}" for v, n in sorted(r["verdicts"].items())))
        for name, s in r["unstable"]:
            print(f"    unstable: {name} (s={s:.3g})" if s is not None else
                  f"    unstable: {name}")
        for name, message in r["regressions"]:
            print(f"    REGRESSION: {name}: {message}")
    print(f"sweeps and comparisons under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
