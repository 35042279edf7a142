"""One mesh parser (``predictions.mesh``) and one layout registry (``predictions.layouts``),
read by the workloads, ``harness predict``, ``harness plan`` and ``harness explain`` alike
(issue 51): axes named by role, the book's ``4x2`` still read, composed layouts."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from predictions import collectives, layouts
from predictions.mesh import MeshError, mesh_label, parse_dims, parse_mesh

FIXTURES = Path(__file__).parent / "fixtures"


# --- the one mesh parser -----------------------------------------------------------------
def test_a_mesh_is_axes_by_name_and_size_or_the_books_shape():
    named = parse_mesh("fsdp=4,model=2")
    assert named.shape == {"fsdp": 4, "model": 2} and not named.positional
    assert (named.size, str(named)) == (8, "fsdp=4,model=2")
    shape = parse_mesh("4x2")
    assert shape.shape == {"X": 4, "Y": 2} and shape.positional and str(shape) == "4x2"
    assert parse_mesh("8").shape == {"X": 8}
    assert parse_mesh(" X = 4 , Y = 2 ").shape == {"X": 4, "Y": 2}
    assert parse_mesh({"X": 1, "Y": 1}).shape == {"X": 1, "Y": 1}  # a stored run's meta
    assert parse_dims("4x4x4") == (4, 4, 4) and parse_dims(8) == (8,)


def test_a_mesh_is_labelled_by_its_shape_or_by_its_roles():
    from harness.report.heading import mesh_str

    assert mesh_label({"X": 4, "Y": 2}) == "4x2" and mesh_label({"X": 8}) == "8"
    assert mesh_label({"fsdp": 4, "model": 2}) == "fsdp=4,model=2"
    assert mesh_label({"Y": 2, "X": 4}) == "Y=2,X=4"  # out of the book's order: by name
    assert mesh_label({}) == ""
    # a stored run's heading says the roles; the label reads back as the same mesh
    assert mesh_str({"fsdp": 4, "model": 2}) == "fsdp=4,model=2" and mesh_str({}) == "1"
    for shape in ({"X": 4, "Y": 2}, {"data": 2, "model": 4}):
        assert parse_mesh(mesh_label(shape)).shape == shape


@pytest.mark.parametrize("text, says", [
    ("X=4,X=2", "named twice"), ("4xq", "4x2"), ("X=0", ">= 1"), ("", "fsdp=4,model=2"),
    ("4by2", "4x2"), ("2x2x2x2", "name them"), ("X=four", "not a whole number"),
])
def test_a_bad_mesh_names_the_forms(text, says):
    with pytest.raises(MeshError, match=f"mesh {text!r}") as e:
        parse_mesh(text)
    assert says in str(e.value)


def test_the_three_readers_of_a_mesh_agree():
    """explain's --mesh, a workload's mesh and a collective's axes are read by the one parser."""
    from harness.analysis.mesh import parse_mesh as explain_mesh
    from workloads.mesh import mesh_dims, parse_shape

    for text in ("4x2", "X=4,Y=2"):
        assert explain_mesh(text) == {"X": 4, "Y": 2}
        assert parse_shape(text) == mesh_dims(text) == collectives.parse_axes(text) == (4, 2)
    assert mesh_dims("model=2,fsdp=4") == collectives.parse_axes("model=2,fsdp=4") == (2, 4)
    assert explain_mesh("fsdp=4,model=2") == {"fsdp": 4, "model": 2}


def test_a_shape_is_not_read_from_axes_named_out_of_order():
    """parse_shape gives sizes by position: axes named by role say where they go instead."""
    from workloads.base import WorkloadError
    from workloads.mesh import parse_shape

    with pytest.raises(WorkloadError, match="names its axes fsdp, model"):
        parse_shape("fsdp=4,model=2")
    with pytest.raises(WorkloadError, match="names its axes Y, X"):
        parse_shape("Y=2,X=4")


