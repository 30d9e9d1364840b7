"""Coarsening kernels: matchings (HEM, leaf, twin, relative), coarse ids, contraction."""
import numba
import numpy as np
import pytest
import scipy.sparse as sp

from procmap.generators import grid_graph
from procmap.graph import CommGraph
from procmap.kernels.coarsening import coarsen_cpu as cc
from procmap.kernels.initial import subgraph_cpu


# ----------------------------------------------------------------- helpers
def arrays(g: CommGraph):
    return g.xadj, g.adjncy, g.adjwgt, g.vwgt


def random_graph(n, m, seed, *, float_weights=False, max_vw=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10 + 0.1 if float_weights else rng.integers(1, 20, m)
    vwgt = rng.integers(1, max_vw + 1, n)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=vwgt)


def rgg(n, seed):
    from scipy.spatial import cKDTree
    pts = np.random.default_rng(seed).random((n, 2))
    pairs = cKDTree(pts).query_pairs(0.55 * np.sqrt(np.log(n) / n), output_type="ndarray")
    return CommGraph.from_edges(pairs[:, 0], pairs[:, 1], n=n)


def check_matching(g: CommGraph, match, max_vwgt=None, *, adjacent=True):
    n = g.n
    assert match.dtype == np.int32 and match.shape == (n,)
    assert match.min() >= 0 and match.max() < n
    assert np.array_equal(match[match], np.arange(n)), "match is not symmetric"
    paired = np.flatnonzero(match != np.arange(n))
    if max_vwgt is not None:
        assert np.all(g.vwgt[paired] + g.vwgt[match[paired]] <= max_vwgt)
    if adjacent:
        A = g.to_scipy()
        assert np.all(A[paired, match[paired]].A1 > 0), "partners must be adjacent"


def reference_contraction(g: CommGraph, cmap, nc):
    """P^T A P without the diagonal, P the n x nc assignment matrix."""
    A = g.to_scipy()
    P = sp.csr_matrix((np.ones(g.n), (np.arange(g.n), cmap)), shape=(g.n, nc))
    C = (P.T @ A @ P).tocsr()
    C.setdiag(0)
    C.eliminate_zeros()
    C.sort_indices()
    return C, np.bincount(cmap, weights=g.vwgt, minlength=nc)


def assert_equals_reference(g, cmap, nc, out):
    cxadj, cadjncy, cadjwgt, cvwgt = out
    C, cw = reference_contraction(g, cmap, nc)
    assert cxadj.dtype == np.int64 and cadjncy.dtype == np.int32
    assert cadjwgt.dtype == g.adjwgt.dtype and cvwgt.dtype == np.int64
    assert np.array_equal(cxadj, C.indptr)
    assert np.array_equal(cadjncy, C.indices)
    if g.adjwgt.dtype.kind == "i":
        assert np.array_equal(cadjwgt, C.data.astype(np.int64))
    else:
        np.testing.assert_allclose(cadjwgt, C.data, rtol=1e-12)
    assert np.array_equal(cvwgt, cw.astype(np.int64))


def unmatched(match):
    return int(np.count_nonzero(match == np.arange(match.size)))


# ------------------------------------------------------------ HEM
def test_hem_prefers_heavy_edge():
    g = CommGraph.from_edges([0, 1, 2], [1, 2, 3], [1, 10, 1], n=4)
    for seed in range(5):
        assert cc.heavy_edge_matching(*arrays(g), None, seed).tolist() == [0, 2, 1, 3]


def test_hem_rating_divides_by_vertex_weights():
    # w^2/(c c): edge 0-1 (w=4, c=8*8 -> 0.25) loses to 1-2 (w=3, c=8*1 -> 1.125)
    g = CommGraph.from_edges([0, 1], [1, 2], [4, 3], n=3, vwgt=[8, 8, 1])
    assert cc.heavy_edge_matching(*arrays(g), None, 0).tolist() == [0, 2, 1]


@pytest.mark.parametrize("float_weights", [False, True])
def test_hem_valid_on_random_graphs(float_weights):
    for seed in range(4):
        g = random_graph(300, 900, seed, float_weights=float_weights, max_vw=4)
        match = cc.heavy_edge_matching(*arrays(g), 5, seed)
        check_matching(g, match, 5)
        assert unmatched(match) < g.n  # something matched


