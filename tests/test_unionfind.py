"""Union-find (G-kway) coarsening with a weight cap: kernels/coarsening/unionfind_cpu.py.

Checked against a plain-Python reference (picks by the documented key, the forest
rooted at mutual pairs, Kundu-Misra splitting with an explicit sort), plus the
invariants: cap, every vertex mapped, clusters connected, numbering, determinism,
seed independence of strict decisions, minimum piece count, shrink ratio, and
compatibility with ``coarsen_cpu.contract``.
"""
import numba
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.coarsening import coarsen_cpu as cc
from procmap.kernels.coarsening import unionfind_cpu as uf

M64 = (1 << 64) - 1


# ----------------------------------------------------------------- helpers
def arrays(g: CommGraph):
    return g.xadj, g.adjncy, g.adjwgt, g.vwgt


def random_graph(n, m, seed, *, float_weights=False, max_vw=1, min_vw=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10 + 0.1 if float_weights else rng.integers(1, 6, m)
    vwgt = rng.integers(min_vw, max_vw + 1, n)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=vwgt)


def with_vwgt(g, vwgt):
    return CommGraph(xadj=g.xadj, adjncy=g.adjncy, adjwgt=g.adjwgt,
                     vwgt=np.asarray(vwgt, dtype=np.int64))


def path_graph(n, weights=None):
    return CommGraph.from_edges(np.arange(n - 1), np.arange(1, n), weights, n=n)


def _mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def reference(g: CommGraph, max_vwgt=None, seed=0):
    """The documented algorithm, written plainly (sorts instead of searches)."""
    n = g.n
    xadj, adjncy, adjwgt, vwgt = (a.tolist() for a in arrays(g))
    cap = float("inf") if max_vwgt is None else max_vwgt
    key = int(cc.edge_hash_key(seed))
    deg = [xadj[u + 1] - xadj[u] for u in range(n)]
    pick = []
    for u in range(n):
        cands = []
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if v != u and vwgt[u] + vwgt[v] <= cap:
                h = _mix64(((min(u, v) << 32) | max(u, v)) ^ key)
                cands.append((adjwgt[e], -deg[v], h, -v))
        pick.append(-max(cands)[3] if cands else -1)
    parent = [u if pick[u] < 0 or (pick[pick[u]] == u and u < pick[u]) else pick[u]
              for u in range(n)]

    def root_depth(par, u):
        d = 0
        while par[u] != u:
            u = par[u]
            d += 1
        return u, d

    roots, depth = zip(*(root_depth(parent, u) for u in range(n))) if n else ((), ())
    tree_w = {}
    for u in range(n):
        tree_w[roots[u]] = tree_w.get(roots[u], 0) + vwgt[u]
    children = {u: [] for u in range(n)}
    for u in range(n):
        if parent[u] != u:
            children[parent[u]].append(u)
    acc = list(vwgt)
    cut = [False] * n
    for p in sorted(range(n), key=lambda u: -depth[u]):
        if tree_w[roots[p]] <= cap:
            continue
        for c in sorted(children[p], key=lambda c: (acc[c], c)):
            if acc[p] + acc[c] <= cap:
                acc[p] += acc[c]
            else:
                cut[c] = True
    piece_parent = [u if cut[u] else parent[u] for u in range(n)]
    cluster = [root_depth(piece_parent, u)[0] for u in range(n)]
    ids = {}
    cmap = [ids.setdefault(r, len(ids)) for r in cluster]
    return np.array(cmap, dtype=np.int32), len(ids)


def check_clusters(g: CommGraph, cmap, nc, max_vwgt=None):
    """Every vertex mapped, ids 0..nc-1 by smallest vertex, clusters connected, cap."""
    n = g.n
    assert cmap.dtype == np.int32 and cmap.shape == (n,)
    assert isinstance(nc, int)
    if n == 0:
        assert nc == 0
        return
    assert cmap.min() == 0 and cmap.max() == nc - 1
    first = np.full(nc, n)
    np.minimum.at(first, cmap, np.arange(n))
    assert np.all(np.diff(first) > 0), "clusters not numbered by their smallest vertex"
    src = np.repeat(np.arange(n), np.diff(g.xadj))
    inside = cmap[src] == cmap[g.adjncy]
    A = sp.csr_matrix((np.ones(inside.sum()), (src[inside], g.adjncy[inside])), shape=(n, n))
    ncomp, _ = connected_components(A, directed=False)
    assert ncomp == nc, "some cluster is not connected in the graph"
    if max_vwgt is not None:
        cw = np.bincount(cmap, weights=g.vwgt, minlength=nc)
        size = np.bincount(cmap, minlength=nc)
        assert np.all((cw <= max_vwgt) | (size == 1)), "a cluster exceeds the cap"


