"""Jet refinement kernels: gains, balance guarantees, cost bookkeeping, determinism."""
import math

import numba
import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import grid_graph, random_geometric_graph
from procmap.kernels.refinement import jet_cpu as jet
from procmap.kernels.common_cpu import group_table, level_index, level_tables, mix64, table_level
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
    grp, delta = level_tables(prefix, dist)
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


def prepared(g, part, h):
    """The compiled loop's inputs and a fresh state for ``part``."""
    gg, cur = jet._setup(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, h.k, h.prefix_sizes,
                         np.asarray(h.distances), 0.999)
    traffic = jet._traffic(gg.xadj, gg.adjncy, gg.adjwgt, cur, gg.prefix, h.k)
    return gg, cur.copy(), traffic, jet._new_state(g.n, h.k, traffic)


@pytest.mark.parametrize("par", [False, True])
@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8])
def test_fused_lp_rounds_match_jet_lp(h, float_weights, par):
    """Each compiled LP round (kept proposals, afterburner near the re-proposed
    vertices only) moves exactly what a full :func:`jet_lp` with the same locks
    moves, across foreign moves (as rebalancing makes) and pass restarts."""
    g = geometric_graph(4000, seed=5, float_weights=float_weights)
    k = h.k
    prefix, dist = h.prefix_sizes, np.asarray(h.distances)
    gg, cur, traffic, st = prepared(g, noisy_blocks(g.n, k, 2), h)
    best = cur.copy()
    bw = jet.block_weights(cur, g.vwgt, k)
    locked = np.zeros(g.n, bool)
    rng = np.random.default_rng(0)
    ratios = iter([0.5, 0.5, 0.9, 0.1])
    ratio = 0.85
    lp_moves = 0
    for step in range(36):
        if step % 9 == 8:    # next pass: back to the snapshot, no locks, next ratio
            new_ratio = next(ratios)
            jet._restart(gg.xadj, gg.adjncy, cur, best, st,
                         jet._stale_proposals(gg, ratio, new_ratio))
            np.testing.assert_array_equal(cur, best)
            bw = jet.block_weights(cur, g.vwgt, k)
            traffic = jet._traffic(gg.xadj, gg.adjncy, gg.adjwgt, cur, gg.prefix, k)
            locked[:] = False
            ratio = new_ratio
        if step % 4 == 3:    # foreign moves: locks stay, proposals around them go stale
            moves = np.sort(rng.choice(g.n, 40, replace=False)).astype(np.int32)
            st.target[moves] = (cur[moves] + rng.integers(1, k, moves.size)) % k
        else:
            want, targets = jet.jet_lp(g.xadj, g.adjncy, g.adjwgt, cur, k, prefix, dist,
                                       locked=locked, filter_ratio=ratio)
            m = jet._lp_round(gg, cur, k, ratio, True, par, st)
            moves = st.moves[:max(m, 0)].copy()
            np.testing.assert_array_equal(moves, want)
            np.testing.assert_array_equal(st.target[moves], targets)
            locked[:] = False
            locked[moves] = True
            lp_moves += moves.size
        jet._apply_moves(gg.xadj, gg.adjncy, gg.adjwgt, gg.vwgt, cur, gg.grp, k, moves,
                         st.target, bw, traffic, st.rows, par)
        jet._settle(gg.xadj, gg.adjncy, moves, st)
        assert (st.target == -1).all()
        if step % 3 == 0:
            jet._snapshot(best, cur, st)
            np.testing.assert_array_equal(best, cur)
    assert lp_moves > 100
    np.testing.assert_array_equal(bw, jet.block_weights(cur, g.vwgt, k))
    fresh = jet._traffic(gg.xadj, gg.adjncy, gg.adjwgt, cur, gg.prefix, k)
    np.testing.assert_allclose(traffic, fresh, rtol=1e-12)


@pytest.mark.parametrize("prefix", [[4], [2, 4, 8], [3, 6], [4, 32, 192]])
def test_group_table_levels_match_level_index(prefix):
    grp = group_table(np.asarray(prefix))
    prefix = np.asarray(prefix, dtype=np.int64)
    for p in range(prefix[-1]):
        for q in range(0, prefix[-1], 7 if prefix[-1] > 50 else 1):
            assert table_level(p, q, grp) == level_index(p, q, prefix) or p == q


