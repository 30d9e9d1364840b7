"""GPU objective kernels against their CPU twins (kernels/objective/objective_cpu.py)."""
import functools

import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.kernels.objective import objective_cpu

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

PREFIXES = {"cut": np.array([8]), "tree": np.array([4, 32, 192]), "flat2": np.array([3, 12])}


def weighted_graph(n, m, seed, float_weights):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 7 if float_weights else rng.integers(1, 9, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 5, n))


def hub_graph(seed):
    """Random graph plus a vertex adjacent to almost everything (skewed degree)."""
    rng = np.random.default_rng(seed)
    n = 3000
    src = np.concatenate((rng.integers(0, n, 9000), np.zeros(n - 1, dtype=np.int64)))
    dst = np.concatenate((rng.integers(0, n, 9000), np.arange(1, n)))
    return CommGraph.from_edges(src, dst, rng.integers(1, 4, src.size), n=n)


GRAPHS = {
    "grid": lambda: grid_graph((40, 30)),
    "rgg": lambda: random_geometric_graph(4000, seed=1),
    "delaunay": lambda: delaunay_graph(4000, seed=2),
    "rand_int": lambda: weighted_graph(2500, 20000, 3, False),
    "rand_float": lambda: weighted_graph(2500, 20000, 4, True),
    "hub": lambda: hub_graph(5),
}


@functools.lru_cache(maxsize=None)
def graph(name):
    """Graphs are built once per session (the tests never modify them)."""
    return GRAPHS[name]()


def random_pe(n, k, seed):
    return np.random.default_rng(seed).integers(0, k, n).astype(np.int32)


def dev(g):
    return cp.asarray(g.xadj), cp.asarray(g.adjncy), cp.asarray(g.adjwgt)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(PREFIXES))
def test_level_traffic_matches_cpu(name, mode):
    from procmap.kernels.objective import objective_gpu
    g = graph(name)
    prefix = PREFIXES[mode]
    pe = random_pe(g.n, int(prefix[-1]), 7)
    want = objective_cpu.level_traffic(g.xadj, g.adjncy, g.adjwgt, pe, prefix)
    got = objective_gpu.level_traffic(*dev(g), cp.asarray(pe), cp.asarray(prefix))
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == (prefix.size + 1,)
    if g.adjwgt.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)
    # prefix given on the host works the same
    np.testing.assert_array_equal(
        objective_gpu.level_traffic(*dev(g), cp.asarray(pe), prefix), got)


def test_level_traffic_of_a_block_partition_has_local_traffic():
    from procmap.kernels.objective import objective_gpu
    g = grid_graph((64, 64))
    prefix = np.array([4, 16])
    pe = (np.arange(g.n) * 16 // g.n).astype(np.int32)
    got = objective_gpu.level_traffic(*dev(g), cp.asarray(pe), cp.asarray(prefix))
    np.testing.assert_array_equal(
        got, objective_cpu.level_traffic(g.xadj, g.adjncy, g.adjwgt, pe, prefix))
    assert got.sum() == g.adjwgt.sum() and got[0] > got[1] > 0


def test_level_traffic_empty_graph():
    from procmap.kernels.objective import objective_gpu
    xadj = cp.zeros(1, dtype=cp.int64)
    got = objective_gpu.level_traffic(xadj, cp.zeros(0, cp.int32), cp.zeros(0, cp.int64),
                                      cp.zeros(0, cp.int32), np.array([2, 4]))
    np.testing.assert_array_equal(got, np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_pe_loads_match_cpu(name):
    from procmap.kernels.objective import objective_gpu
    g = graph(name)
    k = 37
    pe = random_pe(g.n, k, 11)
    vwgt = np.random.default_rng(12).integers(1, 1000, g.n)
    loads, counts = objective_gpu.pe_loads(cp.asarray(pe), cp.asarray(vwgt), k)
    want_loads, want_counts = objective_cpu.pe_loads(pe, vwgt, k)
    assert loads.dtype == cp.int64 and counts.dtype == cp.int64
    np.testing.assert_array_equal(loads.get(), want_loads)
    np.testing.assert_array_equal(counts.get(), want_counts)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_matrix_cost_matches_cpu(name):
    from procmap.kernels.objective import objective_gpu
    g = graph(name)
    k = 24
    rng = np.random.default_rng(13)
    dist = rng.random((k, k)) * 10
    dist = dist + dist.T
    np.fill_diagonal(dist, 0.0)
    pe = random_pe(g.n, k, 14)
    j, cut = objective_gpu.matrix_cost(*dev(g), cp.asarray(pe), cp.asarray(dist))
    want_j, want_cut = objective_cpu.matrix_cost(g.xadj, g.adjncy, g.adjwgt, pe, dist)
    assert isinstance(j, float) and isinstance(cut, float)
    assert j == pytest.approx(want_j, rel=1e-12)
    assert cut == pytest.approx(want_cut, rel=1e-12)
    if g.adjwgt.dtype.kind != "f":
        assert cut == want_cut  # integer volumes below 2**53 sum exactly in any order