def test_weight_cap_blocks_every_pair():
    g = grid_graph((6, 6))
    g = CommGraph(g.xadj, g.adjncy, g.adjwgt, np.full(g.n, 3, dtype=np.int64))
    assert unmatched(cc.two_hop_matching(*arrays(g), 5, 0)) == g.n
    assert unmatched(cc.two_hop_matching(*arrays(g), 6, 0)) < g.n


def test_hem_on_grid_matches_most_vertices():
    g = grid_graph((20, 20))
    match = cc.heavy_edge_matching(*arrays(g), None, 3)
    check_matching(g, match)
    assert unmatched(match) <= 0.2 * g.n


# --------------------------------------------------------- two-hop stages
def test_star_uses_leaf_matching():
    leaves = 101
    g = CommGraph.from_edges(np.zeros(leaves, dtype=int), np.arange(1, leaves + 1))
    hem = cc.heavy_edge_matching(*arrays(g), None, 0)
    assert unmatched(hem) == g.n - 2  # HEM stalls: one pair through the centre
    match = cc.two_hop_matching(*arrays(g), None, 0)
    check_matching(g, match, adjacent=False)
    assert unmatched(match) <= 1
    pairs = np.flatnonzero((match != np.arange(g.n)) & (np.arange(g.n) != 0) & (match != 0))
    assert pairs.size >= leaves - 2  # the other leaves are paired with each other


def test_leaf_matching_respects_cap():
    leaves = 40
    vwgt = np.r_[1, np.where(np.arange(leaves) % 2 == 0, 1, 9)]
    g = CommGraph.from_edges(np.zeros(leaves, dtype=int), np.arange(1, leaves + 1), vwgt=vwgt)
    match = cc.two_hop_matching(*arrays(g), 2, 0)
    check_matching(g, match, 2, adjacent=False)
    # only the weight-1 leaves can pair (1 + 1 <= 2); 20 of them, one may go to the centre
    assert g.n - unmatched(match) >= 18


def test_twin_matching_pairs_identical_neighbourhoods():
    # K_{3,40}: HEM matches 3 pairs, the 37 others on the big side are twins
    small, big = 3, 40
    src = np.repeat(np.arange(small), big)
    dst = np.tile(np.arange(small, small + big), small)
    g = CommGraph.from_edges(src, dst)
    match = cc.two_hop_matching(*arrays(g), None, 1)
    check_matching(g, match, adjacent=False)
    assert unmatched(match) <= 1
    A = g.to_scipy()
    for u in range(g.n):
        v = match[u]
        if v != u and not A[u, v]:  # non-adjacent partner: must be a true twin
            assert np.array_equal(A[u].indices, A[v].indices)


def test_isolated_vertices_are_paired_as_twins():
    g = CommGraph.from_edges([0], [1], n=10)
    match = cc.two_hop_matching(*arrays(g), None, 0)
    check_matching(g, match, adjacent=False)
    assert unmatched(match) == 0


def test_relative_matching_through_matchmaker():
    # spokes s_i (weight 1) see a heavy hub and heavy connectors g_i, g_{i+1}
    # (weight 100 > cap): HEM, leaves and twins find nothing. Each spoke's
    # matchmaker is a degree-2 connector; the heavier edge sends s_2j and s_2j+1
    # to the same connector g_2j+1, so they are paired.
    m = 20
    hub = 0
    s = 1 + np.arange(m)
    gconn = 1 + m + np.arange(m + 1)
    src, dst, w = [], [], []
    for i in range(m):
        src += [hub, s[i], s[i]]
        dst += [s[i], gconn[i], gconn[i + 1]]
        heavy_right = i % 2 == 0
        w += [1, 1 if heavy_right else 5, 5 if heavy_right else 1]
    src += [hub, hub]  # end connectors get degree 2 too (no leaves)
    dst += [gconn[0], gconn[m]]
    w += [1, 1]
    vwgt = np.full(1 + m + m + 1, 100)
    vwgt[s] = 1
    g = CommGraph.from_edges(src, dst, w, vwgt=vwgt)
    assert unmatched(cc.heavy_edge_matching(*arrays(g), 10, 0)) == g.n
    match = cc.two_hop_matching(*arrays(g), 10, 0)
    check_matching(g, match, 10, adjacent=False)
    assert match[s].tolist() == [s[i + 1] if i % 2 == 0 else s[i - 1] for i in range(m)]


