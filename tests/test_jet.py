"""Jet refinement kernels: gains, balance guarantees, cost bookkeeping, determinism."""
import math

import numba
import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import grid_graph, random_geometric_graph
from procmap.kernels.refinement import jet_cpu as jet
from procmap.kernels.common_cpu import group_table, level_index, num_chunks, table_level
from procmap.kernels.objective.objective_cpu import level_traffic
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
    cut_mode = prefix.size == 1
    # filter ratio 1: in cut mode nearly every vertex with a neighbour block proposes
    dest, gain = jet.lp_proposals(g.xadj, g.adjncy, g.adjwgt, part, k, prefix, dist,
                                  filter_ratio=1.0)
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


# ------------------------------------------------------------------ compiled loop vs references
def geometric_graph(n, seed, float_weights=False):
    """A random geometric graph (ids follow the points: block ranges are good
    partitions), with random vertex weights and optionally float edge weights."""
    base = random_geometric_graph(n, seed=seed)
    src = np.repeat(np.arange(n), np.diff(base.xadj))
    one = src < base.adjncy
    rng = np.random.default_rng(seed)
    w = rng.random(one.sum()) * 5 if float_weights else rng.integers(1, 6, one.sum())
    return CommGraph.from_edges(src[one], base.adjncy[one], w, n=n, vwgt=rng.integers(1, 4, n))


def noisy_blocks(n, k, seed, noise=0.05):
    """Id-range blocks with a few vertices elsewhere: LP rounds then move few vertices."""
    rng = np.random.default_rng(seed)
    part = (np.arange(n) * k // n).astype(np.int32)
    flip = rng.random(n) < noise
    part[flip] = rng.integers(0, k, flip.sum())
    return part


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8])
def test_kept_proposals_equal_full_reevaluation_in_every_iteration(h, float_weights):
    """The loop's LP rounds keep their proposals, re-propose only the stale vertices and
    run the afterburner near them only; ``incremental=False`` re-proposes and judges
    every vertex every round. After every iteration (``cap``), across rebalancing
    moves (an overloaded start) and pass restarts with falling, repeated and rising
    filter ratios, both must hold the same partition, cost and counts; on the thread
    pool and serially."""
    g = geometric_graph(4000, seed=5, float_weights=float_weights)
    k = h.k
    prefix, dist = h.prefix_sizes, np.asarray(h.distances)
    lmax = lmax_of(g, k)
    starts = [noisy_blocks(g.n, k, 2)]        # LP rounds then move few vertices
    skewed = noisy_blocks(g.n, k, 3)
    skewed[(skewed == 1) & (np.arange(g.n) % 2 == 0)] = 0
    starts.append(skewed)                     # rebalancing first
    ratios = (0.85, 0.5, 0.5, 0.9, 0.1)
    old = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            for start in starts:
                lp_moves = rebalance_moves = 0
                for cap in (1, 2, 3, 5, 8, 13, 21, 34, None):
                    runs = [jet.refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, k, lmax,
                                       prefix, dist, ratios, max_iters=4, phi=0.999,
                                       max_weak=2, seed=1, incremental=incremental, cap=cap)
                            for incremental in (True, False)]
                    (part, value, counts), (full_part, full_value, full_counts) = runs
                    np.testing.assert_array_equal(part, full_part)
                    assert value == full_value and counts == full_counts
                    lp_moves = counts["step_moves"]
                    rebalance_moves = max(rebalance_moves, counts["rebalance_moves"])
                assert lp_moves > 100
        assert rebalance_moves > 0
    finally:
        numba.set_num_threads(old)


@pytest.mark.parametrize("prefix", [[4], [2, 4, 8], [3, 6], [4, 32, 192]])
def test_group_table_levels_match_level_index(prefix):
    grp = group_table(np.asarray(prefix))
    prefix = np.asarray(prefix, dtype=np.int64)
    for p in range(prefix[-1]):
        for q in range(0, prefix[-1], 7 if prefix[-1] > 50 else 1):
            assert table_level(p, q, grp) == level_index(p, q, prefix) or p == q


