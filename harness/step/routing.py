"""An MoE run's routing, measured (issue 54 part 3): the routing statistics a step returned
(``workloads.llama.moe_step``: tokens per expert per layer, dropped token-choices, balance loss),
the routed matmuls priced at what they computed with the routed FLOPs from those statistics
beside them, and load imbalance named as a straggler caused by routing.

- Statistics per layer: tokens per expert (min, median, max, the busiest expert), the imbalance
  max/mean (mean = tokens·k/E, book §5.4), the dropped token-choices and their share of tokens·k.
- Routed FLOPs (book §5.4): an expert's gated MLP is 3 matrices of 2·D·F FLOPs a token-choice
  forward; a training step 3 times that (forward, and the backward's two matmuls per matrix).
  Global over the step: sum_l 2·(tokens·k − dropped_l)·D·F·3·passes; per device, that over
  the devices the batch is split over (the expert axes and any data axes beside them).
- With ``experts_impl=tiled`` (``workloads.llama.moe_gmm``) each loop runs sum_g ceil(g/tile)
  tiles, g the tokens each of the device's E/Z experts got: the devices holding the busiest
  expert run the longest loops and the others wait for them at the combine all-to-all. Their
  cost is measured from the trace (the loops' body ops per device and step); on a CPU host of
  8 virtual devices sharing its cores that time is only indicative, the tile counts are exact.
"""
from __future__ import annotations

import math
import statistics as stats

import numpy as np

from harness.schema.routing import (  # noqa: F401 (ROUTING: the meta key, re-exported)
    DROP_SHARE,
    IMBALANCE,
    ROUTING,
    TOKENS_PER_EXPERT,
)
from harness.units import fmt_seconds

PASSES = {True: 3, False: 1}  # training: forward + backward (2x) — book §5.4 "6·P_active"
MATRICES = 3  # W_gate, W_up, W_down of a gated (SwiGLU) expert


def layer_stats(tokens_E, dropped: int, balance: float, tokens: int, k: int) -> dict:
    """One layer's figures: ``tokens_E`` token-choices per expert, of ``tokens``·``k``."""
    t = [int(x) for x in tokens_E]
    mean = tokens * k / len(t)  # book §5.4: k of E experts per token
    busiest = int(np.argmax(t))
    return {TOKENS_PER_EXPERT: t, "min": min(t), "median": float(stats.median(t)),
            "max": max(t), "busiest": busiest, IMBALANCE: max(t) / mean if mean else math.nan,
            "dropped": int(dropped), DROP_SHARE: dropped / (tokens * k) if tokens else 0.0,
            "balance_loss": float(balance)}


def statistics(routing: dict, tokens: int, k: int) -> list[dict]:
    """Per layer figures from a step's routing output (``moe_step.routing_of``)."""
    return [layer_stats(t, d, b, tokens, k) for t, d, b in
            zip(routing["tokens_per_expert_LE"], routing["dropped_L"], routing["balance_loss_L"])]


def routed_flops(layers: list[dict], D: int, F: int, training: bool) -> float:
    """The step's routed FLOPs, global: sum_l 2·(routed − dropped)·D·F·3 per pass (§5.4)."""
    kept = sum(sum(l_["tokens_per_expert"]) - l_["dropped"] for l_ in layers)
    return 2.0 * kept * D * F * MATRICES * PASSES[training]


def tiles(layers: list[dict], Z: int, tile: int, replicas: int = 1) -> list[int]:
    """Per expert device z (experts z·E/Z ... (z+1)·E/Z − 1): one tiled loop's tiles over the
    layers, sum_l sum_e ceil(tokens_le / tile) (``moe_gmm.trips``). With the batch over
    ``replicas`` groups of expert devices beside the expert axes, each group's device gets
    its group's tokens: taken as tokens_le / replicas (the routing output is global)."""
    out = [0] * Z
    for l_ in layers:
        t = l_["tokens_per_expert"]
        E_l = len(t) // Z
        for z in range(Z):
            out[z] += sum(math.ceil(g / replicas / tile) for g in t[z * E_l:(z + 1) * E_l])
    return out


