"""The kernel interface both backends expose (:class:`procmap.kernels.backend.Backend`).

One test body per property, run on the CPU backend and, where CuPy sees a GPU, on the
GPU backend (the ``gpu`` parameter is marked and skipped elsewhere). The oracles are
independent of both twins: SciPy sparse algebra and NumPy. The bit-for-bit agreement
of the two twins is checked separately, in ``tests/gpu``.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from procmap.generators import grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels import backend
from procmap.kernels.backend import to_host


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def be(request):
    """The backend under test."""
    return backend.cpu() if request.param == "cpu" else backend.gpu()


def _float_graph() -> CommGraph:
    rng = np.random.default_rng(5)
    n, m = 600, 2400
    return CommGraph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m),
                                rng.random(m) * 7 + 0.1, n=n, vwgt=rng.integers(1, 4, n))


GRAPHS = {
    "grid": lambda: grid_graph((30, 40)),
    "rgg": lambda: random_geometric_graph(2000, seed=3),
    "float": _float_graph,
}
# (prefix, distances): edge-cut mode with 8 blocks, and a 2:2:2 hierarchy
MODES = {"cut": ([8], [1.0]), "tree": ([2, 4, 8], [1.0, 10.0, 100.0])}


@pytest.fixture(params=sorted(GRAPHS))
def graph(request) -> CommGraph:
    return GRAPHS[request.param]()


def _matrix(xadj, adjncy, adjwgt) -> sp.csr_matrix:
    xadj, adjncy, adjwgt = (np.asarray(to_host(a)) for a in (xadj, adjncy, adjwgt))
    n = xadj.size - 1
    return sp.csr_matrix((adjwgt, adjncy, xadj), shape=(n, n))


def _on(be, g: CommGraph):
    return be.upload_graph(g.xadj, g.adjncy, g.adjwgt, g.vwgt)


def _balanced_start(vwgt: np.ndarray, k: int, seed: int) -> np.ndarray:
    """A random partition within one vertex weight of perfect balance: vertices in a
    random order, each to the lightest block."""
    part = np.empty(vwgt.size, dtype=np.int32)
    load = np.zeros(k)
    for u in np.random.default_rng(seed).permutation(vwgt.size):
        part[u] = b = int(np.argmin(load))
        load[b] += vwgt[u]
    return part


def _brute_traffic(g: CommGraph, part: np.ndarray, prefix) -> np.ndarray:
    """Traffic per level, both directions: level 0 inside a PE, level t between PEs
    whose deepest common group is level t (``p // prefix[t-1] == q // prefix[t-1]``)."""
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    p, q = part[src], part[g.adjncy]
    level = np.full(src.size, len(prefix))
    for t in range(len(prefix) - 1, -1, -1):  # the smallest common level wins
        level[(p // prefix[t]) == (q // prefix[t])] = t + 1
    level[p == q] = 0
    return np.bincount(level, weights=g.adjwgt.astype(np.float64), minlength=len(prefix) + 1)


def test_upload_keeps_values_and_kernel_dtypes(be, graph):
    arrays = _on(be, graph)
    for got, want in zip(arrays, (graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt)):
        np.testing.assert_array_equal(to_host(got), want)
    assert [np.dtype(a.dtype) for a in arrays[:2]] == [np.int64, np.int32]
    assert np.dtype(arrays[2].dtype) == (np.float64 if graph.adjwgt.dtype.kind == "f"
                                         else np.int64)


def test_matching_is_symmetric_capped_and_seeded(be, graph):
    cap = 3 * int(graph.vwgt.max())
    arrays = _on(be, graph)
    match = to_host(be.two_hop_matching(*arrays, cap, 7))
    assert np.array_equal(match[match], np.arange(graph.n))  # an involution
    paired = match != np.arange(graph.n)
    assert paired.any()
    assert (graph.vwgt[paired] + graph.vwgt[match[paired]] <= cap).all()
    np.testing.assert_array_equal(to_host(be.two_hop_matching(*arrays, cap, 7)), match)


def test_contraction_is_the_quotient_graph(be, graph):
    arrays = _on(be, graph)
    match = be.two_hop_matching(*arrays, None, 1)
    cmap, nc = be.coarse_ids(match)
    cmap_h = to_host(cmap)
    assert sorted(set(cmap_h.tolist())) == list(range(nc))
    np.testing.assert_array_equal(cmap_h, cmap_h[to_host(match)])  # pairs share an id
    cxadj, cadjncy, cadjwgt, cvwgt = be.contract(*arrays, cmap, nc)
    members = sp.csr_matrix((np.ones(graph.n), (np.arange(graph.n), cmap_h)), shape=(graph.n, nc))
    want = (members.T @ _matrix(graph.xadj, graph.adjncy, graph.adjwgt) @ members).tolil()
    want.setdiag(0)
    want = want.tocsr()
    want.eliminate_zeros()
    got = _matrix(cxadj, cadjncy, cadjwgt)
    assert abs(got - want).max() <= 1e-9 * max(1.0, float(graph.adjwgt.sum()))
    assert got.nnz == want.nnz and got.has_sorted_indices
    np.testing.assert_array_equal(to_host(cvwgt), np.bincount(cmap_h, weights=graph.vwgt,
                                                              minlength=nc).astype(np.int64))


def test_union_find_clusters_are_connected_and_capped(be, graph):
    cap = 6 * int(graph.vwgt.max())
    cmap, nc = be.cluster_ids(*_on(be, graph), cap, 2)
    cmap = to_host(cmap)
    assert sorted(set(cmap.tolist())) == list(range(nc)) and nc < graph.n
    weight = np.bincount(cmap, weights=graph.vwgt, minlength=nc)
    size = np.bincount(cmap, minlength=nc)
    assert ((weight <= cap) | (size == 1)).all()
    # connected: the edges inside clusters join each cluster into one component
    a = _matrix(graph.xadj, graph.adjncy, graph.adjwgt).tocoo()
    inside = cmap[a.row] == cmap[a.col]
    inner = sp.csr_matrix((np.ones(inside.sum()), (a.row[inside], a.col[inside])),
                          shape=a.shape)
    _, comp = sp.csgraph.connected_components(inner, directed=False)
    assert len(set(zip(cmap.tolist(), comp.tolist()))) == nc


@pytest.mark.parametrize("k", [1, 3, 8])
def test_subgraphs_are_the_induced_subgraphs(be, graph, k):
    part = np.random.default_rng(k).integers(0, k, graph.n).astype(np.int32)
    blocks, members = be.extract_subgraphs(*_on(be, graph), be.asarray(part), k)
    full = _matrix(graph.xadj, graph.adjncy, graph.adjwgt)
    for b in range(k):
        ids = to_host(members[b])
        np.testing.assert_array_equal(ids, np.flatnonzero(part == b))
        sxadj, sadjncy, sadjwgt, svwgt = blocks[b]
        want = full[ids][:, ids]
        got = _matrix(sxadj, sadjncy, sadjwgt)
        assert (got != want).nnz == 0 and got.has_sorted_indices
        np.testing.assert_array_equal(to_host(svwgt), graph.vwgt[ids])


def test_internal_edges_drop_exactly_the_cut(be, graph):
    part = np.random.default_rng(0).integers(0, 5, graph.n).astype(np.int32)
    xadj, adjncy, adjwgt, _ = _on(be, graph)
    got = _matrix(*be.internal_edges(xadj, adjncy, adjwgt, be.asarray(part)))
    a = _matrix(graph.xadj, graph.adjncy, graph.adjwgt).tocoo()
    keep = part[a.row] == part[a.col]
    want = sp.csr_matrix((a.data[keep], (a.row[keep], a.col[keep])), shape=a.shape)
    assert (got != want).nnz == 0 and got.nnz == want.nnz


@pytest.mark.parametrize("mode", sorted(MODES))
def test_objective_matches_a_brute_force_count(be, graph, mode):
    prefix, dist = MODES[mode]
    k = prefix[-1]
    part = np.random.default_rng(1).integers(0, k, graph.n).astype(np.int32)
    xadj, adjncy, adjwgt, vwgt = _on(be, graph)
    dpart = be.asarray(part)
    traffic = np.asarray(to_host(be.level_traffic(xadj, adjncy, adjwgt, dpart,
                                                  np.asarray(prefix, np.int64))), np.float64)
    want = _brute_traffic(graph, part, prefix)
    np.testing.assert_allclose(traffic, want, rtol=1e-12)
    assert be.cost(xadj, adjncy, adjwgt, dpart, prefix, dist) == pytest.approx(
        float(np.dot(dist, want[1:])), rel=1e-12)
    np.testing.assert_array_equal(to_host(be.block_weights(dpart, vwgt, k)),
                                  np.bincount(part, weights=graph.vwgt, minlength=k))


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("refiner", ["jet_refine", "ultra_refine", "isr_refine"])
def test_refiners_keep_balance_lower_J_and_report_it(be, graph, mode, refiner):
    prefix, dist = MODES[mode]
    k = prefix[-1]
    lmax = int(np.ceil(1.03 * graph.vwgt.sum() / k))
    arrays = _on(be, graph)
    start = _balanced_start(graph.vwgt, k, 4)
    assert np.bincount(start, weights=graph.vwgt, minlength=k).max() <= lmax
    dstart = be.asarray(start)
    refine = getattr(be, refiner)
    part, cost = refine(*arrays, dstart, k, lmax, prefix, dist, seed=3)
    host = to_host(part)
    np.testing.assert_array_equal(to_host(dstart), start)  # the input is not modified
    assert host.dtype == np.int32 and host.min() >= 0 and host.max() < k
    assert np.bincount(host, weights=graph.vwgt, minlength=k).max() <= lmax
    before = be.cost(*arrays[:3], dstart, prefix, dist)
    assert cost == pytest.approx(be.cost(*arrays[:3], part, prefix, dist), rel=1e-9)
    assert cost <= before
    again, _ = refine(*arrays, dstart, k, lmax, prefix, dist, seed=3)
    np.testing.assert_array_equal(to_host(again), host)  # deterministic


def test_jet_rebalances_an_overloaded_start(be, graph):
    prefix, dist = MODES["tree"]
    k = prefix[-1]
    lmax = int(np.ceil(1.03 * graph.vwgt.sum() / k))
    start = _balanced_start(graph.vwgt, k, 2)
    start[: graph.n // 3] = 0  # a third of the vertices piled into block 0
    part, _ = be.jet_refine(*_on(be, graph), be.asarray(start), k, lmax, prefix, dist, seed=1)
    assert np.bincount(to_host(part), weights=graph.vwgt, minlength=k).max() <= lmax



def _place_oracle(g: CommGraph, pes, groups, size: int, k: int, max_candidates: int):
    """The placement rule of ``place_in_groups``, vertex by vertex in plain Python."""
    load = np.bincount(pes, weights=g.vwgt, minlength=k)
    out = pes.copy()
    for u in np.flatnonzero(groups != pes // size):
        row = slice(g.xadj[u], g.xadj[u + 1])
        nbr_pes, w = pes[g.adjncy[row]], g.adjwgt[row]
        cands = [int(p) for p in nbr_pes if p // size == groups[u]]
        distinct = list(dict.fromkeys(cands))[:max_candidates]
        if distinct:
            conn = {p: float(w[nbr_pes == p].sum()) for p in distinct}
            out[u] = min(distinct, key=lambda p: (-conn[p], p))
        else:
            lo = groups[u] * size
            out[u] = lo + int(np.argmin(load[lo:lo + size]))
    return out


def test_place_in_groups_follows_its_rule(be, graph):
    from procmap.kernels.refinement.groups_cpu import MAX_CANDIDATES

    size, k = 4, 16
    rng = np.random.default_rng(11)
    pes = _balanced_start(graph.vwgt, k, 3)
    groups = (pes // size).astype(np.int32)
    flip = rng.random(graph.n) < 0.15
    groups[flip] = rng.integers(0, k // size, int(flip.sum()))
    out = to_host(be.place_in_groups(*_on(be, graph), be.asarray(pes), be.asarray(groups),
                                     size, k))
    np.testing.assert_array_equal(out // size, groups)
    np.testing.assert_array_equal(out, _place_oracle(graph, pes, groups, size, k,
                                                     MAX_CANDIDATES))


def test_place_in_groups_follows_the_heaviest_neighbours(be):
    # PEs 0-1 form group 0, PEs 2-3 group 1; vertices 0, 4 and 6 move to group 1.
    # Vertex 0: 9 to PE 3 beats 4 to PE 2. Vertex 4: its one neighbour is on PE 2, the
    # heavier PE of the group. Vertex 6 (no edges): the group's least-loaded PE, 3.
    g = CommGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 4], [4, 5, 4, 1], n=8)
    pes = np.array([0, 2, 3, 3, 1, 2, 0, 2], dtype=np.int32)
    groups = np.ones(8, dtype=np.int32)
    out = to_host(be.place_in_groups(*_on(be, g), be.asarray(pes), be.asarray(groups), 2, 4))
    np.testing.assert_array_equal(out, [3, 2, 3, 3, 2, 2, 3, 2])