@pytest.mark.parametrize("seed", range(3))
def test_two_hop_valid_with_cap(seed):
    g = random_graph(400, 500, seed, max_vw=3)  # sparse: many leaves and isolated vertices
    match = cc.two_hop_matching(*arrays(g), 4, seed)
    check_matching(g, match, 4, adjacent=False)
    assert unmatched(match) <= unmatched(cc.heavy_edge_matching(*arrays(g), 4, seed))


# ------------------------------------------------------------- determinism
def test_same_seed_same_result_and_seed_matters():
    g = grid_graph((20, 20))
    a = cc.two_hop_matching(*arrays(g), None, 7)
    assert np.array_equal(a, cc.two_hop_matching(*arrays(g), None, 7))
    assert any(not np.array_equal(a, cc.two_hop_matching(*arrays(g), None, s)) for s in range(8, 12))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
@pytest.mark.parametrize("float_weights", [False, True])
def test_independent_of_thread_count(float_weights):
    g = random_graph(3000, 12000, 5, float_weights=float_weights, max_vw=3)
    big = rgg(4000, 2)
    old = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            res = [cc.coarsen_once(*arrays(g), 5, 11), cc.coarsen_once(*arrays(big), None, 11)]
            clustering = np.random.default_rng(0).integers(0, 300, g.n).astype(np.int32)
            res.append((clustering,) + cc.contract(*arrays(g), clustering, 300))
            results.append(res)
    finally:
        numba.set_num_threads(old)
    for one, two in zip(*results):
        for x, y in zip(one, two):
            assert x.dtype == y.dtype and np.array_equal(x, y)  # bit-identical, floats too


# ---------------------------------------------------------------- coarse ids
def test_coarse_ids_numbering():
    match = np.array([3, 1, 4, 0, 2, 5], dtype=np.int32)
    cmap, nc = cc.coarse_ids(match)
    # leaders 0 (with 3), 1, 2 (with 4), 5 numbered in id order
    assert nc == 4 and cmap.dtype == np.int32
    assert cmap.tolist() == [0, 1, 2, 0, 2, 3]
    with pytest.raises(ValueError):
        cc.coarse_ids(np.array([1, 2, 0], dtype=np.int32))


# --------------------------------------------------------------- contraction
@pytest.mark.parametrize("float_weights", [False, True])
def test_contract_matches_scipy_reference(float_weights):
    g = random_graph(500, 2500, 3, float_weights=float_weights, max_vw=5)
    cmap, nc = cc.coarse_ids(cc.two_hop_matching(*arrays(g), None, 0))
    assert_equals_reference(g, cmap, nc, cc.contract(*arrays(g), cmap, nc))
    # a general clustering (large clusters: long rows)
    clustering = np.random.default_rng(1).integers(0, 20, g.n).astype(np.int32)
    assert_equals_reference(g, clustering, 20, cc.contract(*arrays(g), clustering, 20))


def test_contract_preserves_weights():
    g = random_graph(400, 2000, 8, max_vw=4)
    cmap, cxadj, cadjncy, cadjwgt, cvwgt = cc.coarsen_once(*arrays(g), None, 2)
    assert cvwgt.sum() == g.vwgt.sum()
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    internal = g.adjwgt[cmap[src] == cmap[g.adjncy]].sum()
    assert internal > 0
    assert cadjwgt.sum() == g.adjwgt.sum() - internal
    coarse = CommGraph(cxadj, cadjncy, cadjwgt, cvwgt)  # symmetric, sorted, no self loops
    C = coarse.to_scipy()
    assert (C != C.T).nnz == 0 and C.diagonal().sum() == 0 and C.has_sorted_indices


def test_coarsen_once_is_the_composition():
    g = grid_graph((15, 17))
    out = cc.coarsen_once(*arrays(g), 4, 9)
    match = cc.two_hop_matching(*arrays(g), 4, 9)
    cmap, nc = cc.coarse_ids(match)
    assert np.array_equal(out[0], cmap)
    for x, y in zip(out[1:], cc.contract(*arrays(g), cmap, nc)):
        assert np.array_equal(x, y)
    assert_equals_reference(g, cmap, nc, out[1:])


