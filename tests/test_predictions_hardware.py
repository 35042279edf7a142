"""predictions.hardware: the chip registry (tpus.md, gpus.md), device-kind mapping, topology."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
import pkgutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import predictions
from predictions import hardware, topology

BOOK_CHIPS = ("tpu-v3", "tpu-v4p", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-7x",
              "a100", "h100", "h200", "b200")


def test_registry_has_every_chip_of_the_issue():
    assert set(BOOK_CHIPS) | {"cpu"} <= set(hardware.CHIPS)


@pytest.mark.parametrize("name", list(hardware.CHIPS))
def test_every_chip_is_positive_and_consistent(name):
    c = hardware.chip(name)
    assert c.name == name
    assert c.kind in ("tpu", "gpu", "cpu")
    for dtype in c.dtypes:
        assert c.flops_per_s(dtype) > 0
    assert "bf16" in c.dtypes
    for field in ("hbm_bytes", "hbm_bytes_per_s", "ici_bytes_per_s", "hop_latency_s"):
        assert getattr(c, field) > 0, field
    for field in ("dcn_bytes_per_s", "pcie_bytes_per_s", "node_bytes_per_s"):
        value = getattr(c, field)
        assert value is None or value > 0, field
    # tpus.md: bidirectional = 2 x one-way
    assert c.ici_bidi_bytes_per_s == 2 * c.ici_bytes_per_s
    assert c.ici_links >= 1 and c.chips_per_node >= 1
    assert c.wrap_rule in topology.WRAP_RULES
    # units: FLOP/s and bytes/s are in the billions, not "GFLOP/s" or "GB/s"; a hop in
    # micro-, not whole, seconds. (On the book's chips FLOP/s also exceed bytes/s - roofline.md's
    # critical intensity > 1 - but a calibrated shared-core host need not: see the next test.)
    assert c.flops_per_s("bf16") > 1e9 and c.hbm_bytes_per_s > 1e9
    assert 0 < c.hop_latency_s < 1e-3
    assert c.hbm_bytes >= 1e9  # bytes, not GB
    assert all(n >= 1 for n in c.max_slice)
    hash(c)  # frozen and hashable


@pytest.mark.parametrize("name", BOOK_CHIPS)
def test_book_chips_have_critical_intensity_above_one(name):
    # roofline.md: every accelerator in the book does far more FLOPs than it moves HBM bytes
    c = hardware.chip(name)
    assert c.flops_per_s("bf16") / c.hbm_bytes_per_s > 100


@pytest.mark.parametrize("name", [n for n in BOOK_CHIPS if n.startswith("tpu")])
def test_tpu_topology_matches_the_torus(name):
    c = hardware.chip(name)
    # tpus.md: a 2D torus has 4 neighbours, a 3D torus 6
    assert c.ici_links == 2 * c.torus_dims
    assert len(c.max_slice) == c.torus_dims
    # tpus.md: PCIe is ~100x slower than HBM
    if c.pcie_bytes_per_s:
        assert 20 < c.hbm_bytes_per_s / c.pcie_bytes_per_s < 200


def test_book_spec_table_values():
    # tpus.md spec table
    v5e = hardware.chip("tpu-v5e")
    assert v5e.flops_per_s("bf16") == 1.97e14
    assert v5e.flops_per_s("int8") == 3.94e14
    assert (v5e.hbm_bytes, v5e.hbm_bytes_per_s) == (16e9, 8.2e11)
    assert v5e.ici_bytes_per_s == 4.5e10
    assert v5e.max_slice == (16, 16)
    v5p = hardware.chip("tpu-v5p")
    assert v5p.flops_per_s("bf16") == 4.59e14
    assert math.prod(v5p.max_slice) == 8960  # 16x20x28
    assert v5p.dcn_bytes_per_s == 6.25e9  # ~200 Gbps per host of 4 chips
    assert hardware.chip("tpu-7x").max_slice == (4, 4, 576)
    # gpus.md: NVLink egress per GPU, 8 GPUs and 400 GB/s scale-out per node
    h100 = hardware.chip("h100")
    assert (h100.ici_bytes_per_s, h100.gpus_per_node, h100.node_bytes_per_s) == (450e9, 8, 400e9)
    assert hardware.chip("b200").ici_bytes_per_s == 900e9
    assert hardware.chip("b200").flops_per_s("fp4") == 9e15


def test_flops_aliases_and_unknown_dtype():
    v5e = hardware.chip("tpu-v5e")
    assert v5e.flops_per_s("bfloat16") == v5e.flops_per_s("bf16")
    assert v5e.flops_per_s("s8") == v5e.flops_per_s("int8")
    with pytest.raises(KeyError, match=r"tpu-v5e.*fp32.*\['bf16', 'int8'\]"):
        v5e.flops_per_s("fp32")


def test_unknown_chip_lists_valid_names():
    with pytest.raises(KeyError) as e:
        hardware.chip("nope")
    message = e.value.args[0]
    assert "nope" in message
    for name in BOOK_CHIPS:
        assert name in message


@pytest.mark.parametrize("kind, expected", [
    ("TPU v5 lite", "tpu-v5e"), ("TPU v5e", "tpu-v5e"), ("TPU v5p", "tpu-v5p"),
    ("TPU v5", "tpu-v5p"), ("TPU v4", "tpu-v4p"), ("TPU v6 lite", "tpu-v6e"),
    ("TPU v6e", "tpu-v6e"), ("TPU7x", "tpu-7x"), ("TPU 7x", "tpu-7x"), ("TPU v3", "tpu-v3"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("cpu", "cpu"),
])
def test_chip_for_device_kinds(kind, expected):
    assert hardware.chip_for(kind).name == expected
    device = SimpleNamespace(device_kind=kind, platform="tpu")
    assert hardware.chip_for(device).name == expected


def test_chip_for_unknown_kind_names_it():
    with pytest.raises(KeyError, match="TPU v2.*known chips: tpu-v3"):
        hardware.chip_for(SimpleNamespace(device_kind="TPU v2", platform="tpu"))
    # any host CPU device maps to the cpu entry, whatever its kind string
    assert hardware.chip_for(SimpleNamespace(device_kind="x86_64", platform="cpu")).name == "cpu"


def test_chip_for_a_real_jax_device():
    jax = pytest.importorskip("jax")
    device = jax.devices()[0]
    assert hardware.chip_for(device).name in hardware.CHIPS


def test_register_installs_and_refuses_silent_replace():
    original = hardware.chip("cpu")
    calibrated = dataclasses.replace(original, hbm_bytes_per_s=3e10)
    with pytest.raises(ValueError, match="already registered"):
        hardware.register(calibrated)
    try:
        hardware.register(calibrated, replace=True)
        assert hardware.chip("cpu").hbm_bytes_per_s == 3e10
        assert hardware.chip_for("cpu").hbm_bytes_per_s == 3e10
    finally:
        hardware.register(original, replace=True)
    assert hardware.chip("cpu") is original
    with pytest.raises(ValueError, match="wrap_rule"):
        hardware.register(dataclasses.replace(original, name="x", wrap_rule="moebius"))
    assert "x" not in hardware.CHIPS


def test_wraparound_rules():
    # tpus.md: v5e/v6e wrap only on an axis of 16
    assert topology.wraps("tpu-v5e", (16, 8)) == (True, False)
    assert topology.wraps("tpu-v6e", (4, 4)) == (False, False)
    # v4p/v5p: whole 4x4x4 cubes wrap on every axis, sub-cube slices on none (2x2x4: none)
    assert topology.wraps("tpu-v5p", (4, 4, 8)) == (True, True, True)
    assert topology.wraps("tpu-v4p", (4,), slice_shape=(2, 2, 4)) == (False,)
    assert topology.wraps("tpu-v4p", (4,), slice_shape=(4, 4, 4)) == (True,)
    assert topology.wraps("tpu-7x", (8,)) == (True,)  # assumed like v5p


def test_axes_must_fit_the_largest_slice():
    assert topology.check_axes("tpu-v5e", (16, 16)) == (16, 16)
    assert topology.check_axes("tpu-v5p", (28, 20, 16)) == (28, 20, 16)
    with pytest.raises(ValueError, match=r"tpu-v5e.*16x16.*at most 16 per axis"):
        topology.check_axes("tpu-v5e", (32,))
    with pytest.raises(ValueError, match="2 axes"):
        topology.check_axes("tpu-v5e", (4, 4, 4))
    with pytest.raises(ValueError, match="positive integers"):
        topology.check_axes("tpu-v5e", (0,))
    assert topology.check_axes("h100", (1024,)) == (1024,)  # switched: no torus limit


def test_physical_axes_split_a_large_group_over_the_torus():
    assert topology.physical_axes("tpu-v5e", (64,)) == (16, 4)
    assert topology.physical_axes("tpu-v5p", (8960,)) == (28, 20, 16)
    assert topology.physical_axes("tpu-v5e", (8,)) == (8,)
    with pytest.raises(ValueError, match="256 chips"):
        topology.physical_axes("tpu-v5e", (512,))


def test_predictions_stay_stdlib_only():
    # every module of the package, found by walking it: imports only the standard library and
    # predictions itself (never jax, numpy, pandas or harness)
    names = [m.name for m in pkgutil.walk_packages(predictions.__path__, "predictions.")]
    assert {"predictions.hardware", "predictions.rules", "predictions.costs"} <= set(names)
    for name in names:
        tree = ast.parse(Path(importlib.util.find_spec(name).origin).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root == "predictions" or root in sys.stdlib_module_names, (name, root)
