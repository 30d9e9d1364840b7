"""Independent-set refinement (G-kway ISR, kernels/refinement/isr_cpu.py): exact gains, independence,
prefix balance selection, validity, determinism."""
import inspect
import math

import numba
import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.kernels.refinement import isr_cpu as isr
from procmap.kernels.refinement import jet_cpu as jet

CUT = (np.array([8]), np.array([3.0]))                           # edge cut, k = 8
TREE = (np.array([4, 32, 192]), np.array([1.0, 10.0, 100.0]))    # 4:8:6 hierarchy, k = 192
SMALL_TREE = (np.array([2, 4, 8]), np.array([1.0, 10.0, 100.0]))  # k = 8
MODES = {"cut": CUT, "tree": TREE, "small_tree": SMALL_TREE}


def random_graph(n, m, seed, float_weights=False):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 5 if float_weights else rng.integers(1, 6, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 4, n))


GRAPHS = {
    "grid": lambda: grid_graph((48, 40)),
    "rgg": lambda: random_geometric_graph(2500, seed=1),
    "delaunay": lambda: delaunay_graph(2500, seed=2),
    "rand_int": lambda: random_graph(2000, 9000, 3),
}
_cache = {}


def graph(name):
    if name not in _cache:
        _cache[name] = GRAPHS[name]()
    return _cache[name]


def lmax_of(g, k, eps=0.03):
    return math.ceil((1 + eps) * int(g.vwgt.sum()) / k)


def random_balanced(n, k, seed):
    return np.random.default_rng(seed).permutation(np.arange(n) % k).astype(np.int32)