# --- the one registry of layouts ---------------------------------------------------------
def test_the_registry_holds_todays_layouts_and_their_book_models():
    # pipelines (issue 53) register pp and pp+<each of the above>: tests/test_pipeline_*.py;
    # experts (issue 54) ep and ep+<each>: tests/test_workloads_moe.py; serving (issue 55) the
    # batch- and sequence-sharded KV caches' dp_tp_kv_batch and dp_tp_kv_seq, dp_tp's weights:
    # tests/test_serving_kv_batch.py, tests/test_serving_kv_seq.py
    today = {n: e for n, e in layouts.LAYOUTS.items()
             if not {"stage", "expert"} & set(e.axes) and not n.startswith("dp_tp_kv_")}
    assert list(today) == ["dp", "fsdp", "tp", "fsdp_tp", "dp_tp"]
    assert {n: e.axes for n, e in today.items()} == {
        "dp": ("data",), "fsdp": ("fsdp",), "tp": ("model",), "fsdp_tp": ("fsdp", "model"),
        "dp_tp": ("data", "model")}
    # dp_tp moves DP's gradient bytes over X and TP's activations over Y: FSDP+TP's model
    assert {n: e.strategy for n, e in today.items()} == {
        "dp": "dp", "fsdp": "fsdp", "tp": "tp", "fsdp_tp": "fsdp_tp", "dp_tp": "fsdp_tp"}
    assert layouts.planned() == ["dp", "fsdp", "tp", "fsdp_tp"]
    assert set(layouts.ROLES) == {"data", "fsdp", "model", "stage", "expert"}
    kv = layouts.LAYOUTS["dp_tp_kv_batch"]
    assert (kv.axes, kv.batch, kv.model, kv.strategy, kv.planned) == (
        ("data", "model"), ("data",), ("model",), "fsdp_tp", False)


# the MLP on a 4x2 mesh (workloads/llama/sharding.py's table): batch, weights' D, model's F
MLP_4X2 = {
    "dp": (("X", "Y"), (), ()),
    "fsdp": (("X", "Y"), ("X", "Y"), ()),
    "tp": ((), (), ("X", "Y")),
    "fsdp_tp": (("X",), ("X",), ("Y",)),
    "dp_tp": (("X",), (), ("Y",)),
}


@pytest.mark.parametrize("name", sorted(MLP_4X2))
def test_a_layout_splits_a_positional_mesh_as_before(name):
    split = layouts.split(layouts.layout(name), {"X": 4, "Y": 2})
    assert (split["batch"], split["weights"], split["model"]) == MLP_4X2[name]


def test_axes_named_by_role_play_their_names_role_in_any_order():
    fsdp_tp = layouts.layout("fsdp_tp")
    assert layouts.split(fsdp_tp, {"model": 2, "fsdp": 4}) == {
        "batch": ("fsdp",), "weights": ("fsdp",), "model": ("model",)}
    assert layouts.degrees(fsdp_tp, {"model": 2, "fsdp": 4}) == (4, 2)
    assert layouts.degrees(layouts.layout("tp"), {"X": 4, "Y": 2}) == (1, 8)
    assert layouts.for_roles(["model", "data"]).name == "dp_tp"
    with pytest.raises(ValueError, match="layout dp has mesh axes data; the mesh's are fsdp"):
        layouts.split(layouts.layout("dp"), {"fsdp": 8})
    with pytest.raises(ValueError, match="name every axis by its role"):
        layouts.split(fsdp_tp, {"fsdp": 4, "Y": 2})
    with pytest.raises(ValueError, match="2-D mesh"):
        layouts.split(fsdp_tp, {"X": 8})


def test_a_new_layout_is_one_entry_and_composes_by_plus(monkeypatch):
    monkeypatch.setitem(layouts.ROLES, "stage", "pipeline stages (a later issue)")
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    layouts.register(layouts.Layout("pp", ("stage",), (), (), (), "fsdp", "pipeline"))
    composed = layouts.layout("pp+fsdp_tp")
    assert composed.axes == ("stage", "fsdp", "model") and not composed.planned
    assert layouts.split(composed, {"stage": 2, "fsdp": 2, "model": 2})["model"] == ("model",)
    # the workloads see it too: their registry is this one
    from workloads.llama.sharding import PARALLELISMS

    assert "pp+fsdp_tp" in PARALLELISMS and "pp" in list(PARALLELISMS)
    with pytest.raises(ValueError, match="unknown layout 'zero9'; valid: dp, fsdp"):
        layouts.layout("zero9")


def test_plan_sizes_each_layout_from_the_registry():
    from harness.plan import LAYOUTS, candidates

    assert LAYOUTS is layouts.LAYOUTS
    got = {c.layout: (c.mesh, c.M_X, c.M_Y) for c in candidates([], 28672, 1024 * 4096, (4, 4, 4))}
    assert got == {"dp": ("64x1", 3, 1), "fsdp": ("64x1", 3, 1), "tp": ("1x64", 1, 3),
                   "fsdp_tp": ("32x2", 3, 1)}
    assert [c.mesh for c in candidates(["dp_tp"], 28672, 1024 * 4096, (4, 4, 4))] == ["32x2"]