def test_grid_shrinks_every_level():
    g = grid_graph((20, 20))
    for level in range(4):
        cmap, cxadj, cadjncy, cadjwgt, cvwgt = cc.coarsen_once(*arrays(g), None, level)
        assert cvwgt.size <= 0.6 * g.n, f"level {level}: {g.n} -> {cvwgt.size}"
        assert_equals_reference(g, cmap, cvwgt.size, (cxadj, cadjncy, cadjwgt, cvwgt))
        g = CommGraph(cxadj, cadjncy, cadjwgt, cvwgt)


# ------------------------------------------- references for the fast paths
def reference_hem(g: CommGraph, max_vwgt, seed, max_rounds):
    """HEM as specified, plainly: every round every unmatched vertex with an
    eligible neighbour scans all its edges again, then mutual choices match."""
    n = g.n
    cap = cc.weight_cap(max_vwgt)
    key = cc.edge_hash_key(seed)
    match = np.arange(n)
    avail = g.vwgt.astype(np.int64).tolist()  # -1 once matched
    active = [u for u in range(n) if g.xadj[u + 1] > g.xadj[u]]
    pref = [-1] * n
    for _ in range(max_rounds):
        if not active:
            break
        for u in active:
            best, best_key = -1, None
            for e in range(g.xadj[u], g.xadj[u + 1]):
                v = int(g.adjncy[e])
                if avail[v] < 0 or avail[u] + avail[v] > cap:
                    continue
                w = float(g.adjwgt[e])
                r = w * w / (float(max(avail[u], 1)) * float(max(avail[v], 1)))
                k = (r, int(cc.edge_hash(u, v, key)), -v)
                if best_key is None or k > best_key:
                    best, best_key = v, k
            pref[u] = best
        mutual = [u for u in active if pref[u] >= 0 and pref[pref[u]] == u]
        if not mutual:
            break
        for u in mutual:
            match[u] = pref[u]
            avail[u] = -1
        active = [u for u in active if match[u] == u and pref[u] >= 0]
    return match.astype(np.int32)


def ordered_contraction(g: CommGraph, cmap, nc):
    """Contraction summed in the documented order: coarse edge (c, d) adds its fine
    edges member by member (ids increasing), each member's edges in CSR order;
    entry (d, c) of the result holds that sum."""
    members = [[] for _ in range(nc)]
    for u in range(g.n):
        members[cmap[u]].append(u)
    rows = [dict() for _ in range(nc)]
    for c in range(nc):
        sums = {}
        for u in members[c]:
            for e in range(g.xadj[u], g.xadj[u + 1]):
                d = int(cmap[g.adjncy[e]])
                if d != c:
                    w = g.adjwgt[e].item()
                    sums[d] = sums[d] + w if d in sums else w
        for d, w in sums.items():
            rows[d][c] = w
    cxadj = np.zeros(nc + 1, dtype=np.int64)
    cxadj[1:] = np.cumsum([len(r) for r in rows])
    cadjncy = np.array([c for r in rows for c in sorted(r)], dtype=np.int32)
    cadjwgt = np.array([r[c] for r in rows for c in sorted(r)], dtype=g.adjwgt.dtype)
    cvwgt = np.bincount(cmap, weights=g.vwgt, minlength=nc).astype(np.int64)
    return cxadj, cadjncy, cadjwgt, cvwgt


