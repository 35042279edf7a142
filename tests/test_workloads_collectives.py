"""collective workload: each shard_map collective against NumPy, over one and two mesh axes."""
import re
from collections import Counter

import numpy as np
import pytest

import workloads
from workloads import collectives
from workloads.mesh import make_mesh

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(", re.M)
COLLECTIVES = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"}


def collective_counts(hlo_text: str) -> dict[str, int]:
    ops = (op.removesuffix("-start") for op in _INSTR.findall(hlo_text) if not op.endswith("-done"))
    return dict(Counter(op for op in ops if op in COLLECTIVES))


@pytest.fixture(scope="module")
def mesh():
    return make_mesh("4x2")


def _x(mesh, m, dtype=np.float32):
    """Device (i, j) holds row x[i, j] = 1000*i + 100*j + arange(m): every row tells its owner."""
    i, j = np.meshgrid(np.arange(4), np.arange(2), indexing="ij")
    return (1000 * i[..., None] + 100 * j[..., None] + np.arange(m)).astype(dtype)


@pytest.mark.parametrize("axes", ["X", "Y", "X,Y", "X+Y"])
@pytest.mark.parametrize("kind", list(collectives.KINDS))
def test_collective_matches_numpy(kind, axes, mesh):
    cfg = workloads.make_config("collective", "tiny", {"kind": kind, "axes": axes, "nbytes": "256"})
    fn, args = collectives.build(cfg, mesh)
    out = np.asarray(fn(*args))
    np.testing.assert_array_equal(out, collectives.reference(cfg, mesh, np.asarray(args[0])))
    counts = collective_counts(fn.lower(*args).compile().as_text())
    assert counts == workloads.get("collective").expected_collectives(cfg, mesh)


# Hand-written expectations for a 4x2 mesh and 64 float32 elements per device (nbytes=256),
# independent of collectives.reference.
def test_all_gather_over_x_by_hand(mesh):
    x = _x(mesh, 64)
    cfg = collectives.CollectiveConfig(kind="all_gather", axes="X", nbytes=256)
    fn, _ = collectives.build(cfg, mesh)
    out = np.asarray(fn(x))
    assert out.shape == (2, 4, 64)            # [Y, members of the X group, M]
    for j in range(2):
        np.testing.assert_array_equal(out[j], x[:, j])


def test_reduce_scatter_over_xy_by_hand(mesh):
    x = _x(mesh, 64)
    cfg = collectives.CollectiveConfig(kind="reduce_scatter", axes="X,Y", nbytes=256)
    fn, _ = collectives.build(cfg, mesh)
    out = np.asarray(fn(x))
    # sum over 8 devices: 1000*(0+1+2+3)*2 + 100*(0+1)*4 + 8*arange(64)
    np.testing.assert_array_equal(out, 12000 + 400 + 8 * np.arange(64))


def test_all_to_all_over_y_by_hand(mesh):
    x = _x(mesh, 64)
    cfg = collectives.CollectiveConfig(kind="all_to_all", axes="Y", nbytes=256)
    fn, _ = collectives.build(cfg, mesh)
    out = np.asarray(fn(x))
    for i in range(4):
        for j in range(2):   # member j gets chunk j (32 elements) from member 0, then member 1
            np.testing.assert_array_equal(out[i, j, :32], x[i, 0, 32 * j:32 * (j + 1)])
            np.testing.assert_array_equal(out[i, j, 32:], x[i, 1, 32 * j:32 * (j + 1)])


def test_ppermute_over_x_by_hand(mesh):
    x = _x(mesh, 64)
    cfg = collectives.CollectiveConfig(kind="ppermute", axes="X", nbytes=256)
    fn, _ = collectives.build(cfg, mesh)
    out = np.asarray(fn(x))
    for i in range(4):
        np.testing.assert_array_equal(out[i], x[(i - 1) % 4])


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_all_reduce_other_dtypes(dtype, mesh):
    cfg = workloads.make_config("collective", "tiny", {"kind": "all_reduce", "axes": "X,Y",
                                                       "dtype": dtype, "nbytes": "64"})
    fn, args = collectives.build(cfg, mesh)
    x = np.asarray(args[0]).astype(np.float64)
    np.testing.assert_array_equal(np.asarray(fn(*args)).astype(np.float64), x.sum(axis=(0, 1)))


def test_message_size_sets_the_per_device_buffer(mesh):
    cfg = workloads.make_config("collective", "tiny", {"kind": "all_gather", "nbytes": "4096"})
    _, args = collectives.build(cfg, mesh, abstract=True)
    assert args[0].shape == (4, 2, 1024)      # 4096 B of float32 per device
    assert args[0].sharding.shard_shape(args[0].shape) == (1, 1, 1024)


def test_bad_size_and_axis(mesh):
    cfg = workloads.make_config("collective", "tiny", {"kind": "reduce_scatter", "nbytes": "100"})
    with pytest.raises(workloads.WorkloadError, match="multiple of 16"):
        collectives.build(cfg, mesh)
    cfg = workloads.make_config("collective", "tiny", {"axes": "Z"})
    with pytest.raises(workloads.WorkloadError, match="unknown mesh axis 'Z'; valid: X, Y"):
        collectives.build(cfg, mesh)
