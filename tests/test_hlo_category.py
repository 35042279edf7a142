"""Categories by what a fusion computes: attention is a dot whose result goes through a
reduce-max and an exponential into a second dot (softmax(Q K^T) V); a dot with an activation
fused after it (SiLU, GELU, a bare exponential) is a matmul. The module:
``tests/fixtures/hlo/categories.txt`` (each fused computation says what it holds)."""
from __future__ import annotations

from conftest import FIXTURES

from harness import hlo


def categories() -> dict[str, str]:
    module = hlo.parse_module((FIXTURES / "categories.txt").read_text())
    return {i.name: hlo.category(module, i) for i in module.entry.instructions}


def test_attention_by_its_data_flow():
    c = categories()
    assert c["attn"] == "attention"      # dot -> reduce-max -> exponential -> dot
    assert c["nested"] == "attention"    # the same chain through a nested fusion


def test_matmul_with_an_activation_is_a_matmul():
    c = categories()
    assert c["mlp"] == "matmul"          # dot + SiLU (an exponential), no second dot
    assert c["scores"] == "matmul"       # dot + softmax, no second dot
