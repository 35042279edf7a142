"""``harness predict-hlo WORKLOAD``: compile on a virtual mesh, cost the HLO on chips, no run."""
from __future__ import annotations

import json
from types import SimpleNamespace

from harness import schema
from harness.book import analytic
from harness.commands import count
from harness.commands.run import parse_sets
from harness.hlo import cross_check, parse_module
from harness.hlo.chips import predict_module
from harness.report import tables
from predictions import hardware

OP_COLUMNS = (schema.OP, schema.OPCODE, schema.CATEGORY, schema.BOUND, schema.COUNT,
              schema.PREDICTED_S, schema.T_COMPUTE_S, schema.T_MEMORY_S, schema.T_COMM_S,
              schema.COLLECTIVE, schema.GROUP_SIZE)


def add_arguments(p) -> None:
    p.add_argument("workload", help="workload name, e.g. llama_train")
    p.add_argument("--preset", default="tiny", help="config preset, e.g. 70b (default tiny)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--mesh", default="8x8", help="target mesh shape (default 8x8)")
    p.add_argument("--chip", dest="chips", action="append", default=[],
                   help="chip to predict for (repeatable; default tpu-v5p)")
    p.add_argument("--top", type=count, default=15, help="op rows to print per chip")
    p.add_argument("--format", choices=["text", "md", "json"], default="text")


def main(args) -> int:
    import workloads  # deferred: importing workloads imports jax
    from workloads.aot import compile_in_subprocess
    from workloads.mesh import parse_shape

    chips = [hardware.chip_entry(c) for c in (args.chips or ["tpu-v5p"])]
    overrides = parse_sets(args.sets)
    wl = workloads.get(args.workload)
    cfg = workloads.make_config(args.workload, args.preset, overrides)
    sizes = parse_shape(args.mesh)
    mesh = SimpleNamespace(shape=dict(zip(wl.mesh_axes, sizes)))
    aot = compile_in_subprocess(args.workload, args.preset, overrides, args.mesh)
    module = parse_module(aot.hlo_text)
    check = cross_check(module, aot.cost_analysis)
    results = []
    for chip in chips:
        book = analytic(args.workload, cfg, mesh, chip)
        results.append(predict_module(module, chip, devices=aot.devices,
                                      model_flops=book.model_flops if book else None,
                                      analytic_s=book.analytic_s if book else None))
    head = (f"{args.workload} ({args.preset}) on mesh {dict(mesh.shape)}: lowered in "
            f"{aot.lower_s:.1f} s, compiled in {aot.compile_s:.1f} s on {aot.devices} virtual "
            f"devices; HLO FLOPs vs XLA cost_analysis: {_rel(check, 'flops')}, "
            f"loop bodies once: {_rel(check, 'flops_loops_once')}")
    if args.format == "json":
        print(json.dumps({"header": head, "cross_check": check, "chips": [
            {"chip": r.chip, "totals": r.totals,
             "categories": json.loads(r.categories.to_json(orient="records")),
             "top_ops": json.loads(r.ops.head(args.top).to_json(orient="records"))}
            for r in results]}, indent=1, default=str))
        return 0
    fmt = "md" if args.format == "md" else "text"
    print(head)
    for r in results:
        print(f"\n{r.chip}: " + "  ".join(f"{k}={tables.fmt_figure(k, v)}"
                                          for k, v in r.totals.items()))
        print(tables.render(r.categories, fmt), end="")
        print(tables.render(r.ops.head(args.top), fmt, OP_COLUMNS), end="")
    return 0


def _rel(check: dict, key: str) -> str:
    v = check.get(f"{key}_rel_diff")
    return "n/a" if v is None else f"{v:+.1%}"
