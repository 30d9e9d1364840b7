"""GPU union-find coarsening (kernels/coarsening/unionfind_gpu.py) against its CPU twin
(kernels/coarsening/unionfind_cpu.py).

Promise tested: ``cluster_ids`` is bit-identical to the CPU for int and float edge
weights, non-unit (and zero) vertex weights, with and without caps, also when the
cap binds and the Kundu-Misra split runs (one launch per depth, deep trees
included); the result is deterministic and feeds the GPU contraction.
"""
import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.coarsening import unionfind_cpu as ufc

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


# ----------------------------------------------------------------- graphs
def random_graph(n, m, seed, *, float_weights=False, max_vw=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10 + 0.1 if float_weights else rng.integers(1, 6, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, max_vw + 1, n))


def with_vwgt(g, seed, max_vw, min_vw=0):
    vw = np.random.default_rng(seed).integers(min_vw, max_vw + 1, g.n)
    return CommGraph(xadj=g.xadj, adjncy=g.adjncy, adjwgt=g.adjwgt, vwgt=vw.astype(np.int64))


def with_float_weights(g, seed):
    """Symmetric non-integral weights with many exact ties (3 decimals)."""
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    lo = np.minimum(src, g.adjncy).astype(np.int64)
    hi = np.maximum(src, g.adjncy).astype(np.int64)
    # a weight per undirected edge, a function of the pair: the same from both ends
    h = (lo * 1_000_003 + hi * 7919 + seed) % 997
    w = np.round(0.5 + h / 997.0, 3) + 1e-9
    return CommGraph(xadj=g.xadj, adjncy=g.adjncy, adjwgt=w, vwgt=g.vwgt)


def increasing_path(n):
    """Every vertex picks its right neighbour: one pick tree of depth n - 2."""
    return CommGraph.from_edges(np.arange(n - 1), np.arange(1, n), np.arange(1, n), n=n)


def star(leaves, seed):
    g = CommGraph.from_edges(np.zeros(leaves, dtype=int), np.arange(1, leaves + 1))
    return with_vwgt(g, seed, 6, 1)


# (graph, binding cap): the cap is chosen so that some uncapped cluster is heavier
GRAPHS = {
    "grid2d": (lambda: grid_graph((48, 40)), 3),
    "grid3d_diag": (lambda: grid_graph((10, 9, 8), 3, diagonal=True), 5),
    "rgg": (lambda: random_geometric_graph(3000, seed=1), 12),
    "delaunay": (lambda: delaunay_graph(3000, seed=2), 6),
    "random_int_vw": (lambda: random_graph(2000, 6000, 3, max_vw=5), 10),
    "random_float_vw": (lambda: random_graph(2000, 6000, 4, float_weights=True, max_vw=5), 10),
    "grid_vw0": (lambda: with_vwgt(grid_graph((30, 30)), 6, 4), 6),
    "delaunay_float_vw": (lambda: with_float_weights(with_vwgt(delaunay_graph(1500, seed=7), 7, 3, 1), 7), 5),
    "star": (lambda: star(500, 3), 40),
    "path_deep": (lambda: increasing_path(700), 9),
}


@pytest.fixture(scope="module", params=sorted(GRAPHS))
def case(request):
    make, cap = GRAPHS[request.param]
    return make(), cap


def host_arrays(g):
    return g.xadj, g.adjncy, g.adjwgt, g.vwgt


def device_arrays(g):
    return tuple(cp.asarray(a) for a in host_arrays(g))


def gpu_module():
    from procmap.kernels.coarsening import unionfind_gpu
    return unionfind_gpu


# ------------------------------------------------------------ bit identity
@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("capped", [False, True])
def test_cluster_ids_bit_identical(case, seed, capped):
    g, cap = case
    cap = cap if capped else None
    ref_cmap, ref_nc = ufc.cluster_ids(*host_arrays(g), cap, seed)
    cmap, nc = gpu_module().cluster_ids(*device_arrays(g), cap, seed)
    assert isinstance(cmap, cp.ndarray) and cmap.dtype == cp.int32
    assert type(nc) is int and nc == ref_nc
    assert np.array_equal(cmap.get(), ref_cmap)


def test_binding_caps_really_bind(case):
    g, cap = case
    cmap, nc = ufc.cluster_ids(*host_arrays(g), None, 0)
    assert np.bincount(cmap, weights=g.vwgt, minlength=nc).max() > cap
    cmap, nc = gpu_module().cluster_ids(*device_arrays(g), cap, 0)
    cw = np.bincount(cmap.get(), weights=g.vwgt, minlength=nc)
    size = np.bincount(cmap.get(), minlength=nc)
    assert np.all((cw <= cap) | (size == 1))


@pytest.mark.parametrize("cap", [1, 2, 7, 100, 699])
def test_deep_tree_split_matches_cpu(cap):
    # depth ~ n: pointer jumping needs its log2(n) rounds, the split one launch per depth
    g = increasing_path(2000)
    cmap, nc = gpu_module().cluster_ids(*device_arrays(g), cap, 1)
    assert nc == -(-g.n // cap)  # the fewest pieces
    ref = ufc.cluster_ids(*host_arrays(g), cap, 1)
    assert nc == ref[1] and np.array_equal(cmap.get(), ref[0])


def test_medium_graphs_bit_identical():
    for g in (grid_graph((300, 300)), random_geometric_graph(2**14, seed=0)):
        lmax = int(np.ceil(1.03 * g.vwgt.sum() / 64))
        for cap in (None, lmax, 4):
            ref_cmap, ref_nc = ufc.cluster_ids(*host_arrays(g), cap, 2)
            cmap, nc = gpu_module().cluster_ids(*device_arrays(g), cap, 2)
            assert nc == ref_nc and np.array_equal(cmap.get(), ref_cmap)


# --------------------------------------------------------------- plumbing
def test_numpy_inputs_and_determinism():
    g = random_graph(1500, 5000, 9, float_weights=True, max_vw=3)
    uf = gpu_module()
    a = uf.cluster_ids(*host_arrays(g), 6, 4)  # NumPy in: copied to the device
    b = uf.cluster_ids(*device_arrays(g), 6, 4)
    c = uf.cluster_ids(*device_arrays(g), 6, 4)
    assert a[1] == b[1] == c[1]
    assert np.array_equal(a[0].get(), b[0].get()) and np.array_equal(b[0].get(), c[0].get())


def test_empty_and_isolated():
    uf = gpu_module()
    g0 = CommGraph.from_edges([], [], n=0)
    cmap, nc = uf.cluster_ids(*device_arrays(g0))
    assert nc == 0 and cmap.size == 0
    g = CommGraph.from_edges([1], [2], n=5)
    cmap, nc = uf.cluster_ids(*device_arrays(g), 2)
    assert cmap.get().tolist() == [0, 1, 1, 2, 3] and nc == 4


def test_feeds_gpu_contraction():
    from procmap.kernels.coarsening import coarsen_gpu
    g = with_vwgt(delaunay_graph(2000, seed=4), 4, 3, 1)
    cmap, nc = gpu_module().cluster_ids(*device_arrays(g), 8, 0)
    cxadj, cadjncy, cadjwgt, cvwgt = coarsen_gpu.contract(*device_arrays(g), cmap, nc)
    assert cvwgt.size == nc and int(cvwgt.sum()) == int(g.vwgt.sum())
    assert int(cvwgt.max()) <= 8
    assert int(cxadj[-1]) == cadjncy.size
