"""predictions.dtypes: the one dtype table (book §1.1 bytes per element) and its views."""
from __future__ import annotations

import inspect
import math

import pytest

from predictions import costs, dtypes, hardware, roofline, rules, training

# book §1.1 (transformers.md): fp32 4; bf16/fp16 2; int8/fp8 1; int4/fp4 0.5 bytes per element
BOOK_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8": 1, "int4": 0.5, "fp4": 0.5}


@pytest.mark.parametrize("name, expected", sorted(BOOK_BYTES.items()))
def test_book_bytes_per_element(name, expected):
    assert dtypes.nbytes(name) == expected
    assert dtypes.lookup(name).book == name


def test_hlo_widths_are_their_bits_over_eight():
    # s<bits>/u<bits>/f<bits>: bits / 8 bytes; complex = two floats; pred one byte; token none
    for bits in (4, 8, 16, 32, 64):
        assert dtypes.DTYPE_BYTES[f"s{bits}"] == dtypes.DTYPE_BYTES[f"u{bits}"] == bits / 8
    assert (dtypes.DTYPE_BYTES["f16"], dtypes.DTYPE_BYTES["f32"], dtypes.DTYPE_BYTES["f64"]) \
        == (16 / 8, 32 / 8, 64 / 8)
    assert dtypes.DTYPE_BYTES["c64"] == 2 * 4 and dtypes.DTYPE_BYTES["c128"] == 2 * 8
    assert dtypes.DTYPE_BYTES["pred"] == 1 and dtypes.DTYPE_BYTES["token"] == 0
    assert all(d.nbytes == 1 for h, d in dtypes.DTYPES.items() if h.startswith("f8"))


def test_whole_byte_widths_stay_ints():
    # byte counts derived from them (Shape.nbytes) stay ints, as the reports print them
    assert all(type(n) is int for n in dtypes.DTYPE_BYTES.values() if n >= 1)


def test_adam_bytes_per_param_from_the_table():
    # training.md: bf16 weights + two fp32 moments = 2 + 4 + 4 = 10 bytes/param
    per_param = dtypes.nbytes("bf16") + 2 * dtypes.nbytes("fp32")
    assert per_param == 10
    assert inspect.signature(training.memory_per_chip).parameters["bytes_per_param"].default \
        == per_param


def test_every_spelling_names_one_dtype():
    assert len(dtypes.NAMES) == sum(len(d.names) for d in dtypes.DTYPES.values())
    assert all(n == n.lower() for n in dtypes.NAMES)
    assert all(dtypes.lookup(d.hlo) is d for d in dtypes.DTYPES.values())
    assert dtypes.lookup("BF16") is dtypes.lookup("bfloat16") is dtypes.DTYPES["bf16"]


def test_the_old_tables_are_views_of_the_one_table():
    assert costs.DTYPE_BYTES is rules.DTYPE_BYTES is dtypes.DTYPE_BYTES
    assert hardware.PEAK_COLUMN is dtypes.PEAK_COLUMN


# every spelling Chip.flops_per_s took before the table, and its book column
OLD_PEAK_SPELLINGS = {
    **dict.fromkeys(("bf16", "bfloat16", "f16", "fp16", "float16"), "bf16"),
    **dict.fromkeys(("fp32", "f32", "float32"), "fp32"),
    **dict.fromkeys(("int8", "s8", "u8"), "int8"),
    **dict.fromkeys(("fp8", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e4m3fnuz", "f8e5m2fnuz",
                     "f8e4m3b11fnuz"), "fp8"),
    **dict.fromkeys(("int4", "s4", "u4"), "int4"),
    **dict.fromkeys(("fp4", "f4e2m1fn"), "fp4"),
}


@pytest.mark.parametrize("name, column", sorted(OLD_PEAK_SPELLINGS.items()))
def test_peak_spellings_still_accepted(name, column):
    assert dtypes.peak_column(name) == dtypes.peak_column(name.upper()) == column


def test_fp16_runs_at_the_bf16_rate_and_u8_at_int8():
    h100 = hardware.chip("h100")
    assert h100.flops_per_s("float16") == h100.flops_per_s("bf16") == 9.89e14
    assert h100.flops_per_s("u8") == h100.flops_per_s("int8") == 2 * 9.89e14


def test_types_without_a_book_rate_fall_back_to_fp32_then_bf16():
    assert dtypes.peak_column("f8e3m4") is None and dtypes.peak_column("f64") is None
    # H100 lists fp32 (data sheet), taken at its tensor-core tf32 rate: 989 TFLOPS sparse / 2
    assert roofline.peak_flops("h100", "f8e3m4") == 989e12 / 2
    assert roofline.peak_flops("tpu-v5e", "f8e3m4") == 1.97e14  # no fp32 column: bf16 peak
    assert roofline.peak_flops("h100", "f8e5m2") == 1.978e15  # the fp8 column


def test_matmul_bytes_use_the_table():
    # roofline.md: bytes = s_x*B*D + s_w*D*F + s_x*B*F; bf16 activations, int8 weights
    est = roofline.matmul(8, 16, 32, "tpu-v5e", dtype="bf16", weight_dtype="int8")
    assert est.bytes == 2 * 8 * 16 + 1 * 16 * 32 + 2 * 8 * 32


# every spelling a workload's dtype field took on the command line before the table
OLD_CLI_SPELLINGS = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f32": "float32", "fp32": "float32", "float32": "float32",
    "f16": "float16", "fp16": "float16", "float16": "float16",
    "int8": "int8", "s8": "int8", "i8": "int8",
}


@pytest.mark.parametrize("name, numpy", sorted(OLD_CLI_SPELLINGS.items()))
def test_cli_spellings_still_accepted(name, numpy):
    from workloads.base import canonical_dtype

    assert canonical_dtype(name) == canonical_dtype(name.upper()) == numpy
    assert dtypes.numpy_name(name) == numpy


def test_cli_accepts_exactly_the_workload_dtypes():
    from workloads.base import WORKLOAD_DTYPE_OF, WorkloadError, canonical_dtype
    from workloads.llama.config import FLOAT_DTYPES

    assert WORKLOAD_DTYPE_OF == OLD_CLI_SPELLINGS
    assert FLOAT_DTYPES == ("bfloat16", "float16", "float32")
    with pytest.raises(WorkloadError, match=r"valid: bfloat16, float16, float32, int8 \(or ") as e:
        canonical_dtype("f64")
    assert "\n" not in str(e.value)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="'bf17'; known: pred/bool, token, s4/int4, u4/uint4, "):
        dtypes.lookup("bf17")
    with pytest.raises(KeyError, match="no jax.numpy name"):
        dtypes.numpy_name("token")


def test_numpy_names_are_jax_dtypes_of_that_width():
    jnp = pytest.importorskip("jax.numpy")
    for d in dtypes.DTYPES.values():
        if d.numpy and hasattr(jnp, d.numpy):
            assert jnp.dtype(d.numpy).itemsize == math.ceil(d.nbytes), d.hlo