@pytest.mark.parametrize("float_weights", [False, True])
def test_apply_sums_chunks_like_numpy(float_weights):
    """Traffic deltas: the chunk sums are added in NumPy's order, bit for bit, and
    the traffic is the objective kernel's for the new partition."""
    g = random_graph(9000, 40000, seed=8, float_weights=float_weights)
    k, prefix = 8, np.array([2, 4, 8])
    part = random_balanced(g.n, k, 1)
    rng = np.random.default_rng(3)
    moves = np.flatnonzero(rng.random(g.n) < 0.6).astype(np.int32)  # several chunks
    target = np.full(g.n, -1, np.int32)
    target[moves] = rng.integers(0, k, moves.size)
    traffic = jet._traffic(g.xadj, g.adjncy, g.adjwgt, part, prefix, k)
    nchunks = jet._num_chunks(moves.size, k)
    assert nchunks > 2
    out = np.zeros((nchunks, traffic.size), dtype=traffic.dtype)
    jet._move_delta(g.xadj, g.adjncy, g.adjwgt, part, group_table(prefix), moves, target,
                    nchunks, out)
    want = traffic + out.sum(axis=0)
    new, bw = part.copy(), jet.block_weights(part, g.vwgt, k)
    jet._apply(g.xadj, g.adjncy, g.adjwgt, g.vwgt, new, prefix, k, moves, target, bw, traffic)
    np.testing.assert_array_equal(traffic.view(np.int64), want.view(np.int64))
    np.testing.assert_array_equal(bw, jet.block_weights(new, g.vwgt, k))
    fresh = jet._traffic(g.xadj, g.adjncy, g.adjwgt, new, prefix, k)
    if float_weights:
        np.testing.assert_allclose(traffic, fresh, rtol=1e-12)
    else:
        np.testing.assert_array_equal(traffic, fresh)


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8])
def test_thread_pool_and_serial_paths_agree(h, float_weights, monkeypatch):
    """Kernels of several chunks run on the thread pool or serially in the caller:
    the same partitions and the very same float costs either way."""
    g = random_graph(10000, 50000, seed=4, float_weights=float_weights)
    lmax = lmax_of(g, h.k)
    starts = [random_balanced(g.n, h.k, 1), np.zeros(g.n, np.int32)]
    runs = {}
    for par in (False, True):
        monkeypatch.setattr(jet, "_parallel", lambda: par)
        for i, start in enumerate(starts):
            runs[par, i] = refine(g, start, h.k, lmax, h, seed=2)
            runs[par, i, "ultra"] = jet.ultra_refine(
                g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, h.k, lmax, h.prefix_sizes,
                np.asarray(h.distances), filter_ratios=(0.7, 0.3), seed=2)
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


def weak_reference(g, part, k, lmax, prefix, bw, seed):
    """Weak rebalancing with the NumPy glue it had before moving into Numba."""
    adjwgt = g.adjwgt.astype(np.float64)
    opt = float(bw.sum()) / k
    sigma = max(0.99 * lmax, lmax - 100.0)
    dest_ok = (bw < sigma).astype(np.uint8)
    valid_cum = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(dest_ok, out=valid_cum[1:])
    valid_ids = np.flatnonzero(dest_ok).astype(np.int32)
    heavy = 1.5 * (bw - opt)
    dest = np.empty(g.n, np.int32)
    bucket = np.empty(g.n, np.int32)
    jet._rebalance_propose(g.xadj, g.adjncy, adjwgt, g.vwgt, part, k, bw, lmax, heavy, dest_ok,
                           True, prefix, valid_cum, valid_ids, jet._seed_key(seed),
                           jet._num_chunks(g.n, k), dest, bucket)
    selected = np.empty(g.n, np.uint8)
    jet._select_prefix(part, g.vwgt, dest, bucket, bw, lmax, k, jet.NUM_BUCKETS, selected)
    return np.flatnonzero(selected).astype(np.int32), dest


