"""Jet refinement kernels: gains, balance guarantees, cost bookkeeping, determinism."""
import math

import numba
import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import grid_graph
from procmap.kernels import jet_cpu as jet
from procmap.objective import evaluate
from procmap.topology import Hierarchy


def lmax_of(graph, k, eps=0.03):
    return math.ceil((1 + eps) * int(graph.vwgt.sum()) / k)


def random_balanced(n, k, seed):
    rng = np.random.default_rng(seed)
    return rng.permutation(np.arange(n) % k).astype(np.int32)


def random_graph(n, m, seed, float_weights=False):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 5 if float_weights else rng.integers(1, 6, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 4, n))


def refine(graph, part, k, lmax, h, **kw):
    return jet.jet_refine(graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt, part, k, lmax,
                          h.prefix_sizes, np.asarray(h.distances), **kw)


CUT4 = Hierarchy((4,), (1.0,))          # edge-cut mode, k = 4
TREE8 = Hierarchy((2, 2, 2), (1.0, 10.0, 100.0))


def brute_gain(graph, part, u, b, D):
    """Paper equation 1 straight from the definition."""
    a = part[u]
    lo, hi = graph.xadj[u], graph.xadj[u + 1]
    return sum(w * (D[a, part[v]] - D[b, part[v]])
               for v, w in zip(graph.adjncy[lo:hi], graph.adjwgt[lo:hi]))


@pytest.mark.parametrize("h", [CUT4, TREE8, Hierarchy((3, 2), (2.0, 7.0))])
def test_lp_proposals_match_equation_1(h):
    """Best adjacent block and its gain agree with a brute-force evaluation."""
    g = random_graph(60, 200, seed=3, float_weights=True)
    k = h.k
    part = random_balanced(g.n, k, 1)
    D = h.distance_matrix()
    prefix, dist = h.prefix_sizes, np.asarray(h.distances)
    grp, delta = jet._level_tables(prefix, dist)
    dest = np.empty(g.n, np.int32)
    gain = np.empty(g.n)
    cut_mode = prefix.size == 1
    # filter ratio 1: in cut mode nearly every vertex with a neighbour block proposes
    jet._lp_propose(g.xadj, g.adjncy, g.adjwgt, part, k, grp, delta, cut_mode, 1.0,
                    np.zeros(g.n, np.uint8), np.arange(g.n, dtype=np.int32), 1, dest, gain)
    scale = dist[0] if cut_mode else 1.0  # cut-mode gains are in edge weight
    for u in range(g.n):
        blocks = sorted(set(part[g.adjncy[g.xadj[u]:g.xadj[u + 1]]]) - {part[u]})
        if not blocks:
            assert dest[u] == -1
            continue
        gains = [brute_gain(g, part, u, b, D) for b in blocks]
        best = max(gains)
        if dest[u] >= 0:
            assert gain[u] * scale == pytest.approx(best, abs=1e-9)
            assert brute_gain(g, part, u, dest[u], D) == pytest.approx(best, abs=1e-9)
        if not cut_mode:
            assert (dest[u] >= 0) == (best >= -1e-12)


def test_cut_mode_reduces_cut_and_reports_exact_cost():
    g = grid_graph((30, 30))
    k = 4
    lmax = lmax_of(g, k)
    start = random_balanced(g.n, k, 0)
    part, value = refine(g, start, k, lmax, CUT4)
    ev = evaluate(g, CUT4, part)
    assert ev.valid and ev.loads.max() <= lmax
    assert value == ev.J == 2 * ev.cut
    assert ev.cut <= 0.5 * evaluate(g, CUT4, start).cut
    assert jet.cost(g.xadj, g.adjncy, g.adjwgt, part, [4], [1.0]) == ev.J


def test_distance_mode_reduces_J():
    g = grid_graph((30, 30))
    k = 8
    lmax = lmax_of(g, k)
    start = random_balanced(g.n, k, 5)
    part, value = refine(g, start, k, lmax, TREE8)
    ev = evaluate(g, TREE8, part)
    assert ev.valid and ev.loads.max() <= lmax
    assert value == ev.J
    assert ev.J < 0.5 * evaluate(g, TREE8, start).J


def test_float_weights_cost_bookkeeping():
    g = random_graph(300, 1500, seed=7, float_weights=True)
    h = Hierarchy((2, 3), (1.0, 4.0))
    lmax = lmax_of(g, h.k)
    start = random_balanced(g.n, h.k, 2)
    part, value = refine(g, start, h.k, lmax, h)
    ev = evaluate(g, h, part)
    assert value == pytest.approx(ev.J, rel=1e-12)
    assert ev.loads.max() <= lmax
    assert ev.J <= evaluate(g, h, start).J