def weight_ranges(g, k):
    """Contiguous id ranges of (nearly) equal weight: balanced for any vertex weights."""
    cum = np.cumsum(g.vwgt) - 1
    return (cum * k // int(g.vwgt.sum())).astype(np.int32)


def J(g, part, mode):
    prefix, dist = MODES[mode]
    return jet.cost(g.xadj, g.adjncy, g.adjwgt, part, prefix, dist)


def scale(mode):
    """``J`` drops by ``scale * sum(gains)``: both directions of every edge count, and
    cut-mode gains are in edge weight."""
    prefix, dist = MODES[mode]
    return 2.0 * dist[0] if prefix.size == 1 else 2.0


def distance_matrix(prefix, dist):
    k = int(prefix[-1])
    p = np.arange(k)
    D = np.zeros((k, k))
    for t in reversed(range(prefix.size)):  # the smallest common group wins
        D[(p[:, None] // prefix[t]) == (p[None, :] // prefix[t])] = dist[t]
    return D * (p[:, None] != p[None, :])


def moves_of(g, part, mode, lmax, step=0, seed=0):
    prefix, dist = MODES[mode]
    return isr.isr_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, int(prefix[-1]), lmax,
                         prefix, dist, step=step, seed=seed)


def refine(g, part, mode, lmax, **kw):
    prefix, dist = MODES[mode]
    return isr.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, int(prefix[-1]), lmax,
                          prefix, dist, **kw)


def assert_independent(g, moves):
    moving = np.zeros(g.n, bool)
    moving[moves] = True
    for u in moves:
        nbrs = g.adjncy[g.xadj[u]:g.xadj[u + 1]]
        assert not moving[nbrs[nbrs != u]].any(), f"neighbour of {u} moves too"


# ------------------------------------------------------------------ one step
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", ["cut", "tree"])
def test_steps_are_exact_independent_and_balanced(name, mode):
    """Six consecutive steps: J drops by exactly scale * sum(gains) (integer weights),
    no two neighbours move, every gain is positive, the order is (gain desc, id asc),
    and every block stays within lmax."""
    g = graph(name)
    k = int(MODES[mode][0][-1])
    part = random_balanced(g.n, k, 5) if name != "rand_int" else weight_ranges(g, k)
    lmax = max(lmax_of(g, k), int(jet.block_weights(part, g.vwgt, k).max()))
    for step in range(6):
        moves, targets, gains = moves_of(g, part, mode, lmax, step=step)
        assert moves.size > 0
        assert moves.dtype == np.int32 and targets.dtype == np.int32 and gains.dtype == np.float64
        assert (gains > 0).all() and (targets != part[moves]).all()
        key = np.lexsort((moves, -gains))
        np.testing.assert_array_equal(key, np.arange(moves.size))
        assert_independent(g, moves)
        before = J(g, part, mode)
        part = part.copy()
        part[moves] = targets
        assert before - J(g, part, mode) == scale(mode) * gains.sum()
        assert jet.block_weights(part, g.vwgt, k).max() <= lmax


@pytest.mark.parametrize("mode", ["cut", "small_tree"])
def test_candidates_are_best_legal_moves(mode):
    """Brute force: every candidate's destination is its best legal move to an adjacent
    block (gain of equation 1, positive, fits under lmax; ties: smallest block) and
    vertices without one are no candidates. (A non-adjacent block can be better when
    the best adjacent one is full; like G-kway, ISR only looks at adjacent blocks.)"""
    g = random_graph(150, 500, seed=11)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    D = distance_matrix(prefix, dist)
    lmax = lmax_of(g, k, 0.1)
    part = weight_ranges(g, k)
    bw = jet.block_weights(part, g.vwgt, k)
    dest, gains, _ = isr.isr_candidates(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix,
                                        dist)
    unit = dist[0] if prefix.size == 1 else 1.0
    for u in range(g.n):
        a = part[u]
        nbrs = g.adjncy[g.xadj[u]:g.xadj[u + 1]]
        w = g.adjwgt[g.xadj[u]:g.xadj[u + 1]]
        best_b, best_g = -1, 0.0
        for b in sorted(set(part[nbrs].tolist())):
            gain = float(np.sum(w * (D[a, part[nbrs]] - D[b, part[nbrs]]))) / unit
            if b != a and gain > 1e-9 and bw[b] + g.vwgt[u] <= lmax and gain > best_g + 1e-9:
                best_b, best_g = b, gain
        assert dest[u] == best_b, u
        if best_b >= 0:
            assert gains[u] == pytest.approx(best_g)


def test_prefix_selection_takes_the_largest_feasible_prefix():
    """G-kway's Fig. 4 situation: weights 13 and 10, limit 14; feasibility is not
    monotone in the prefix length and the longest feasible prefix (5 moves) wins."""
    src = np.array([1, 0, 1, 1, 0, 1], np.int32)
    dst = 1 - src
    w = np.array([2, 1, 2, 1, 3, 1], np.int64)
    bw = np.array([13, 10], np.int64)
    # after each move: 15 IB, 14 B, 16 IB, 17 IB, 14 B, 15 IB
    assert isr.longest_feasible_prefix(src, dst, w, bw, 14) == 4
    assert isr.longest_feasible_prefix(src[:1], dst[:1], w[:1], bw, 14) == -1


def test_prefix_selection_matches_a_dense_table():
    """Random move lists against the dense k x M formulation of gkway.md 4.3."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        k = int(rng.integers(2, 9))
        m = int(rng.integers(1, 40))
        src = rng.integers(0, k, m).astype(np.int32)
        dst = ((src + rng.integers(1, k, m)) % k).astype(np.int32)
        w = rng.integers(1, 5, m).astype(np.int64)
        bw = rng.integers(5, 15, k).astype(np.int64)
        lmax = int(rng.integers(10, 16))
        delta = np.zeros((k, m), np.int64)
        delta[src, np.arange(m)] -= w
        delta[dst, np.arange(m)] += w
        ok = np.all(np.cumsum(delta, axis=1) + bw[:, None] <= lmax, axis=0)
        want = int(np.flatnonzero(ok).max()) if ok.any() else -1
        assert isr.longest_feasible_prefix(src, dst, w, bw, lmax) == want, trial


def test_first_candidate_always_fits():
    """From a balanced state the best move is legal on its own, so a step with
    candidates always moves something (the loop's termination argument)."""
    g = grid_graph((30, 30))
    lmax = lmax_of(g, 8, 0.0) + 1  # one unit of slack per block
    for seed in range(5):
        part = random_balanced(g.n, 8, seed)
        assert moves_of(g, part, "cut", lmax, seed=seed)[0].size > 0


def test_step_does_not_modify_input_and_hash_changes_with_step():
    g = graph("grid")
    part = random_balanced(g.n, 8, 1)
    keep = part.copy()
    lmax = lmax_of(g, 8)
    a = moves_of(g, part, "cut", lmax, step=0)
    b = moves_of(g, part, "cut", lmax, step=1)
    np.testing.assert_array_equal(part, keep)
    assert not np.array_equal(a[0], b[0])  # another independent set
    c = moves_of(g, part, "cut", lmax, step=0)
    for x, y in zip(a, c):
        np.testing.assert_array_equal(x, y)


# ------------------------------------------------------------------ refinement loop
def test_signature_matches_jet_refine():
    assert inspect.signature(isr.isr_refine).parameters.keys() == \
        inspect.signature(jet.jet_refine).parameters.keys()
    for name, p in inspect.signature(jet.jet_refine).parameters.items():
        assert inspect.signature(isr.isr_refine).parameters[name].default == p.default


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", ["cut", "tree"])
def test_refine_from_balanced_start_never_worsens(name, mode):
    g = graph(name)
    k = int(MODES[mode][0][-1])
    starts = {"random": random_balanced(g.n, k, 2), "ranges": weight_ranges(g, k)}
    for kind, start in starts.items():
        # the limit admits the start (vertex weights 1..3 on rand_int)
        lmax = max(lmax_of(g, k), int(jet.block_weights(start, g.vwgt, k).max()))
        part, value = refine(g, start, mode, lmax)
        assert part.dtype == np.int32 and part is not start
        assert jet.block_weights(part, g.vwgt, k).max() <= lmax
        assert value == J(g, part, mode)
        assert value <= J(g, start, mode)
        if kind == "random":  # much to gain from a random partition
            assert value < 0.8 * J(g, start, mode)


@pytest.mark.parametrize("mode", ["cut", "tree"])
def test_converged_refinement_is_a_local_optimum(mode):
    """With phi = 1 the loop runs until a step finds no candidate: then no vertex has
    a legal positive-gain move, whatever the hash."""
    g = graph("delaunay")
    k = int(MODES[mode][0][-1])
    lmax = lmax_of(g, k)
    part, value, stats = isr.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt,
                                                   random_balanced(g.n, k, 3), k, lmax,
                                                   *MODES[mode], phi=1.0)
    assert stats["isr_steps"] == stats["iterations"] < isr.HARD_CAP
    assert stats["isr_moves"] > 0 and stats["weak_steps"] == stats["strong_steps"] == 0
    for step in (0, 7):
        assert moves_of(g, part, mode, lmax, step=step)[0].size == 0


@pytest.mark.parametrize("mode", ["cut", "tree"])
@pytest.mark.parametrize("kind", ["all_in_one", "skewed"])
def test_imbalanced_start_gets_balanced(mode, kind):
    g = graph("grid")
    k = int(MODES[mode][0][-1])
    lmax = lmax_of(g, k)
    if kind == "all_in_one":
        start = np.zeros(g.n, np.int32)
    else:
        start = random_balanced(g.n, k, 4)
        start[: g.n // 4] = 0
    part, value, stats = isr.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, k,
                                                   lmax, *MODES[mode])
    assert stats["weak_steps"] + stats["strong_steps"] > 0 and stats["isr_steps"] > 0
    assert jet.block_weights(part, g.vwgt, k).max() <= lmax
    assert value == J(g, part, mode)


def test_imbalanced_start_gets_balanced_quickly():
    """Weak and strong rebalancing as in jet_refine: balanced within a few iterations."""
    g = graph("rand_int")
    k = 8
    lmax = lmax_of(g, k)
    start = weight_ranges(g, k)
    start[: g.n // 5] = 0
    p, _, stats = isr.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, k, lmax,
                                            *CUT, max_iters=3)
    assert jet.block_weights(p, g.vwgt, k).max() <= lmax
    assert stats["weak_steps"] <= 2 and stats["strong_steps"] <= 1


def test_float_weights():
    g = random_graph(600, 3000, seed=7, float_weights=True)
    for mode in ("cut", "small_tree"):
        k = 8
        lmax = lmax_of(g, k)
        start = weight_ranges(g, k)
        part, value = refine(g, start, mode, lmax)
        assert value == pytest.approx(J(g, part, mode), rel=1e-12)
        assert value < J(g, start, mode)
        assert jet.block_weights(part, g.vwgt, k).max() <= lmax
        moves, targets, gains = moves_of(g, start, mode, lmax)
        after = start.copy()
        after[moves] = targets
        drop = J(g, start, mode) - J(g, after, mode)
        assert drop == pytest.approx(scale(mode) * gains.sum(), rel=1e-9)


def test_deterministic_across_runs_and_threads():
    g = graph("rgg")
    lmax = lmax_of(g, 192)
    start = random_balanced(g.n, 192, 9)
    start[:200] = 0  # imbalanced: exercises the seeded weak rebalancer too
    runs = []
    old = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            runs.append(refine(g, start, "tree", lmax, seed=3))
    finally:
        numba.set_num_threads(old)
    runs.append(refine(g, start, "tree", lmax, seed=3))
    for part, value in runs[1:]:
        np.testing.assert_array_equal(part, runs[0][0])
        assert value == runs[0][1]


def test_ignored_arguments_and_trivial_cases():
    g = graph("grid")
    lmax = lmax_of(g, 8)
    start = random_balanced(g.n, 8, 6)
    a = refine(g, start, "cut", lmax)
    b = refine(g, start, "cut", lmax, filter_ratio=0.9, incremental=False)
    np.testing.assert_array_equal(a[0], b[0])
    part, value = isr.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, np.zeros(g.n, np.int32), 1,
                                 g.n, [1], [1.0])
    assert value == 0.0 and (part == 0).all()
    with pytest.raises(ValueError):
        isr.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, 8, lmax, [4], [1.0])
    with pytest.raises(ValueError):
        isr.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start, 8, lmax, [8], [1.0], phi=0.0)