# ------------------------------------------------------- reference equality
CASES = [
    ("random_int", lambda: random_graph(400, 1200, 1), None),
    ("random_int_vw_cap", lambda: random_graph(400, 1500, 2, max_vw=6), 12),
    ("random_float_vw_cap", lambda: random_graph(400, 1500, 3, float_weights=True, max_vw=4), 9),
    ("random_vw0_cap", lambda: random_graph(300, 900, 4, max_vw=5, min_vw=0), 7),
    ("grid_cap3", lambda: grid_graph((17, 13)), 3),
    ("grid_diag_cap5", lambda: grid_graph((9, 8, 5), 2, diagonal=True), 5),
    ("grid_nocap", lambda: grid_graph((20, 20)), None),
    ("star_cap", lambda: CommGraph.from_edges(np.zeros(60, int), np.arange(1, 61)), 7),
    ("path_up_cap", lambda: path_graph(200, np.arange(1, 200)), 9),
    ("delaunay_cap", lambda: delaunay_graph(600, seed=3), 4),
]


@pytest.mark.parametrize("name,make,cap", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [0, 5])
def test_matches_reference_and_invariants(name, make, cap, seed):
    g = make()
    cmap, nc = uf.cluster_ids(*arrays(g), cap, seed)
    ref_cmap, ref_nc = reference(g, cap, seed)
    assert nc == ref_nc
    assert np.array_equal(cmap, ref_cmap)
    check_clusters(g, cmap, nc, cap)
    if cap is not None:
        # the cap binds in these cases: without it some cluster would be heavier
        free, nfree = uf.cluster_ids(*arrays(g), None, seed)
        assert np.bincount(free, weights=g.vwgt, minlength=nfree).max() > cap


# ---------------------------------------------------------------- the picks
def test_picks_heaviest_edge_then_lowest_degree():
    # 0-1 (w 5), 0-2 (w 5), 0-3 (w 1); 1 has an extra neighbour 4, so deg(2) < deg(1)
    g = CommGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 4], [5, 5, 1, 5], n=5)
    for seed in range(6):
        pick = uf.cluster_picks(*arrays(g), None, seed)
        assert pick[0] == 2 and pick[3] == 0 and pick[2] == 0


def test_cap_splits_a_pick_tree():
    # path 0-1-2-3 with weights 2, 3, 2: picks 0->1, 1<->2, 3->2, one tree rooted
    # at 1; without a cap one cluster, a cap of 3 cuts it into {0, 1} and {2, 3}
    # (1 keeps its lighter child piece {0} and cuts {2, 3}).
    g = path_graph(4, [2, 3, 2])
    cmap, nc = uf.cluster_ids(*arrays(g))
    assert nc == 1
    cmap, nc = uf.cluster_ids(*arrays(g), 3)
    assert nc == 2 and cmap.tolist() == [0, 0, 1, 1]
    check_clusters(g, cmap, nc, 3)


def test_seed_changes_ties_only():
    # random float weights: every pick is decided by the weight, never by the hash
    g = random_graph(500, 2000, 7, float_weights=True, max_vw=3)
    base = uf.cluster_ids(*arrays(g), 6, 0)
    for seed in (1, 2, 99):
        cmap, nc = uf.cluster_ids(*arrays(g), 6, seed)
        assert nc == base[1] and np.array_equal(cmap, base[0])
    # unit grid: all ties, the seed picks among them, every pick stays a best one
    g = grid_graph((30, 30))
    results = {uf.cluster_ids(*arrays(g), None, s)[0].tobytes() for s in range(4)}
    assert len(results) == 4
    deg = np.diff(g.xadj)
    for seed in range(4):
        pick = uf.cluster_picks(*arrays(g), None, seed)
        for u in range(g.n):
            nbrs = g.adjncy[g.xadj[u]:g.xadj[u + 1]]
            assert deg[pick[u]] == deg[nbrs].min()


def test_ineligible_neighbours_are_never_picked():
    g = with_vwgt(grid_graph((8, 8)), np.tile([1, 4], 32))
    pick = uf.cluster_picks(*arrays(g), 5, 0)
    ok = pick >= 0
    assert np.all(g.vwgt[ok] + g.vwgt[pick[ok]] <= 5)
    assert np.all(pick[g.vwgt == 4] >= 0)  # every heavy vertex has a light neighbour