def _padded_share(kept: float, tokens: int, k: int, E: int, Z: int, n_batch: int) -> float:
    """Dropless (``moe_dispatch.dropless``): a device's experts run on Z·n·min(k, E/Z) rows,
    n = tokens/n_batch its group; it got kept/n_batch of them on average."""
    return kept / (Z * tokens * min(k, E // Z))


def _capacity_share(kept: float, tokens: int, k: int, E: int, Z: int, n_batch: int,
                    factor: float = 1.0) -> float:
    """Capacity (``moe_dispatch.capacity``): a device's experts run on E·C slots, C =
    ceil(factor·n·k/E) (GShard); it got kept/n_batch of them on average."""
    C = max(1, math.ceil(factor * tokens / n_batch * k / E))
    return kept / (n_batch * E * C)


# routed_matmuls' form -> the share of the rows it computes that the routing filled
SHARES = {"ragged": _padded_share, "dense over every expert": _padded_share,
          "padded capacity": _capacity_share}


def matmul_rows(table, layers: list[dict], tokens: int, k: int, Z: int, n_batch: int,
                factor: float) -> list[dict]:
    """``routed_matmuls``' rows (per device, as the HLO computes them) with the routed FLOPs
    from the routing statistics: the FLOPs of the rows the HLO computes (``routed_flops`` for
    ragged and dense forms, ``flops`` for padded capacity) times the share of those rows the
    step's token-choices filled (``SHARES``; mean over layers and devices)."""
    if table is None or not len(table):
        return []
    E = len(layers[0]["tokens_per_expert"])
    kept = stats.mean(sum(l_["tokens_per_expert"]) - l_["dropped"] for l_ in layers)
    out = []
    for r in table.to_dict("records"):
        flops, form = float(r["flops"]), r["form"]
        capacity = form == "padded capacity"
        rows = flops if capacity else float(r["routed_flops"])
        extra = {"factor": factor} if capacity else {}
        routed = rows * SHARES[form](kept, tokens, k, E, Z, n_batch, **extra)
        out.append({"op": r["op"], "form": form, "count": int(r["count"]), "flops": flops,
                    "routed_flops_hlo": float(r["routed_flops"]), "routed_flops": routed,
                    "waste": 1 - routed / flops if flops else math.nan})
    return out


def tiled_rows(loops: dict[str, int], layers: list[dict], D: int, F: int, Z: int,
               tile: int, n_batch: int) -> list[dict]:
    """One row per tiled loop (``loops``: op -> executions per step), per device (mean over
    the expert devices): computed = 2·tile·D·F a tile, routed = 2·D·F a token-choice."""
    L = max(1, len(layers))
    per_dev = tiles(layers, Z, tile, n_batch // Z)
    kept = sum(sum(l_["tokens_per_expert"]) - l_["dropped"] for l_ in layers)
    out = []
    for op, count in loops.items():
        share = count / L  # executions per layer of this loop
        flops = 2.0 * tile * D * F * stats.mean(per_dev) * share
        routed = 2.0 * D * F * kept / n_batch * share
        out.append({"op": op, "form": "tiled", "count": int(count), "flops": flops,
                    "routed_flops": routed, "waste": 1 - routed / flops if flops else math.nan})
    return out


def busiest(layers: list[dict], tokens: int, k: int) -> dict:
    """The busiest expert over the layers: the most token-choices it got in a layer, of
    ``tokens``, and that over the mean tokens·k/E (book §5.4), with the drops of the step."""
    totals = np.sum([l_["tokens_per_expert"] for l_ in layers], axis=0)
    e = int(np.argmax(totals))
    got = int(max(l_["tokens_per_expert"][e] for l_ in layers))
    dropped = sum(l_["dropped"] for l_ in layers)
    return {"expert": e, "tokens": got, "of": tokens, "ratio": got / (tokens * k / len(totals)),
            "dropped": dropped, "drop_share": dropped / (tokens * k * len(layers)),
            "layers": len(layers)}


def imbalance(layers: list[dict], tokens: int, k: int, tile: int, loops_per_layer: int,
              devices: list[list[int]], loop_s: dict[int, float] | None,
              replicas: int = 1) -> dict:
    """The routing straggler: the busiest expert (``busiest``), its devices' tiles per step
    against the median other expert device's, and the time the others waited for them
    (measured: ``loop_s``, device -> its tiled loops' seconds per step; None: not measured)."""
    out = busiest(layers, tokens, k)
    Z = len(devices)
    per_dev = [n * loops_per_layer for n in tiles(layers, Z, tile, replicas)]
    z = out["expert"] // (len(layers[0]["tokens_per_expert"]) // Z)
    others = [n for i, n in enumerate(per_dev) if i != z] or [per_dev[z]]
    out.update({"devices": devices[z], "tiles": per_dev[z],
                "tiles_others": float(np.median(others)), "tiles_per_device": per_dev})
    if loop_s:
        mine = [loop_s[d] for d in devices[z] if d in loop_s]
        rest = [s for d, s in loop_s.items() if d not in devices[z]]
        if mine and rest:
            out["busiest_s"], out["others_s"] = max(mine), float(np.median(rest))
            out["wait_s"] = max(0.0, out["busiest_s"] - out["others_s"])
    return out


def imbalance_line(d: dict) -> str:
    """The imbalance named: the busiest expert, its tokens, the drops, and with a tiled loop
    its devices' tiles and (measured) the time the others waited."""
    out = (f"routing imbalance: expert {d['expert']} got {d['tokens']} of {d['of']} tokens "
           f"({d['ratio']:.3g}x the mean)")
    if d.get("dropped"):
        out += (f"; {d['dropped']} token-choices dropped over the {d['layers']} layers "
                f"({d['drop_share']:.0%})")
    if "tiles" in d:
        out += (f"; its devices' ({','.join(str(x) for x in d['devices'])}) expert loop ran "
                f"{d['tiles']} tiles against {d['tiles_others']:g}")
    if "wait_s" in d:
        out += (f", costing {fmt_seconds(d['wait_s'])} the others waited a step (their loops "
                f"{fmt_seconds(d['others_s'])} against {fmt_seconds(d['busiest_s'])}; measured "
                f"on virtual devices sharing the host's cores: indicative only)")
    return out


def tiled_loops(module) -> dict:
    """The data-dependent loops (trip count unknown to XLA, no loop inside: the tiled expert
    loops): op -> (executions per step, the names of its body's ops)."""
    from harness.hlo.walk import executed, trip_count

    out = {}
    for instr, count in executed(module):
        if instr.opcode != "while" or trip_count(module, instr).source != "unknown":
            continue
        body = module.computation(instr.called("body")[0]).instructions
        if not any(i.opcode == "while" for i in body):
            out[instr.name] = (count, {i.name for i in body})
    return out


def loop_seconds(events, ops: set[str]) -> dict[int, float]:
    """Per device: its ``ops``' seconds per step (median over the measured steps)."""
    from harness import schema

    if events is None or not len(events) or not ops:
        return {}
    mine = events[events[schema.OP].isin(ops)]
    per = mine.groupby([schema.DEVICE, schema.STEP])[schema.DURATION_NS].sum()
    return {int(d): float(s) * 1e-9 for d, s in per.groupby(level=0).median().items()}


def expert_devices(built) -> tuple[list[list[int]], int]:
    """Per expert-axes coordinate z: the device ids holding experts z·E/Z ... (z+1)·E/Z − 1;
    and the devices the batch is split over (the layout's batch axes, expert ones included)."""
    from workloads.llama.config import dims_of
    from workloads.llama.sharding import Sharder

    mesh = built.mesh
    layout = Sharder(mesh, built.cfg.parallelism, dims_of(built.cfg)).layout
    axes = layout.expert
    names = list(mesh.axis_names)
    order = [names.index(a) for a in axes] + [i for i, a in enumerate(names) if a not in axes]
    Z = math.prod(mesh.devices.shape[names.index(a)] for a in axes)
    grid = np.transpose(np.vectorize(lambda d: d.id)(mesh.devices), order).reshape(Z, -1)
    n_batch = math.prod(mesh.devices.shape[names.index(a)] for a in set(layout.batch) | set(axes))
    return [sorted(int(x) for x in row) for row in grid], n_batch


def of_built(built, run, module, routed=None) -> dict | None:
    """The routing section of a run of an MoE workload (None for a dense one): one more step
    of ``built`` (the captured steps reuse its arguments, so it routes as they did), its
    routing output read once; ``module``: the run's parsed HLO (None: no tiled loops found);
    ``routed``: its routed matmuls (``harness.explain.routed.routed_matmuls``; None: none
    priced); ``run.events``: the trace (``run`` None: nothing measured)."""
    cfg = built.cfg
    if not getattr(cfg, "E", 0):
        return None
    from workloads.llama import moe_step

    routing = moe_step.routing_of(built.fn(*built.args))
    if routing is None:
        return None
    k, D, F, tile = cfg.k, cfg.D, cfg.F, cfg.expert_tile
    tokens = int(sum(routing["tokens_per_expert_LE"][0])) // k
    layers = statistics(routing, tokens, k)
    training = built.workload.name.endswith("_train")
    devices, n_batch = expert_devices(built)
    Z = len(devices)
    out = {"tokens": tokens, "k": k, "E": cfg.E, "Z": Z, "devices_batch": n_batch,
           "experts_impl": cfg.experts_impl,
           "capacity_factor": cfg.capacity_factor, "layers": layers,
           "routed_flops": routed_flops(layers, D, F, training), "training": training,
           "matmuls": matmul_rows(routed, layers, tokens, k, Z, n_batch, cfg.capacity_factor)}
    out["imbalance"] = busiest(layers, tokens, k)
    loops = tiled_loops(module) if cfg.experts_impl == "tiled" and module is not None else {}
    if loops:
        out["matmuls"] += tiled_rows({op: c for op, (c, _) in loops.items()}, layers, D, F, Z,
                                     tile, n_batch)
        body = set().union(*(names for _, names in loops.values()))
        per_layer = round(sum(c for c, _ in loops.values()) / len(layers))
        out["imbalance"] = imbalance(layers, tokens, k, tile, per_layer, devices,
                                     loop_seconds(getattr(run, "events", None), body),
                                     n_batch // Z)
    return out