def test_feasible_start_stays_feasible():
    for seed in range(4):
        g = random_graph(400, 1600, seed=seed)
        for h in (CUT4, TREE8):
            lmax = lmax_of(g, h.k, 0.05)
            # a feasible but poor start: contiguous id ranges of equal weight
            cum = np.cumsum(g.vwgt) - 1
            start = (cum * h.k // int(g.vwgt.sum())).astype(np.int32)
            assert jet.block_weights(start, g.vwgt, h.k).max() <= lmax
            part, value = refine(g, start, h.k, lmax, h, filter_ratio=0.75)
            assert jet.block_weights(part, g.vwgt, h.k).max() <= lmax
            assert value <= evaluate(g, h, start).J


@pytest.mark.parametrize("h", [CUT4, Hierarchy((2, 2), (1.0, 10.0))])
def test_infeasible_start_becomes_feasible(h):
    g = grid_graph((30, 30))
    lmax = lmax_of(g, h.k)
    start = np.zeros(g.n, np.int32)  # everything in block 0
    part, value = refine(g, start, h.k, lmax, h)
    assert jet.block_weights(part, g.vwgt, h.k).max() <= lmax
    assert value == evaluate(g, h, part).J


def test_rebalance_strong_restores_balance_in_one_step():
    g = grid_graph((30, 30))
    k = 4
    lmax = lmax_of(g, k)
    rng = np.random.default_rng(0)
    part = np.where(rng.random(g.n) < 0.8, 0, rng.integers(1, k, g.n)).astype(np.int32)
    for prefix in ([4], [2, 4]):
        moves, targets = jet.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                              prefix)
        assert np.all(part[moves] != targets)
        new = part.copy()
        new[moves] = targets
        assert jet.block_weights(new, g.vwgt, k).max() <= lmax


def test_rebalance_strong_moves_heavy_vertex_when_only_that_fits():
    # block 0 is one over the limit and holds only weight-3 vertices: the sole
    # feasible progress moves one of them out, past Jet's heavy-vertex filters.
    g = CommGraph.from_edges([0, 1, 2, 3, 4], [1, 2, 3, 4, 5], n=6, vwgt=[3, 3, 3, 1, 1, 1])
    part = np.array([0, 0, 0, 1, 1, 1], np.int32)
    moves, targets = jet.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, 8, [2])
    new = part.copy()
    new[moves] = targets
    assert jet.block_weights(new, g.vwgt, 2).max() <= 8


def test_rebalance_weak_moves_out_of_overloaded_blocks_only():
    g = grid_graph((20, 20))
    k = 4
    lmax = lmax_of(g, k)
    part = (np.arange(g.n) // 20 * 4 // 20).astype(np.int32)  # 4 horizontal strips
    part[(np.arange(g.n) // 20) == 5] = 0                    # strip 0 grows by a row
    bw = jet.block_weights(part, g.vwgt, k)
    moves, targets = jet.rebalance_weak(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, [4])
    assert moves.size >= bw[0] - lmax
    assert np.all(bw[part[moves]] > lmax)
    assert np.all(bw[targets] < lmax)
    new = part.copy()
    new[moves] = targets
    assert jet.block_weights(new, g.vwgt, k)[0] <= lmax


def test_lp_respects_locks():
    g = grid_graph((20, 20))
    part = random_balanced(g.n, 4, 3)
    free, _ = jet.jet_lp(g.xadj, g.adjncy, g.adjwgt, part, 4, [4], [1.0])
    locked = np.zeros(g.n, bool)
    locked[free] = True
    again, _ = jet.jet_lp(g.xadj, g.adjncy, g.adjwgt, part, 4, [4], [1.0], locked=locked)
    assert free.size > 0 and not np.intersect1d(free, again).size


def test_deterministic_across_seeds_and_threads():
    g = grid_graph((40, 40))
    start = random_balanced(g.n, 8, 9)
    start[:300] = 0  # infeasible start: exercises weak (seeded) and strong rebalancing
    lmax = lmax_of(g, 8)
    runs = {}
    old = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            for h in (Hierarchy((8,), (1.0,)), TREE8):
                runs[threads, h.levels] = refine(g, start, 8, lmax, h, seed=3)
    finally:
        numba.set_num_threads(old)
    for (threads, levels), (part, value) in runs.items():
        ref_part, ref_value = runs[1, levels]
        np.testing.assert_array_equal(part, ref_part)
        assert value == ref_value
    again = refine(g, start, 8, lmax, TREE8, seed=3)
    np.testing.assert_array_equal(again[0], runs[1, TREE8.levels][0])


def test_ultra_schedule_and_refine():
    assert len(jet.ULTRA_FILTER_RATIOS) == 17
    assert jet.ULTRA_FILTER_RATIOS[0] == 0.85 and jet.ULTRA_FILTER_RATIOS[-1] == 0.05
    assert jet.filter_schedule() == (0.25,) and jet.filter_schedule(finest=False) == (0.75,)
    g = grid_graph((20, 20))
    lmax = lmax_of(g, 4)
    start = random_balanced(g.n, 4, 4)
    once, c1 = refine(g, start, 4, lmax, CUT4)
    part, c17 = jet.ultra_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, 4, lmax, [4], [1.0])
    assert c17 == evaluate(g, CUT4, part).J
    assert jet.block_weights(part, g.vwgt, 4).max() <= lmax
    assert c17 <= c1


@pytest.mark.parametrize("h", [CUT4, TREE8])
@pytest.mark.parametrize("start_kind", ["random", "all_in_one"])
def test_incremental_lp_equals_full_reevaluation(h, start_kind):
    """Re-proposing only stale vertices must not change a single decision."""
    for seed in range(3):
        g = random_graph(500, 2500, seed=seed)
        lmax = lmax_of(g, h.k)
        start = (random_balanced(g.n, h.k, seed) if start_kind == "random"
                 else np.zeros(g.n, np.int32))
        fast = refine(g, start, h.k, lmax, h, seed=seed)
        full = refine(g, start, h.k, lmax, h, seed=seed, incremental=False)
        np.testing.assert_array_equal(fast[0], full[0])
        assert fast[1] == full[1]
