"""workloads registry, config coercion, meshes and one-line errors for bad input."""
import dataclasses
from pathlib import Path

import jax
import pytest

import workloads
from workloads import WorkloadError
from workloads.mesh import (
    abstract_mesh,
    default_shape,
    fill_axes,
    make_mesh,
    parse_shape,
    workload_mesh,
)

NAMES = ["collective", "llama_decode", "llama_generate", "llama_prefill", "llama_train",
         "matmul"]


def _one_line_error(fn, *match):
    with pytest.raises(WorkloadError) as e:
        fn()
    message = str(e.value)
    assert "\n" not in message
    for m in match:
        assert m in message, message
    return message


def test_registry_lists_every_workload_with_a_tiny_preset():
    assert sorted(workloads.WORKLOADS) == NAMES
    for name, w in workloads.WORKLOADS.items():
        assert w.name == name and "tiny" in w.presets
        assert w.description and "\n" not in w.description
        assert dataclasses.is_dataclass(w.Config) and w.Config.__dataclass_params__.frozen
        assert all(isinstance(cfg, w.Config) for cfg in w.presets.values())
        assert w.mesh_axes == ("X", "Y")


@pytest.mark.parametrize("name", NAMES)
def test_tiny_builds_abstract_args_on_the_default_mesh(name):
    w = workloads.get(name)
    mesh = workload_mesh(w.mesh_axes)
    assert dict(mesh.shape) == {"X": 4, "Y": 2}  # every one of the 8 devices
    fn, args = w.build(workloads.make_config(name), mesh, abstract=True)
    leaves = jax.tree.leaves(args)
    assert leaves and all(isinstance(a, jax.ShapeDtypeStruct) for a in leaves)
    assert hasattr(fn, "lower")


def test_make_config_coerces_strings_to_field_types():
    cfg = workloads.make_config("llama_train", "tiny", {
        "B": "16", "param_dtype": "bf16", "opt_dtype": "fp32", "scan_layers": "false",
        "lr": "3e-4", "parallelism": "fsdp_tp", "remat": "dots"})
    assert (cfg.B, cfg.param_dtype, cfg.opt_dtype, cfg.scan_layers, cfg.lr, cfg.parallelism,
            cfg.remat) == (16, "bfloat16", "float32", False, 3e-4, "fsdp_tp", "dots")
    assert workloads.make_config("collective", "tiny", {"dtype": "f32"}).dtype == "float32"
    assert workloads.make_config("llama_decode", "tiny", {"int8_kv": "true"}).int8_kv is True


def test_presets_hold_the_real_configs():
    cfg = workloads.make_config("llama_train", "70b")
    assert (cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V) == (80, 8192, 28672, 64, 8, 128,
                                                                  128256)
    assert set(workloads.get("llama_decode").presets) >= {"tiny", "100m", "8b", "70b", "405b"}


def test_unknown_workload():
    _one_line_error(lambda: workloads.get("resnet"), "'resnet'", ", ".join(NAMES))


def test_unknown_parameter_names_the_fields():
    _one_line_error(lambda: workloads.make_config("matmul", "tiny", {"M": "8"}),
                    "'M'", "B, D, F, dtype, case")


def test_unknown_preset_and_choices():
    _one_line_error(lambda: workloads.make_config("matmul", "huge"), "'huge'", "tiny")
    _one_line_error(lambda: workloads.make_config("matmul", "tiny", {"case": "diag"}),
                    "allgather", "reduce_scatter", "same_axis")
    # pp is a layout since issue 53 (pipelines); an unknown one names them all
    _one_line_error(lambda: workloads.make_config("llama_train", "tiny", {"parallelism": "pq"}),
                    "dp, dp_ep, dp_tp, dp_tp_kv_batch, dp_tp_kv_seq, ep, ep+dp_tp",
                    "pp+fsdp_tp, pp+tp, tp")
    _one_line_error(lambda: workloads.make_config("collective", "tiny", {"kind": "gather"}),
                    "all_gather", "ppermute")


