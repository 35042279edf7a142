"""Serving (``harness predict serve``, ``harness plan llama_decode``): one row per batch size on
the latency-throughput frontier, and one row per serving layout (``predictions.serving``,
``predictions.serving_layouts``; inference.md, applied-inference.md)."""
from __future__ import annotations

from harness.schema.glossary import term
from harness.schema.plan import FITS, PEAK_BYTES, PLAN_NOTE
from harness.schema.step import PREDICTED_STEP_S
from harness.schema.summary import MESH

# --- the frontier: one row per (precision, batch size) ---
PRECISION = term("precision", "bytes per parameter and per KV element: bf16 2 and 2, int8 1 and "
                 "1, int4 0.5 and 0.5 (applied-inference.md)")
NUM_CHIPS = term("num_chips", "N, the chips the model and its KV caches are spread over")
BATCH = term("batch", "B, sequences decoded together, one token each per step")
KV_S = term("kv_s", "reading the KV caches a step, KV bytes / (N * W_hbm) (inference.md)")
PARAMS_S = term("params_s", "reading the weights a step, W bytes / (N * W_hbm) (inference.md)")
FLOPS_S = term("flops_s", "the matmuls' FLOPs a step, 2 * P * B / (N * C) (inference.md)")
ICI_S = term("ici_s", "the model-parallel layer's ICI: two AllReduces of [B, D] per block over "
             "Y (inference.md §7.4, priced as sharding.md)")
SERVE_STEP_S = term("serve_step_s", "one decode step, the per-token latency: kv + max(params, "
                    "flops, ici) (inference.md)")
SERVE_BOUND = term("serve_bound", "the largest term of the step: kv, params, flops or ici")
TOKENS_PER_S_PER_CHIP = term("tokens_per_s_per_chip", "generated tokens per second per chip, "
                             "B / (step * N) (applied-inference.md)")
QPS_PER_CHIP = term("qps_per_chip", "queries per second per chip, B / (step * g * N) with g "
                    "generated tokens a query (applied-inference.md)")
TTFT_S = term("ttft_s", "time to first token: the prompt's prefill on the N chips at the MFU "
              "given (inference.md)")
USD_PER_MTOK = term("usd_per_mtok", "dollars per million generated tokens at the $/chip-hour "
                    "given (none built in)")
FRONTIER = (PRECISION, NUM_CHIPS, BATCH, KV_S, PARAMS_S, FLOPS_S, ICI_S, SERVE_STEP_S,
            SERVE_BOUND, TOKENS_PER_S_PER_CHIP, QPS_PER_CHIP, TTFT_S, USD_PER_MTOK)

# --- the serving plan: one row per layout of the weights and the KV cache ---
KV_LAYOUT = term("kv_layout", "where the KV cache lies: heads (up to K-way), batch (two "
                 "AllToAlls a layer) or sequence (Q gathered, combined flash-style) (§7.4)")
WEIGHTS_BYTES = term("weights_bytes", "weights per chip, model-parallel over Y")
KV_CACHE_BYTES = term("kv_cache_bytes", "KV cache per chip at the batch planned")
B_MAX = term("b_max", "the largest batch whose KV caches fit beside the weights on this layout")
KV_COMM_S = term("kv_comm_s", "the KV layout's own collectives a step (AllToAlls, or AllGather "
                 "and combine)")
COMPILED = term("compiled", "whether the layout was compiled ahead of time: yes, no (not asked "
                "or not in the top), or why it cannot be")
SERVE_PLAN = (KV_LAYOUT, MESH, WEIGHTS_BYTES, KV_CACHE_BYTES, FITS, B_MAX, KV_S, KV_COMM_S,
              PARAMS_S, FLOPS_S, ICI_S, SERVE_STEP_S, TOKENS_PER_S_PER_CHIP, COMPILED,
              PREDICTED_STEP_S, PEAK_BYTES, PLAN_NOTE)