def strong_reference(g, part, k, lmax, prefix, bw):
    """Strong rebalancing with the NumPy glue it had before moving into Numba."""
    adjwgt = g.adjwgt.astype(np.float64)
    opt = float(bw.sum()) / k
    excess = int(np.maximum(bw - lmax, 0).sum())
    limit = min(int(lmax), max(int(math.floor(opt)) + 1, int(math.floor(0.99 * lmax))))
    limits = ([limit] if limit < lmax else []) + [int(lmax)]
    target = np.full(g.n, -1, dtype=np.int32)
    for limit in limits:
        rem = np.where(bw < limit, limit - bw, 0).astype(np.int64)
        if rem.sum() < excess and limit < lmax:
            continue
        max_rem = int(rem.max(initial=0))
        if max_rem == 0:
            continue
        dest, bucket = np.empty(g.n, np.int32), np.empty(g.n, np.int32)
        jet._rebalance_propose(g.xadj, g.adjncy, adjwgt, g.vwgt, part, k, bw, lmax,
                               np.full(k, max_rem + 1.0), (rem > 0).astype(np.uint8), False,
                               prefix, np.zeros(k + 1, np.int64), np.zeros(0, np.int32),
                               np.uint64(0), jet._num_chunks(g.n, k), dest, bucket)
        selected = np.empty(g.n, np.uint8)
        jet._select_prefix(part, g.vwgt, dest, bucket, bw, lmax, k, jet.NUM_BUCKETS, selected)
        if jet._strong_assign(part, g.vwgt, dest, bucket, selected, rem, prefix, jet.NUM_BUCKETS,
                              target):
            return np.flatnonzero(target >= 0).astype(np.int32), target
    return np.empty(0, dtype=np.int32), target


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("h", [CUT4, TREE8, Hierarchy((3, 2), (2.0, 7.0))])
def test_rebalancers_match_numpy_glue(h, float_weights):
    g = random_graph(2000, 8000, seed=6, float_weights=float_weights)
    k, prefix = h.k, np.asarray(h.prefix_sizes, dtype=np.int64)
    lmax = lmax_of(g, k)
    rng = np.random.default_rng(1)
    for skew in (0.2, 0.6, 1.0):
        part = np.where(rng.random(g.n) < skew, 0, rng.integers(0, k, g.n)).astype(np.int32)
        bw = jet.block_weights(part, g.vwgt, k)
        weak = jet._weak_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, bw, 5)
        for got, want in zip(weak, weak_reference(g, part, k, lmax, prefix, bw, 5)):
            np.testing.assert_array_equal(got, want)
        strong = jet._strong_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, bw)
        for got, want in zip(strong, strong_reference(g, part, k, lmax, prefix, bw)):
            np.testing.assert_array_equal(got, want)
        assert weak[0].size > 0 and strong[0].size > 0


def test_rebalance_proposals_match_definition():
    """Rebalancing proposals from their definition (the interior shortcut included)."""
    g = geometric_graph(1500, seed=3, float_weights=True)
    k, prefix = 4, np.array([2, 4])
    lmax = lmax_of(g, k)
    part = noisy_blocks(g.n, k, 1, noise=0.02)
    part[(part == 1) & (np.arange(g.n) % 3 == 0)] = 0       # block 0 overloaded
    bw = jet.block_weights(part, g.vwgt, k)
    assert bw[0] > lmax
    dest_ok = (bw < lmax).astype(np.uint8)
    valid_cum = np.concatenate(([0], np.cumsum(dest_ok))).astype(np.int64)
    valid_ids = np.flatnonzero(dest_ok).astype(np.int32)
    heavy = np.full(k, 3.0)                                  # weight-3 vertices stay
    dest, bucket = np.empty(g.n, np.int32), np.empty(g.n, np.int32)
    key = jet._seed_key(4)
    jet._rebalance_propose(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, bw, lmax, heavy, dest_ok,
                           True, prefix, valid_cum, valid_ids, key, 1, dest, bucket)
    interior = 0
    for u in range(g.n):
        a = part[u]
        if bw[a] <= lmax or g.vwgt[u] >= 3:
            assert dest[u] == -1 and bucket[u] == 0
            continue
        conn = {}
        for v, w in zip(g.adjncy[g.xadj[u]:g.xadj[u + 1]], g.adjwgt[g.xadj[u]:g.xadj[u + 1]]):
            conn[part[v]] = conn.get(part[v], 0.0) + float(w)
        own = conn.get(a, 0.0)
        options = [(-c, b) for b, c in conn.items() if b != a and dest_ok[b]]
        if options:
            best_c, want = -min(options)[0], min(options)[1]
        else:
            interior += len(conn) <= 1
            best_c, want = 0.0, -1
            for size in prefix:                              # nearest group with room
                lo = a // size * size
                ids = valid_ids[(valid_ids >= lo) & (valid_ids < lo + size)]
                if ids.size:
                    want = ids[int(mix64(np.uint64(u) ^ key) % np.uint64(ids.size))]
                    break
        assert dest[u] == want
        assert bucket[u] == jet._gain_bucket(best_c - own, int(g.vwgt[u]))
    assert interior > 50