def test_badly_typed_values():
    _one_line_error(lambda: workloads.make_config("llama_train", "tiny", {"B": "eight"}), "int")
    _one_line_error(lambda: workloads.make_config("llama_train", "tiny", {"scan_layers": "maybe"}),
                    "true/false")
    _one_line_error(lambda: workloads.make_config("matmul", "tiny", {"dtype": "fp64"}), "bfloat16")


def test_mesh_shapes():
    assert parse_shape("4x2") == (4, 2) and parse_shape(8) == (8,)
    mesh = make_mesh("2x4")
    assert dict(mesh.shape) == {"X": 2, "Y": 4}
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
    assert make_mesh("2x2x2").axis_names == ("X", "Y", "Z")
    # a workload's mesh_axes may name more (or fewer) axes than the mesh has
    assert make_mesh("8", ("X", "Y")).axis_names == ("X",)
    assert make_mesh("2x2x2", ("X", "Y")).axis_names == ("X", "Y", "Z")
    assert make_mesh("3x2", allow_subset=True).devices.size == 6
    assert dict(abstract_mesh("8x8").shape) == {"X": 8, "Y": 8}


def test_mesh_not_matching_the_device_count():
    _one_line_error(lambda: make_mesh("4x4"), "16 devices", "8 are available", "2x4", "4x2")
    _one_line_error(lambda: make_mesh("3x2"), "6 devices", "1x8")
    _one_line_error(lambda: make_mesh("4by2"), "'4by2'", "4x2")


@pytest.mark.parametrize("name,overrides,mesh_shape,match", [
    ("llama_train", {"B": "6"}, "4x2", ["B=6", "mesh axis X of size 4"]),
    ("llama_train", {"V": "255"}, "4x2", ["V=255", "mesh axis Y of size 2"]),
    ("llama_train", {"N": "12", "parallelism": "tp"}, "8", ["N=12", "8 model devices"]),
    ("llama_train", {"parallelism": "fsdp_tp"}, "8", ["2-D mesh", "Y axis of size 1"]),
    ("llama_decode", {"B": "2"}, "4x2", ["B=2", "mesh axis X of size 4"]),
    ("matmul", {"B": "66", "case": "no_comm"}, "4x2", ["B=66", "mesh axis X of size 4"]),
    ("collective", {"kind": "all_to_all", "nbytes": "100"}, "4x2", ["multiple of 16"]),
])
def test_dimension_not_divisible_by_its_mesh_axis(name, overrides, mesh_shape, match):
    cfg = workloads.make_config(name, "tiny", overrides)
    mesh = make_mesh(mesh_shape)
    _one_line_error(lambda: workloads.get(name).build(cfg, mesh, abstract=True), *match)


def test_workloads_never_import_harness():
    root = Path(workloads.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import harness" not in text and "from harness" not in text, path


def test_default_shape_uses_every_device_and_a_missing_axis_has_size_1():
    # n devices split as X = n / Y with Y = 2 when n is even and >= 4, else Y = 1
    assert [default_shape(n) for n in (1, 2, 4, 6, 8, 16)] == [
        (1, 1), (2, 1), (2, 2), (3, 2), (4, 2), (8, 2)]
    assert default_shape(8, 1) == (8,) and default_shape(8, 3) == (4, 2, 1)
    assert fill_axes((1,), 2) == (1, 1) and fill_axes((4, 2), 2) == (4, 2)


@pytest.mark.parametrize("name", NAMES)
def test_every_workload_runs_its_tiny_defaults_on_one_device(name):
    one = jax.devices()[:1]
    w = workloads.get(name)
    mesh = workload_mesh(w.mesh_axes, "1", devices=one)
    assert dict(mesh.shape) == {"X": 1, "Y": 1}
    if name == "collective":  # a collective over 1 device moves nothing: a one-line refusal
        _one_line_error(lambda: w.build(workloads.make_config(name), mesh), "1 device",
                        "--devices N")
        return
    fn, args = w.build(workloads.make_config(name), mesh)
    jax.block_until_ready(fn(*args))