def chunk_deltas(g, part, prefix, moves, target, nchunks):
    """Traffic change per level of each chunk of ``moves`` (moved at once), summed in
    the documented order: move by move, each move's edges in CSR order, the old
    level's entry decreased before the new one's increased. A pair with one moving end
    counts twice (it is seen from that end only)."""
    def level(p, q):
        return 0 if p == q else level_index(p, q, prefix) + 1

    rows = np.zeros((nchunks, prefix.size + 1), dtype=np.asarray(g.adjwgt).dtype)
    m = moves.size
    for c in range(nchunks):
        idx, val = [], []
        for u in moves[c * m // nchunks:(c + 1) * m // nchunks]:
            for e in range(g.xadj[u], g.xadj[u + 1]):
                v = g.adjncy[e]
                new_v, f = (target[v], 1) if target[v] >= 0 else (part[v], 2)
                old_l, new_l = level(part[u], part[v]), level(target[u], new_v)
                if old_l != new_l:
                    w = g.adjwgt[e] * f
                    idx += [old_l, new_l]
                    val += [-w, w]
        np.add.at(rows[c], np.array(idx, dtype=np.int64), np.array(val, dtype=rows.dtype))
    return rows


@pytest.mark.parametrize("float_weights", [False, True])
def test_apply_moves_sums_chunks_like_numpy(float_weights):
    """Traffic deltas: the chunk sums are added in NumPy's order, bit for bit, and
    the traffic is the objective kernel's for the new partition."""
    g = random_graph(9000, 40000, seed=8, float_weights=float_weights)
    k, prefix = 8, np.array([2, 4, 8])
    part = random_balanced(g.n, k, 1)
    rng = np.random.default_rng(3)
    moves = np.flatnonzero(rng.random(g.n) < 0.6).astype(np.int32)  # several chunks
    target = np.full(g.n, -1, np.int32)
    target[moves] = rng.integers(0, k, moves.size)
    traffic = level_traffic(g.xadj, g.adjncy, g.adjwgt, part, prefix)
    nchunks = num_chunks(moves.size, k)
    assert nchunks > 2
    want = traffic + chunk_deltas(g, part, prefix, moves, target, nchunks).sum(axis=0)
    new, bw = part.copy(), jet.block_weights(part, g.vwgt, k)
    jet.apply_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, new, prefix, k, moves, target, bw,
                    traffic)
    np.testing.assert_array_equal(traffic.view(np.int64), want.view(np.int64))
    np.testing.assert_array_equal(new[moves], target[moves])
    np.testing.assert_array_equal(bw, jet.block_weights(new, g.vwgt, k))
    fresh = level_traffic(g.xadj, g.adjncy, g.adjwgt, new, prefix)
    if float_weights:
        np.testing.assert_allclose(traffic, fresh, rtol=1e-12)
    else:
        np.testing.assert_array_equal(traffic, fresh)


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8])
@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two Numba threads")
def test_thread_pool_and_serial_paths_agree(h, float_weights):
    """Kernels of several chunks run on the thread pool (several threads) or serially
    in the caller (one thread): the same partitions and the very same float costs
    either way."""
    g = random_graph(10000, 50000, seed=4, float_weights=float_weights)
    lmax = lmax_of(g, h.k)
    starts = [random_balanced(g.n, h.k, 1), np.zeros(g.n, np.int32)]
    runs = {}
    old = numba.get_num_threads()
    try:
        for par in (False, True):
            numba.set_num_threads(2 if par else 1)
            for i, start in enumerate(starts):
                runs[par, i] = refine(g, start, h.k, lmax, h, seed=2)
                runs[par, i, "ultra"] = jet.ultra_refine(
                    g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, h.k, lmax, h.prefix_sizes,
                    np.asarray(h.distances), filter_ratios=(0.7, 0.3), seed=2)
    finally:
        numba.set_num_threads(old)
    for key, (part, value) in runs.items():
        if key[0]:
            ref_part, ref_value = runs[(False,) + key[1:]]
            np.testing.assert_array_equal(part, ref_part)
            assert value == ref_value


