"""Malformed and truncated HLO text: ``HloParseError`` is the only exception that may escape.

Covers the parser and everything downstream that reads a parsed module (the executed-op walk,
trip counts, categories, descriptions, costs, the cross-check), since a mutated module that
still parses must not crash them either.
"""
from __future__ import annotations

import os

from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import hlo
from harness.hlo.attrs import PARSERS

TEXTS = {p.stem: p.read_text() for p in sorted(FIXTURES.glob("*.txt"))}
# Pieces of HLO syntax, so mutations land on structure rather than only on names.
TOKENS = ["{", "}", "(", ")", "[", "]", ",", ", ", "=", "%", '"', "'", "\n", " ", ":", "/*", "*/",
          "<=", "T(1,0)", "S(1)", "ROOT ", "ENTRY ", "{}", "{{0,1}}", "mesh['a'=2] {'a'}",
          "[2,4]<=[8]", "while(", "fusion(", "calls=%", "to_apply=%", "body=%", "condition=%",
          "replica_groups=", "index=9", "dimensions={5}", "f32[", "s32[]", "pred[]", "(f32[], ",
          "parameter(7)", "constant(", "lhs_contracting_dims={3}", "-1", "99999999999999999999",
          "backend_config={\"known_trip_count\":{\"n\":\"x\"}}", "x", "0"]

# HLO_FUZZ_EXAMPLES=5000 for a longer hunt.
settings.register_profile("hlo-fuzz", deadline=None,
                          max_examples=int(os.environ.get("HLO_FUZZ_EXAMPLES", "300")),
                          suppress_health_check=[HealthCheck.too_slow])


def exercise(text: str) -> None:
    """Parse, then use every reader of a parsed module; only HloParseError may escape."""
    try:
        module = hlo.parse_module(text)
        for instr, _ in hlo.executed(module):
            hlo.category(module, instr)
            instr.backend_config()
            _ = instr.op_name
        hlo.hlo_costs(module, "tpu-v5p")
        hlo.cross_check(module, {"flops": 1.0, "bytes accessed": 1.0})
    except hlo.HloParseError as e:
        assert str(e) and "\n" not in str(e)


@st.composite
def truncated(draw):
    text = TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
    return text[: draw(st.integers(0, len(text)))]


@st.composite
def mutated(draw):
    text = TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "swap-lines"]))
        if kind == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif kind == "replace":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at + 1:]
        else:
            lines = text.split("\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


@settings(settings.get_profile("hlo-fuzz"))
@given(truncated())
def test_truncated_text_raises_only_hlo_parse_errors(text):
    exercise(text)


@settings(settings.get_profile("hlo-fuzz"))
@given(mutated())
def test_mutated_text_raises_only_hlo_parse_errors(text):
    exercise(text)


@settings(settings.get_profile("hlo-fuzz"))
@given(st.text(max_size=400))
def test_arbitrary_text_raises_only_hlo_parse_errors(text):
    exercise(text)


@settings(settings.get_profile("hlo-fuzz"))
@given(st.sampled_from(sorted(PARSERS)),
       st.text(alphabet="[]<>=,{}()T0123456789-'\"%_ :xmeshd.", max_size=60))
def test_attribute_values_raise_only_hlo_parse_errors(key, value):
    try:
        PARSERS[key](value)
    except hlo.HloParseError:
        pass


def test_truncation_inside_a_computation_names_the_line():
    text = TEXTS["mlp_train"]
    cut = text[: text.index("  %dot.4 = ")]  # ends after a complete line of the entry
    last_line = cut.count("\n")
    try:
        hlo.parse_module(cut)
    except hlo.HloParseError as e:
        assert str(e).startswith(f"line {last_line}: expected '}}' closing computation")
        assert "truncated" in str(e)
    else:
        raise AssertionError("truncated text parsed")
