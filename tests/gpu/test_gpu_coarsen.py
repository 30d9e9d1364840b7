"""GPU coarsening (kernels/coarsening/coarsen_gpu.py) against its CPU twin (kernels/coarsening/coarsen_cpu.py).

Promises tested: HEM and two-hop matching are bit-identical to the CPU for int and
float weights, vertex weights and caps; coarse ids are identical; contraction is
identical for int weights and within 1e-12 relative for float weights (float
atomics), also for clusterings that are not matchings.
"""
import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.coarsening import coarsen_cpu as cc

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


# ----------------------------------------------------------------- graphs
def random_graph(n, m, seed, *, float_weights=False, max_vw=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10 + 0.1 if float_weights else rng.integers(1, 20, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, max_vw + 1, n))


def hub_graph(n, hubs, per_vertex, seed):
    """Every vertex links to a few of a small set of hubs: HEM leaves most vertices
    unmatched, so the leaf, twin and relative stages all have work."""
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(hubs, n), per_vertex)
    dst = rng.integers(0, hubs, src.size)
    return CommGraph.from_edges(src, dst, rng.integers(1, 4, src.size), n=n)


def star_and_twins():
    """A star (leaves), K_{3,40} (twins) and a few isolated vertices, side by side."""
    star = [(0, i) for i in range(1, 51)]
    k340 = [(51 + a, 54 + b) for a in range(3) for b in range(40)]
    src, dst = np.array(star + k340).T
    return CommGraph.from_edges(src, dst, n=100)


def with_vwgt(g, seed, max_vw):
    vw = np.random.default_rng(seed).integers(0, max_vw + 1, g.n)  # weight 0 included
    return CommGraph(xadj=g.xadj, adjncy=g.adjncy, adjwgt=g.adjwgt, vwgt=vw.astype(np.int64))


def with_float_weights(g, seed):
    w = np.random.default_rng(seed).random(g.adjncy.size) + 0.5
    w = np.round(w, 3) + 1e-9  # non-integral
    # symmetrise: entry (u, v) takes the weight of the CSR entry of min(u, v) -> max(u, v)
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    lo, hi = np.minimum(src, g.adjncy), np.maximum(src, g.adjncy)
    key = lo.astype(np.int64) * g.n + hi
    first = {}
    for k, wk in zip(key.tolist(), w.tolist()):
        first.setdefault(k, wk)
    w = np.array([first[k] for k in key.tolist()])
    return CommGraph(xadj=g.xadj, adjncy=g.adjncy, adjwgt=w, vwgt=g.vwgt)


GRAPHS = {
    "grid2d": lambda: grid_graph((48, 40)),
    "grid3d_diag": lambda: grid_graph((10, 9, 8), 3, diagonal=True),
    "rgg": lambda: random_geometric_graph(3000, seed=1),
    "delaunay": lambda: delaunay_graph(3000, seed=2),
    "random_int_vw": lambda: random_graph(2000, 6000, 3, max_vw=5),
    "random_float_vw": lambda: random_graph(2000, 6000, 4, float_weights=True, max_vw=5),
    "hubs": lambda: hub_graph(2500, 30, 3, 5),
    "hubs_vw": lambda: with_vwgt(hub_graph(2500, 30, 3, 5), 8, 6),  # caps bite in every stage
    "star_twins": star_and_twins,
    "grid_vw0": lambda: with_vwgt(grid_graph((30, 30)), 6, 4),
    "delaunay_float": lambda: with_float_weights(delaunay_graph(1500, seed=7), 7),
}


@pytest.fixture(scope="module", params=sorted(GRAPHS))
def graph(request):
    return GRAPHS[request.param]()


def host(g):
    return g.xadj, g.adjncy, g.adjwgt, g.vwgt


def dev(g):
    return tuple(cp.asarray(a) for a in host(g))


def caps(g):
    """No cap, and a cap tight enough to block many pairs."""
    return [None, int(2 * max(1, np.median(g.vwgt)))]


def assert_same(gpu_arr, cpu_arr):
    got = cp.asnumpy(gpu_arr)
    assert got.dtype == cpu_arr.dtype
    np.testing.assert_array_equal(got, cpu_arr)