@pytest.mark.parametrize("ratios", [jet.ULTRA_FILTER_RATIOS[::4], (0.3, 0.6, 0.6, 0.1, 0.9)])
@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8])
def test_ultra_refine_equals_chained_jet_refine(h, float_weights, ratios):
    """ultra_refine carries traffic and proposals from pass to pass; the result must
    be that of separate jet_refine calls (falling, rising and repeated ratios)."""
    for seed in range(2):
        g = random_graph(700, 3000, seed=seed, float_weights=float_weights)
        lmax = lmax_of(g, h.k)
        for start in (random_balanced(g.n, h.k, seed), np.zeros(g.n, np.int32)):
            part, value = start, None
            for ratio in ratios:
                part, value = refine(g, part, h.k, lmax, h, filter_ratio=ratio, max_iters=4,
                                     seed=seed)
            got = jet.ultra_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, h.k, lmax,
                                   h.prefix_sizes, np.asarray(h.distances),
                                   filter_ratios=ratios, max_iters=4, seed=seed)
            np.testing.assert_array_equal(got[0], part)
            assert got[1] == value


@pytest.mark.parametrize("h", [None, "4:2"])
def test_start_patience_ends_a_refinement_that_finds_nothing(h):
    """``start_iters``: until an iteration makes progress, that many iterations end the
    loop; once one has, ``max_iters`` applies. A converged partition gains nothing, so
    a polish of it stops after ``start_iters`` iterations; a random start progresses at
    once and refines exactly as without the rule."""
    g = random_geometric_graph(3000, seed=4)
    prefix, dist = (np.array([8]), np.array([1.0])) if h is None else (
        Hierarchy.parse(h).prefix_sizes, np.array([1.0, 10.0]))
    k = int(prefix[-1])
    lmax = lmax_of(g, k)
    start = random_balanced(g.n, k, 2)
    args = (g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    plain, plain_cost, _ = jet.refine(*args, start, k, lmax, prefix, dist, (0.25,), max_iters=30,
                                      phi=1.0, max_weak=2, seed=1)
    ruled, ruled_cost, _ = jet.refine(*args, start, k, lmax, prefix, dist, (0.25,), max_iters=30,
                                      phi=1.0, max_weak=2, seed=1, start_iters=3)
    np.testing.assert_array_equal(ruled, plain)
    assert ruled_cost == plain_cost
    # from the converged partition: nothing improves, so 3 iterations, not 30
    again, again_cost, counts = jet.refine(*args, plain, k, lmax, prefix, dist, (0.25,),
                                           max_iters=30, phi=1.0, max_weak=2, seed=1,
                                           start_iters=3)
    _, full_cost, full = jet.refine(*args, plain, k, lmax, prefix, dist, (0.25,),
                                    max_iters=30, phi=1.0, max_weak=2, seed=1)
    assert again_cost <= plain_cost
    if again_cost == plain_cost:  # found nothing: the start patience ended it
        assert counts["iterations"] <= 3 < full["iterations"]
    else:  # it progressed: then the rule changes nothing
        assert (again_cost, counts) == (full_cost, full)


def test_rounds_that_move_thousands_of_vertices_keep_every_stale_proposal():
    """From a random start on a random graph, rounds move thousands of vertices with
    long rows: the dirty list is then rebuilt from flags set in parallel
    (``jet_cpu._settle``). The incremental loop must still re-propose every stale
    vertex (the same partition, cost and counts as re-proposing all), with one thread
    (the serial push) and with two."""
    rng = np.random.default_rng(7)
    n = 20_000
    src, dst = rng.integers(0, n, 8 * n), rng.integers(0, n, 8 * n)
    g = CommGraph.from_edges(src, dst, rng.integers(1, 5, src.size), n=n)
    k = 8
    start = random_balanced(n, k, 2)
    lmax = lmax_of(g, k)
    runs = {}
    old = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            for incremental in (True, False):
                runs[threads, incremental] = jet.refine(
                    g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, k, lmax, [k], [1.0], (0.25,),
                    max_iters=4, phi=0.999, max_weak=2, seed=1, incremental=incremental)
    finally:
        numba.set_num_threads(old)
    part, value, counts = runs[1, True]
    assert counts["step_moves"] > 4 * 2048  # rounds of more than one chunk of moves
    for other, other_value, other_counts in runs.values():
        np.testing.assert_array_equal(other, part)
        assert other_value == value and other_counts == counts