# ---------------------------------------------------------------- the cap
def test_cap_splits_a_chain_into_the_fewest_pieces():
    # increasing weights: every vertex picks its right neighbour, one tree of depth
    # n-1; a cap of c on unit vertex weights needs exactly ceil(n / c) pieces
    n = 1000
    g = path_graph(n, np.arange(1, n))
    for cap in (1, 2, 7, 64, 999, 1000):
        cmap, nc = uf.cluster_ids(*arrays(g), cap)
        assert nc == -(-n // cap)
        check_clusters(g, cmap, nc, cap)


def test_cap_on_a_star_keeps_the_lightest_leaves():
    # hub 0 with leaves of weights 1..6 (leaf i has weight 1 + (i - 1) % 6)
    leaves = 30
    vw = np.concatenate(([2], 1 + np.arange(leaves) % 6))
    g = with_vwgt(CommGraph.from_edges(np.zeros(leaves, int), np.arange(1, leaves + 1)), vw)
    cmap, nc = uf.cluster_ids(*arrays(g), 12)
    hub = np.flatnonzero(cmap == cmap[0])
    # lightest first: the five leaves of weight 1 (5) fill 2 + 5 = 7, then weight 2
    # leaves: two more fit (11), the third would not
    assert g.vwgt[hub].sum() == 11
    assert sorted(g.vwgt[hub[1:]].tolist()) == [1] * 5 + [2, 2]
    assert nc == 1 + leaves - (hub.size - 1)
    check_clusters(g, cmap, nc, 12)


def test_vertices_heavier_than_the_cap_stay_alone():
    g = with_vwgt(grid_graph((10, 10)), np.where(np.arange(100) % 7 == 0, 50, 1))
    cmap, nc = uf.cluster_ids(*arrays(g), 10)
    heavy = np.flatnonzero(g.vwgt == 50)
    assert np.all(np.bincount(cmap)[cmap[heavy]] == 1)
    check_clusters(g, cmap, nc, 10)


def test_cap_below_every_pair_leaves_singletons():
    g = with_vwgt(grid_graph((6, 6)), np.full(36, 3))
    cmap, nc = uf.cluster_ids(*arrays(g), 5)
    assert nc == 36 and np.array_equal(cmap, np.arange(36))


@pytest.mark.parametrize("seed", range(3))
def test_cap_invariant_on_random_weighted_graphs(seed):
    for cap in (2, 5, 20, 100):
        g = random_graph(1500, 6000, seed, max_vw=4, min_vw=0)
        cmap, nc = uf.cluster_ids(*arrays(g), cap, seed)
        check_clusters(g, cmap, nc, cap)


# ----------------------------------------------------------- small inputs
def test_empty_and_isolated():
    g0 = CommGraph.from_edges([], [], n=0)
    cmap, nc = uf.cluster_ids(*arrays(g0))
    assert nc == 0 and cmap.size == 0 and cmap.dtype == np.int32
    g = CommGraph.from_edges([1], [2], n=5)  # 0, 3, 4 isolated
    cmap, nc = uf.cluster_ids(*arrays(g))
    assert cmap.tolist() == [0, 1, 1, 2, 3] and nc == 4


# ------------------------------------------------------------- determinism
@pytest.mark.parametrize("float_weights", [False, True])
def test_deterministic_and_independent_of_thread_count(float_weights):
    g = random_graph(3000, 12000, 11, float_weights=float_weights, max_vw=3)
    results = []
    old = numba.get_num_threads()
    try:
        for threads in sorted({1, old}):
            numba.set_num_threads(threads)
            for _ in range(2):
                results.append(uf.cluster_ids(*arrays(g), 8, 3))
    finally:
        numba.set_num_threads(old)
    for cmap, nc in results[1:]:
        assert nc == results[0][1] and np.array_equal(cmap, results[0][0])


# ------------------------------------------------------------- shrink ratio
# measured (seed 0, no cap): grid 0.282, rgg 0.090, delaunay 0.186 of n per level;
# two-hop matching keeps 0.54-0.55
SHRINK = [
    ("grid300", lambda: grid_graph((300, 300)), 0.33),
    ("rgg", lambda: random_geometric_graph(2**14, seed=0), 0.15),
    ("delaunay", lambda: delaunay_graph(2**14, seed=0), 0.25),
]


@pytest.mark.parametrize("name,make,bound", SHRINK, ids=[s[0] for s in SHRINK])
def test_shrinks_far_more_than_a_matching(name, make, bound):
    g = make()
    lmax = int(np.ceil(1.03 * g.vwgt.sum() / 64))  # the cap of a 64-way split
    cmap, nc = uf.cluster_ids(*arrays(g), lmax, 1)
    check_clusters(g, cmap, nc, lmax)
    assert nc <= bound * g.n
    # the next level shrinks as well (weighted edges, non-unit vertex weights)
    coarse = cc.contract(*arrays(g), cmap, nc)
    cmap2, nc2 = uf.cluster_ids(*coarse, lmax, 2)
    assert nc2 <= 0.4 * nc
    assert np.bincount(cmap2, weights=coarse[3]).max() <= lmax


# ------------------------------------------------------------ contraction
@pytest.mark.parametrize("float_weights", [False, True])
def test_contract_accepts_the_clusters(float_weights):
    g = random_graph(2000, 8000, 5, float_weights=float_weights, max_vw=4)
    cmap, nc = uf.cluster_ids(*arrays(g), 10, 0)
    cxadj, cadjncy, cadjwgt, cvwgt = cc.contract(*arrays(g), cmap, nc)
    assert cvwgt.size == nc and cvwgt.sum() == g.vwgt.sum()
    assert np.all(cvwgt <= 10)
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    internal = g.adjwgt[cmap[src] == cmap[g.adjncy]].sum()
    np.testing.assert_allclose(cadjwgt.sum() + internal, g.adjwgt.sum(), rtol=1e-12)
    C = sp.csr_matrix((cadjwgt, cadjncy, cxadj), shape=(nc, nc))
    assert (C != C.T).nnz == 0 and C.diagonal().sum() == 0
