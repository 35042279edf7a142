"""The book's side of the memory peak, from shapes by arithmetic (training.md §6.3,
transformers.md §5.2), and how the compiled side is set beside it (harness.memory.peaks)."""
from __future__ import annotations

import pandas as pd
import pytest

from harness import schema
from harness.memory import kinds, peaks


def _tiny(**kw):
    import dataclasses

    from workloads.llama.train import PRESETS
    return dataclasses.replace(PRESETS["tiny"], **kw)


def _params(c) -> int:
    """P of the tiny LLaMA from its shapes: per layer W_gate, W_up [D,F], W_down [F,D], W_Q
    [D,N,H], W_K, W_V [D,K,H], W_O [N,H,D] and two norms [D]; the final norm [D]; embedding
    and unembedding [V,D] each."""
    layer = 3 * c.D * c.F + c.D * c.N * c.H * 2 + c.D * c.K * c.H * 2 + 2 * c.D
    return c.L * layer + c.D + 2 * c.V * c.D


def test_tiny_train_state_bytes_from_shapes():
    from workloads.llama.memory import train_bytes

    c = _tiny()
    P = _params(c)
    assert P == 2 * (3 * 64 * 128 + 64 * 8 * 8 * 2 + 64 * 4 * 8 * 2 + 128) + 64 + 2 * 256 * 64
    need = train_bytes(c, None)
    assert need["parameters"] == 2 * P          # bf16 weights
    assert need["gradients"] == 2 * P           # bf16 gradients, one per weight
    assert need["optimizer"] == 2 * 4 * P       # two fp32 moments: 10 bytes/param in all


# saved widths per token per layer (transformers.md §5.2): the layer input D always; the names
# a policy saves: Q = N*H, K = V = K*H, out_proj = D, mlpwi_0 = mlpwi_1 = F, mlpwo = D
@pytest.mark.parametrize("policy, width", [
    ("none", lambda c: 20 * c.D),
    ("full", lambda c: c.D),
    ("save_qkv_proj", lambda c: c.D + c.N * c.H + 2 * c.K * c.H),
    ("minimal", lambda c: c.D + c.N * c.H + 2 * c.K * c.H + c.D + 2 * c.F + c.D),
])
def test_saved_activations_per_remat_policy(policy, width):
    from workloads.llama.memory import train_bytes

    c = _tiny(remat=policy)
    tokens = c.B * c.T
    assert train_bytes(c, None)["activations"] == 2 * tokens * c.L * width(c)


def _buffers(rows) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(schema.BUFFERS, r)) for r in rows], columns=schema.BUFFERS)


def test_holds_table_sets_compiled_beside_book_and_explains_upcasts():
    # 1 KiB of bf16 parameters as the book says; activations held as an f32 copy (2x the book)
    bufs = _buffers([
        ("param.1", kinds.PARAMETERS, 1024, "bf16[512]{0}", "parameter", "param.1", "", "", 0, 9),
        ("wrapped_convert.3", kinds.ACTIVATIONS, 2048, "f32[512]{0}", "fusion",
         "wrapped_convert.3", "", "", 2, 9),
    ])
    book = {"parameters": 1024, "activations": 1024, "logits": 100}
    t = peaks.holds_table(bufs, book, dtype_bytes=2).set_index(schema.HOLDS)
    assert t.loc[kinds.PARAMETERS, schema.DIFFERENCE] == 0
    assert t.loc[kinds.PARAMETERS, schema.EXPLAINED] == ""
    assert t.loc[kinds.ACTIVATIONS, schema.DIFFERENCE] == pytest.approx(2048 / 1024 - 1)
    assert "2.00 KiB are f32 copies" in t.loc[kinds.ACTIVATIONS, schema.EXPLAINED]
    # logits are temporaries the compiled peak holds none of
    assert t.loc[kinds.TEMPORARIES, schema.COMPILED_BYTES] == 0
    assert t.loc["peak", schema.BOOK_BYTES] == 1024 + 1024 + 100
    assert t.loc["peak", schema.COMPILED_BYTES] == 1024 + 2048
    # without the copy: 1024 B against 2148 B
    assert f"{1024 / 2148 - 1:+.0%}" in t.loc["peak", schema.EXPLAINED]


def test_padding_counted_from_the_shape():
    # f32[2,64,32] is 16384 B of elements; a TPU tile layout allocates 32768
    bufs = _buffers([("fusion.1", kinds.TEMPORARIES, 32768,
                      "f32[2,64,32]{1,2,0:T(8,128)}", "fusion", "fusion.1", "", "", 0, 1)])
    assert peaks.padding_bytes(bufs) == 32768 - 2 * 64 * 32 * 4


def test_footprint_note_arithmetic():
    memory = {"arguments": 1000, "outputs": 500, "aliased": 100, "temporaries": 2000,
              "code": 0}
    note = peaks.footprint_note(memory, 3000)
    assert "= 3.32 KiB" in note              # 1000 + 500 - 100 + 2000 = 3400 B
    assert "the other 400 B" in note


def test_cpu_measures_none():
    class Cpu:
        platform = "cpu"

        def memory_stats(self):
            return None

    class Gpu:
        platform = "gpu"

        def __init__(self, peak):
            self.peak = peak

        def memory_stats(self):
            return {"peak_bytes_in_use": self.peak, "bytes_limit": 10}

    assert peaks.measured_peak([Cpu()]) == (None, peaks.UNMEASURED["cpu"])
    assert peaks.measured_peak([Gpu(5), Gpu(7)])[0] == 7