# --- one word for it: --layout, and a mesh named by role ----------------------------------
def _llama():
    import workloads

    return workloads.get("llama_train")


@pytest.mark.parametrize("layout, mesh, expected", [
    (None, "fsdp=4,model=2", "fsdp_tp"), (None, "data=2,model=4", "dp_tp"),
    (None, "data=8", "dp"), ("tp", "4x2", "tp"), ("fsdp_tp", "fsdp=4,model=2", "fsdp_tp"),
    (None, "4x2", None), (None, None, None),
])
def test_the_layout_comes_from_the_flag_or_the_meshs_roles(layout, mesh, expected):
    from workloads.base import with_layout

    assert with_layout(_llama(), {}, layout, mesh).get("parallelism") == expected


@pytest.mark.parametrize("layout, sets, mesh, says", [
    ("dp", {}, "fsdp=4,model=2", "layout dp has mesh axes data"),
    (None, {}, "fsdp=4,Y=2", "name every axis by its role"),
    ("tp", {"parallelism": "dp"}, None, "--layout tp and --set parallelism=dp disagree"),
    ("zero9", {}, None, "unknown layout 'zero9'"),
])
def test_a_mesh_that_is_not_the_layouts_is_one_line(layout, sets, mesh, says):
    from workloads.base import WorkloadError, with_layout

    with pytest.raises(WorkloadError, match=says):
        with_layout(_llama(), sets, layout, mesh)


def test_a_workload_without_layouts_takes_no_roles():
    import workloads
    from workloads.base import WorkloadError, with_layout

    matmul = workloads.get("matmul")
    assert with_layout(matmul, {"B": "8"}, None, "X=4,Y=2") == {"B": "8"}
    with pytest.raises(WorkloadError, match="matmul's mesh axes are X, Y"):
        with_layout(matmul, {}, None, "fsdp=4,model=2")
    with pytest.raises(WorkloadError, match="matmul has no layouts"):
        with_layout(matmul, {}, "fsdp", None)


def test_a_mesh_named_by_role_builds_a_mesh_of_those_axes():
    """The jax mesh carries the roles as its axis names; the specs follow them."""
    from jax.sharding import PartitionSpec as P

    import workloads
    from workloads.llama.sharding import Sharder
    from workloads.mesh import abstract_mesh

    cfg = workloads.make_config("llama_train", "tiny", {"parallelism": "fsdp_tp"})
    mesh = abstract_mesh("model=2,fsdp=4")
    assert dict(mesh.shape) == {"model": 2, "fsdp": 4}
    sh = Sharder(mesh, "fsdp_tp", SimpleNamespace(N=cfg.N, K=cfg.K))
    assert sh.param_spec("w_gate_DF") == P(None, "fsdp", "model")
    assert sh.spec("BTD") == P("fsdp", None, "model")
    positional = Sharder(abstract_mesh("4x2"), "fsdp_tp", SimpleNamespace(N=cfg.N, K=cfg.K))
    assert positional.param_spec("w_gate_DF") == P(None, "X", "Y")
    _llama().build(cfg, mesh, abstract=True)  # every split dim divides


def test_predict_train_prices_a_layout_of_the_registry(capsys):
    from harness import cli

    argv = ["predict", "train", "--model", "llama3-70b", "--chip", "tpu-v5p", "--num-chips",
            "8960", "--tokens", "15e12", "--batch", "4194304", "--spans", "2x1", "--format",
            "json", "--layout"]
    assert cli.main([*argv, "fsdp_tp"]) == 0
    fsdp_tp = json.loads(capsys.readouterr().out)["step"]
    # applied-training.md: 2048-way FSDP x 4-way TP
    assert (fsdp_tp["X"], fsdp_tp["Y"], fsdp_tp["strategy"]) == (2048, 4, "fsdp_tp")
    assert cli.main([*argv, "dp_tp"]) == 0  # priced by FSDP+TP's model, as the workload is
    assert json.loads(capsys.readouterr().out)["step"] == fsdp_tp


def test_stored_runs_keep_their_parallelism_and_it_is_the_registrys():
    """The saved run format is unchanged: a run's config names its layout as `parallelism`."""
    metas = [json.loads(p.read_text()) for p in FIXTURES.glob("h100/llama_*/meta.json")]
    assert metas
    for meta in metas:
        assert meta["config"]["parallelism"] in layouts.LAYOUTS
        assert isinstance(meta["mesh"], dict)