# ---------------------------------------------------------------- matching
@pytest.mark.parametrize("seed", [0, 12345])
def test_hem_bit_identical(graph, seed):
    from procmap.kernels.coarsening import coarsen_gpu as cg
    for cap in caps(graph):
        want = cc.heavy_edge_matching(*host(graph), cap, seed)
        got = cg.heavy_edge_matching(*dev(graph), cap, seed)
        assert isinstance(got, cp.ndarray)
        assert_same(got, want)


@pytest.mark.parametrize("rounds", [0, 1, 2, 30])
def test_hem_rounds(rounds):
    from procmap.kernels.coarsening import coarsen_gpu as cg
    g = random_graph(1500, 5000, 8, max_vw=3)
    want = cc.heavy_edge_matching(*host(g), 5, 3, rounds)
    assert_same(cg.heavy_edge_matching(*dev(g), 5, 3, rounds), want)


@pytest.mark.parametrize("threshold", [cc.UNMATCHED_THRESHOLD, 0.0])
def test_two_hop_bit_identical(graph, threshold):
    # threshold 0 runs every stage (leaf, twin, relative) on every graph
    from procmap.kernels.coarsening import coarsen_gpu as cg
    for cap in caps(graph):
        for seed in (0, 7):
            want = cc.two_hop_matching(*host(graph), cap, seed, threshold=threshold)
            got = cg.two_hop_matching(*dev(graph), cap, seed, threshold=threshold)
            assert_same(got, want)


def test_two_hop_stages_have_work():
    """The equality tests above are only meaningful if the stages pair something."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    for g in (star_and_twins(), hub_graph(2500, 30, 3, 5)):
        hem = cp.asnumpy(cg.heavy_edge_matching(*dev(g)))
        two = cp.asnumpy(cg.two_hop_matching(*dev(g)))
        ids = np.arange(g.n)
        assert np.count_nonzero(hem == ids) > cc.UNMATCHED_THRESHOLD * g.n
        assert np.count_nonzero(two == ids) < np.count_nonzero(hem == ids) - g.n // 4
        assert np.array_equal(two[two], ids)


def test_two_hop_host_inputs_and_determinism():
    from procmap.kernels.coarsening import coarsen_gpu as cg
    g = hub_graph(1200, 20, 2, 9)
    a = cg.two_hop_matching(*host(g), 4, 1)  # NumPy in, CuPy out
    b = cg.two_hop_matching(*dev(g), 4, 1)
    assert isinstance(a, cp.ndarray) and a.dtype == cp.int32
    assert_same(a, cp.asnumpy(b))


# -------------------------------------------------------------- coarse ids
def test_coarse_ids_identical(graph):
    from procmap.kernels.coarsening import coarsen_gpu as cg
    match = cc.two_hop_matching(*host(graph), None, 3)
    want, nc_want = cc.coarse_ids(match)
    got, nc = cg.coarse_ids(cp.asarray(match))
    assert nc == nc_want and isinstance(nc, int)
    assert_same(got, want)


def test_coarse_ids_rejects_non_matching():
    from procmap.kernels.coarsening import coarsen_gpu as cg
    for bad in ([1, 2, 0], [0, 5, 2], [-1, 1]):
        with pytest.raises(ValueError):
            cg.coarse_ids(cp.asarray(np.array(bad, dtype=np.int32)))
    cmap, nc = cg.coarse_ids(cp.zeros(0, dtype=cp.int32))
    assert nc == 0 and cmap.size == 0


# -------------------------------------------------------------- contraction
def assert_contraction(got, want, float_weights):
    cxadj, cadjncy, cadjwgt, cvwgt = want
    assert_same(got[0], cxadj)
    assert_same(got[1], cadjncy)
    assert_same(got[3], cvwgt)
    if float_weights:
        w = cp.asnumpy(got[2])
        assert w.dtype == np.float64
        np.testing.assert_allclose(w, cadjwgt, rtol=1e-12, atol=0)
    else:
        assert_same(got[2], cadjwgt)


def assert_matching_contraction(graph):
    """Contract ``graph`` along its two-hop matching on both backends; compare."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    match = cc.two_hop_matching(*host(graph), None, 0)
    cmap, nc = cc.coarse_ids(match)
    want = cc.contract(*host(graph), cmap, nc)
    got = cg.contract(*dev(graph), cp.asarray(cmap), nc)
    assert_contraction(got, want, graph.adjwgt.dtype.kind == "f")


