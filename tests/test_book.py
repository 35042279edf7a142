"""Workload-level book figures: each workload record's book model (``Workload.book``), from its
config to the book's formulas."""
from types import SimpleNamespace

import pytest

import workloads
from predictions import hardware


def analytic(name, cfg, mesh, chip):
    return workloads.get(name).book(cfg, mesh, chip)

MESH = SimpleNamespace(shape={"X": 4, "Y": 2})


def test_all_gather_bytes_follow_the_sharding_chapter():
    # each of 4 devices holds 1 MB; the gathered output is 4 MB per device. v5p axis of 4 is a
    # whole-cube side, so it wraps: V / W with W = 2 * 9e10 bidirectional (sharding.md)
    cfg = SimpleNamespace(kind="all_gather", axes="X", nbytes=1e6)
    est = analytic("collective", cfg, MESH, hardware.chip("tpu-v5p"))
    assert est.analytic_s == pytest.approx(4e6 / 1.8e11)
    assert est.model_flops == 0


def test_all_reduce_is_twice_the_gather_of_the_same_array():
    cfg = SimpleNamespace(kind="all_reduce", axes="X", nbytes=4e6)
    est = analytic("collective", cfg, MESH, hardware.chip("tpu-v5p"))
    assert est.analytic_s == pytest.approx(2 * 4e6 / 1.8e11)  # sharding.md: 2V/W


def test_training_model_flops_are_6_matmul_params_tokens_plus_attention():
    c = dict(L=2, D=64, F=128, N=8, K=4, H=8, V=256)
    cfg = SimpleNamespace(**c, B=4, T=32, parallelism="fsdp_tp", param_dtype="bfloat16")
    L, D, F, N, K, H, V = c.values()
    P = L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * V
    # MaxText's MFU: only parameters that take part in matmuls; not the input embedding (a
    # gather, D*V) nor the norms (2D per layer + D)
    P_matmul = P - D * V - (L * 2 * D + D)
    tokens = 4 * 32
    attention = 12 * 4 * 32 * 32 * N * H * L  # transformers.md: 12BT^2NH per layer
    est = analytic("llama_train", cfg, MESH, hardware.chip("tpu-v5p"))
    assert est.model_flops == pytest.approx(6 * P_matmul * tokens + attention)
    assert est.book_flops == pytest.approx(6 * P * tokens + attention)  # the book's 6P
    assert "P_matmul" in est.flops_formula
    assert est.analytic_s > 0 and "X=4 Y=2" in est.formula


def test_decode_flops_are_2_p_per_sequence():
    c = dict(L=2, D=64, F=128, N=8, K=4, H=8, V=256)
    cfg = SimpleNamespace(**c, B=8, S=128, int8_weights=True, int8_kv=False, dtype="bfloat16")
    L, D, F, N, K, H, V = c.values()
    P = L * (3 * D * F + 2 * D * (N + K) * H + 2 * D) + D + 2 * D * V
    P_matmul = P - D * V - (L * 2 * D + D)
    attention = 4 * 8 * 128 * N * H * L  # transformers.md: 4BTSNH, T = 1 new token
    est = analytic("llama_decode", cfg, MESH, hardware.chip("tpu-v5e"))
    assert est.model_flops == pytest.approx(2 * P_matmul * 8 + attention)
    assert est.book_flops == pytest.approx(2 * P * 8)
    # inference.md: B*KV/(N*W) + max(2BP/(N*C), W_bytes/(N*W)); int8 weights are P bytes
    kv = 8 * 128 * 2 * L * K * H * 2
    expected = kv / (8 * 8.2e11) + max(2 * 8 * P / (8 * 1.97e14), P / (8 * 8.2e11))
    assert est.analytic_s == pytest.approx(expected)


def test_every_workload_has_a_book_model():
    assert {n: w.book is not None for n, w in workloads.WORKLOADS.items()} == dict.fromkeys(
        ("matmul", "collective", "llama_train", "llama_prefill", "llama_decode",
         "llama_generate"), True)


def test_several_axes_spelt_with_plus_are_one_group():
    # "X+Y" names the same 8-device group as "X,Y" (sharding.md's AllReduce_{XY}); it used to
    # raise KeyError('X+Y'), which the analysis turned into a note.
    chip = hardware.chip("tpu-v5p")
    plus, comma = (analytic("collective", SimpleNamespace(kind="all_reduce", axes=a, nbytes=1e6),
                            MESH, chip) for a in ("X+Y", "X,Y"))
    assert plus == comma and plus.analytic_s > 0


def test_an_axis_the_mesh_lacks_is_named():
    cfg = SimpleNamespace(kind="all_gather", axes="X+Z", nbytes=1e6)
    with pytest.raises(ValueError, match="no mesh axis Z; the mesh has X, Y"):
        analytic("collective", cfg, MESH, hardware.chip("tpu-v5p"))