def numpy_internal_edges(xadj, adjncy, adjwgt, part):
    src = np.repeat(np.arange(xadj.size - 1), np.diff(xadj))
    keep = part[src] == part[adjncy]
    kept = np.zeros(adjncy.size + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return kept[xadj], adjncy[keep], adjwgt[keep]


def assert_identical(got, want):
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert x.dtype == y.dtype and np.array_equal(x, y)  # bit for bit, floats too


# ---------------------------------------------------- HEM against reference
@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("max_rounds", [0, 1, 2, 3, cc.HEM_MAX_ROUNDS, 30])
def test_hem_equals_plain_rounds(float_weights, max_rounds):
    # the fast HEM re-scans only vertices whose choice was taken; the matching
    # must still be the one of full rounds, round limit and caps included
    for seed in range(3):
        g = random_graph(250, 700, seed, float_weights=float_weights, max_vw=4)
        g = CommGraph(g.xadj, g.adjncy, g.adjwgt,
                      np.random.default_rng(seed).integers(0, 4, g.n).astype(np.int64))  # weight 0 too
        for cap in (None, 4, 6):
            want = reference_hem(g, cap, seed, max_rounds)
            assert np.array_equal(cc.heavy_edge_matching(*arrays(g), cap, seed, max_rounds), want)


def test_hem_equals_plain_rounds_on_ties():
    # unit weights: every choice is decided by the hash, many rounds have work
    g = grid_graph((23, 19))
    for seed in range(4):
        want = reference_hem(g, None, seed, cc.HEM_MAX_ROUNDS)
        assert np.array_equal(cc.heavy_edge_matching(*arrays(g), None, seed), want)


# ------------------------------------------------- coarse ids, contraction
def test_coarse_ids_against_scan():
    rng = np.random.default_rng(4)
    for n in (1, 2, 57, 400):
        perm = rng.permutation(n)
        k = n // 3
        match = np.arange(n)
        match[perm[:k]], match[perm[k:2 * k]] = perm[k:2 * k], perm[:k]
        for dtype in (np.int32, np.int64):
            cmap, nc = cc.coarse_ids(match.astype(dtype))
            leader = match >= np.arange(n)
            want = (np.cumsum(leader) - 1)[np.minimum(np.arange(n), match)]
            assert nc == leader.sum() and cmap.dtype == np.int32
            assert np.array_equal(cmap, want)


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("chunks", [1, 2, 3, 7])
def test_contract_equals_ordered_reference(monkeypatch, float_weights, chunks):
    # chunks stand in for threads: the result must not depend on them, floats included
    monkeypatch.setattr(cc, "_chunks", lambda nc, entries: chunks)
    g = random_graph(300, 1500, 9, float_weights=float_weights, max_vw=3)
    cmap, nc = cc.coarse_ids(cc.two_hop_matching(*arrays(g), None, 1))
    rng = np.random.default_rng(2)
    clusterings = [(cmap, nc),
                   (rng.integers(0, 25, g.n).astype(np.int32), 27),  # two empty coarse vertices
                   (rng.integers(0, 2, g.n).astype(np.int32), 2),  # two long rows
                   (np.zeros(g.n, dtype=np.int32), 1)]  # everything internal
    for cm, k in clusterings:
        out = cc.contract(*arrays(g), cm, k)
        assert_identical(out, ordered_contraction(g, cm, k))
        assert_equals_reference(g, cm, k, out)


def test_contract_of_empty_and_edgeless_graphs():
    g = CommGraph.from_edges([], [], n=5)
    out = cc.contract(*arrays(g), np.array([0, 0, 1, 2, 2], dtype=np.int32), 3)
    assert_identical(out, (np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int32),
                           np.zeros(0, dtype=g.adjwgt.dtype), np.array([2, 1, 2])))


def test_contract_rejects_asymmetric_graph():
    # 0 -> 1, 0 -> 2 and 3 -> 2 without reverse edges (and 1 <-> 3 to make rows)
    xadj = np.array([0, 2, 3, 3, 5], dtype=np.int64)
    adjncy = np.array([1, 2, 3, 2, 1], dtype=np.int32)
    adjwgt = np.ones(5, dtype=np.int64)
    vwgt = np.ones(4, dtype=np.int64)
    with pytest.raises(ValueError, match="symmetric"):
        cc.contract(xadj, adjncy, adjwgt, vwgt, np.arange(4, dtype=np.int32), 4)


# ------------------------------------------------------------ edge filter
@pytest.mark.parametrize("float_weights", [False, True])
def test_internal_edges_equals_numpy(float_weights):
    g = random_graph(500, 3000, 6, float_weights=float_weights)
    rng = np.random.default_rng(0)
    for blocks in (1, 2, 9, g.n):
        part = rng.integers(0, blocks, g.n).astype(np.int32)
        want = numpy_internal_edges(g.xadj, g.adjncy, g.adjwgt, part)
        assert_identical(subgraph_cpu.internal_edges(g.xadj, g.adjncy, g.adjwgt, part), want)