def test_contract_matching(graph):
    assert_matching_contraction(graph)


@pytest.mark.parametrize("clusters", [1, 7, 300])
def test_contract_random_clusters(graph, clusters):
    from procmap.kernels.coarsening import coarsen_gpu as cg
    rng = np.random.default_rng(clusters)
    nc = clusters + 2  # two coarse vertices without members
    cmap = rng.integers(0, clusters, graph.n).astype(np.int32)
    want = cc.contract(*host(graph), cmap, nc)
    got = cg.contract(*dev(graph), cp.asarray(cmap), nc)
    assert_contraction(got, want, graph.adjwgt.dtype.kind == "f")


@pytest.mark.parametrize("small", [0, 7, 40])
def test_contract_large_regions_sorted_instead(graph, small, monkeypatch):
    """Regions over SMALL_REGION slots hashed in global memory take the sorting path:
    forced here on every (0) or many regions, the result must not change."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    monkeypatch.setattr(cg, "SMALL_REGION", small)
    monkeypatch.setattr(cg, "SHARED_REGION", 0)
    assert_matching_contraction(graph)


@pytest.mark.parametrize("limit", [0, 12])
def test_contract_global_tables(graph, limit, monkeypatch):
    """Regions over the shared-memory limit are hashed in global memory and ranked:
    forced on every region (0) or on most (12), the result must not change."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    monkeypatch.setattr(cg, "SHARED_REGION", limit)
    assert_matching_contraction(graph)


@pytest.mark.parametrize("lanes", [4, 8, 16, 32])
def test_contract_every_row_group(graph, lanes, monkeypatch):
    """The row and emit kernels with 4, 8, 16 and 32 lanes per coarse row (the host picks
    them by the average region size) give the same contraction."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    monkeypatch.setattr(cg, "_row_lanes", lambda m2, nc, per_lane: lanes)
    assert_matching_contraction(graph)


def test_contract_hub_region():
    """A hub of degree 6000 (region over SMALL_REGION) among small regions: both
    compaction paths in one call."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    rng = np.random.default_rng(3)
    n = 9000
    src = np.concatenate([np.zeros(6000, dtype=np.int64), rng.integers(1, n, 20000)])
    dst = np.concatenate([np.arange(1, 6001), rng.integers(1, n, 20000)])
    g = CommGraph.from_edges(src, dst, rng.integers(1, 9, src.size), n=n)
    assert np.diff(g.xadj).max() > cg.SMALL_REGION
    cmap = (np.arange(n) // 2).astype(np.int32)
    want = cc.contract(*host(g), cmap, int(cmap.max()) + 1)
    got = cg.contract(*dev(g), cp.asarray(cmap), int(cmap.max()) + 1)
    assert_contraction(got, want, False)


def test_contract_structure():
    """Invariants, independent of the CPU twin: symmetric, no self loops, sorted rows,
    total weight conserved minus the internal edges."""
    from procmap.kernels.coarsening import coarsen_gpu as cg
    g = random_graph(3000, 12000, 11)
    cmap = np.random.default_rng(0).integers(0, 500, g.n).astype(np.int32)
    cxadj, cadjncy, cadjwgt, cvwgt = (cp.asnumpy(a) for a in cg.contract(*dev(g), cp.asarray(cmap), 500))
    rows = np.repeat(np.arange(500), np.diff(cxadj))
    assert np.all(rows != cadjncy)
    assert np.all((np.diff(cadjncy) > 0) | (np.diff(rows) > 0))
    fwd = dict(zip(zip(rows.tolist(), cadjncy.tolist()), cadjwgt.tolist()))
    assert all(fwd[(v, u)] == w for (u, v), w in fwd.items())
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    internal = g.adjwgt[cmap[src] == cmap[g.adjncy]].sum()
    assert cadjwgt.sum() == g.adjwgt.sum() - internal
    assert cvwgt.sum() == g.vwgt.sum()


# -------------------------------------------------------------- one level
def test_coarsen_once_identical(graph):
    from procmap.kernels.coarsening import coarsen_gpu as cg
    cap = caps(graph)[1]
    want = cc.coarsen_once(*host(graph), cap, 5)
    got = cg.coarsen_once(*dev(graph), cap, 5)
    assert_same(got[0], want[0])
    assert_contraction(got[1:], want[1:], graph.adjwgt.dtype.kind == "f")
