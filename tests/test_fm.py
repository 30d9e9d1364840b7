"""k-way FM refinement (kernels/refinement/fm_cpu.py), global passes and localized searches: the
move queue, and what a refinement guarantees: J never rises, falls by exactly twice the
reported gain, no block ends above L_max, the same input gives the same result."""
import functools

import numpy as np
import pytest

from procmap.generators import grid_graph
from procmap.graph import CommGraph
from procmap.kernels.refinement import fm_cpu
from procmap.kernels.common_cpu import distance, group_table, table_distance
from procmap.objective import evaluate
from procmap.topology import Hierarchy


def test_queue_pops_larger_gain_first_then_smaller_vertex():
    rng = np.random.default_rng(3)
    gains = rng.integers(-5, 6, 3000).astype(np.float64)  # many equal gains
    verts = rng.integers(0, 800, 3000)                       # and repeated entries
    heap = np.empty((gains.size, 2))
    size = 0
    popped = []
    for i, (g, v) in enumerate(zip(gains, verts)):
        size = fm_cpu.queue_push(heap, size, g, v)
        if i % 3 == 2:  # interleave pops with pushes
            g0, v0, size = fm_cpu.queue_pop(heap, size)
            popped.append((g0, v0))
    while size:
        g0, v0, size = fm_cpu.queue_pop(heap, size)
        popped.append((g0, v0))
    assert len(popped) == gains.size
    # replay with a sorted list: the same pops, entry for entry
    pending, expected = [], []
    for i, (g, v) in enumerate(zip(gains, verts)):
        pending.append((g, int(v)))
        if i % 3 == 2:
            best = min(pending, key=lambda e: (-e[0], e[1]))
            pending.remove(best)
            expected.append(best)
    expected += sorted(pending, key=lambda e: (-e[0], e[1]))
    assert [(float(g), int(v)) for g, v in popped] == expected


@pytest.mark.parametrize("prefix", [[4], [2, 4, 8], [3, 6], [4, 32, 192]])
def test_table_distance_matches_distance(prefix):
    grp = group_table(np.asarray(prefix))
    prefix = np.asarray(prefix, dtype=np.int64)
    dist = np.arange(1.0, prefix.size + 1) ** 2
    for p in range(0, prefix[-1], 3):
        for q in range(prefix[-1]):
            assert table_distance(p, q, grp, dist) == distance(p, q, prefix, dist)


def _random_graph(n, m, seed, spread=False):
    """A random multigraph's merged edges; ``spread``: float volumes over four orders of
    magnitude (sums that float arithmetic rounds, moved in and out of blocks)."""
    rng = np.random.default_rng(seed)
    w = 10.0 ** rng.uniform(-1, 3, m) if spread else rng.integers(1, 6, m)
    return CommGraph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), w, n=n,
                                vwgt=rng.integers(1, 3, n))


def _hub_graph(n: int, hubs: int, seed: int) -> CommGraph:
    """A few hubs linked to most vertices plus a sparse random rest: a power-law-like
    graph, where every move next to a hub re-evaluates the hub's whole row."""
    rng = np.random.default_rng(seed)
    spokes = rng.integers(hubs, n, 40 * n)
    src = np.concatenate([spokes % hubs, rng.integers(0, n, 3 * n)])
    dst = np.concatenate([spokes, rng.integers(0, n, 3 * n)])
    return CommGraph.from_edges(src, dst, rng.integers(1, 9, src.size), n=n)


GLOBAL = fm_cpu.fm_refine
GLOBAL_CAPPED = functools.partial(fm_cpu.fm_refine, max_work=0.5)
LOCAL_STALL_1 = functools.partial(fm_cpu.local_fm_refine, max_stall=1, max_rounds=3)
LOCAL = functools.partial(fm_cpu.local_fm_refine, max_rounds=3)
LOCAL_STALL_40 = functools.partial(fm_cpu.local_fm_refine, max_stall=40, max_rounds=3)


@pytest.mark.parametrize("refine", [GLOBAL, GLOBAL_CAPPED, LOCAL_STALL_1, LOCAL, LOCAL_STALL_40],
                         ids=["global", "global-capped", "local-stall-1", "local",
                              "local-stall-40"])
@pytest.mark.parametrize("graph, levels, dists", [
    (grid_graph((40, 30)), (4,), (1.0,)),                  # cut mode
    (grid_graph((40, 30)), (2, 2, 3), (1.0, 10.0, 100.0)),
    (grid_graph((12, 10, 8)), (4, 8, 2), (1.0, 10.0, 100.0)),
    (_random_graph(900, 4000, 1), (3, 4), (2.0, 7.0)),
    (_random_graph(400, 16000, 4, spread=True), (2, 3, 2), (1.0, 5.0, 40.0)),
    (_hub_graph(1500, 5, 6), (4, 4), (1.0, 10.0)),
])
def test_fm_lowers_J_by_twice_its_gain_within_lmax(graph, levels, dists, refine):
    h = Hierarchy(levels, dists)
    k = h.k
    # a poor, balanced start: every vertex in a random block (equal counts)
    part = (np.random.default_rng(0).permutation(graph.n) % k).astype(np.int32)
    lmax = int(np.ceil(1.1 * graph.vwgt.sum() / k))
    assert np.bincount(part, weights=graph.vwgt, minlength=k).max() <= lmax
    before = evaluate(graph, h, part).J
    runs = []
    for _ in range(2):
        p = part.copy()
        gain = refine(graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt, p, k, lmax,
                      h.prefix_sizes, np.asarray(dists))
        runs.append((p, gain))
    (p, gain), (p2, gain2) = runs
    after = evaluate(graph, h, p).J
    assert gain > 0 and after < before
    assert after == pytest.approx(before - 2 * gain, rel=1e-12)
    assert np.bincount(p, weights=graph.vwgt, minlength=k).max() <= lmax
    assert np.array_equal(p, p2) and gain == gain2


@pytest.mark.parametrize("shape, levels", [((40, 30), (4,)), ((60, 60), (2, 3)),
                                           ((12, 10, 8), (2, 3))])
def test_local_searches_improve_where_global_fm_has_converged(shape, levels):
    # the point of localized FM: a search keeps its losses in one place, where a
    # following gain can pay them back; global passes stop at these partitions
    g = grid_graph(shape)
    h = Hierarchy(levels, tuple(10.0 ** i for i in range(len(levels))))
    dist = np.asarray(h.distances, dtype=np.float64)
    part = (np.random.default_rng(1).permutation(g.n) % h.k).astype(np.int32)
    lmax = int(np.ceil(1.03 * g.n / h.k))
    fm_cpu.fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, h.k, lmax, h.prefix_sizes, dist,
                     max_passes=100)
    assert fm_cpu.fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part.copy(), h.k, lmax,
                            h.prefix_sizes, dist, max_passes=100) == 0.0  # converged
    before = evaluate(g, h, part).J
    gain = fm_cpu.local_fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, h.k, lmax,
                                  h.prefix_sizes, dist, max_rounds=5)
    assert gain > 0 and evaluate(g, h, part).J == before - 2 * gain
    assert np.bincount(part, minlength=h.k).max() <= lmax


def test_local_fm_without_moves_or_blocks():
    g = grid_graph((5, 5))
    h = Hierarchy((1,), (1.0,))
    p = np.zeros(g.n, dtype=np.int32)
    assert fm_cpu.local_fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, p, 1, g.n, h.prefix_sizes,
                                  np.array([1.0])) == 0.0
    assert not p.any()


def test_local_fm_work_cap_bounds_the_searches():
    # a dense graph, where a search's cost grows with the square of the degree
    g = _random_graph(600, 30000, 5)
    h = Hierarchy((6,), (1.0,))
    part = (np.arange(g.n) % 6).astype(np.int32)
    lmax = int(np.ceil(1.05 * g.vwgt.sum() / 6))
    args = (g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    rest = (6, lmax, h.prefix_sizes, np.array([1.0]))
    none = part.copy()
    assert fm_cpu.local_fm_refine(*args, none, *rest, max_work=0) == 0.0
    assert np.array_equal(none, part)  # no budget: no search
    before = evaluate(g, h, part).J
    results = []
    for cap in (0.5, 0.5, None):
        p = part.copy()
        results.append((fm_cpu.local_fm_refine(*args, p, *rest, max_work=cap), p))
    (capped, p), (again, p2), (free, _) = results
    assert 0 < capped < free
    assert evaluate(g, h, p).J == pytest.approx(before - 2 * capped, rel=1e-12)
    assert np.bincount(p, weights=g.vwgt, minlength=6).max() <= lmax
    assert capped == again and np.array_equal(p, p2)


def _hub_fm_problem():
    """A hub graph on a 4:4 machine from a random start, as ``fm_refine`` takes it:
    ``(graph, hierarchy, start, lmax, graph arrays, (k, lmax, prefix, dist))``."""
    g = _hub_graph(3000, 8, 2)
    h = Hierarchy((4, 4), (1.0, 10.0))
    part = (np.random.default_rng(3).permutation(g.n) % h.k).astype(np.int32)
    lmax = int(np.ceil(1.05 * g.n / h.k))
    args = (g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    rest = (h.k, lmax, h.prefix_sizes, np.asarray(h.distances))
    return g, h, part, lmax, args, rest


def test_global_fm_work_cap_bounds_a_pass_on_hubs():
    g, h, part, lmax, args, rest = _hub_fm_problem()
    none = part.copy()
    assert fm_cpu.fm_refine(*args, none, *rest, max_work=0) == 0.0
    assert np.array_equal(none, part)  # no budget: no move
    before = evaluate(g, h, part).J
    gains = {}
    for cap in (0.2, 2.0, None):
        p = part.copy()
        gains[cap] = fm_cpu.fm_refine(*args, p, *rest, max_passes=1, max_work=cap)
        assert evaluate(g, h, p).J == pytest.approx(before - 2 * gains[cap], rel=1e-12)
        assert np.bincount(p, minlength=h.k).max() <= lmax
    assert 0 < gains[0.2] < gains[None]  # the cap stopped the pass early
    assert gains[0.2] <= gains[2.0] <= gains[None]


def test_global_fm_work_cap_is_shared_by_the_passes_of_a_level():
    """FMContext.max_work caps all passes together: a pass that runs into the cap is the
    last, so on a graph where one pass reaches it, four passes do exactly what one does
    (without the cap, the later passes gain more)."""
    g, h, part, lmax, args, rest = _hub_fm_problem()
    results = {}
    for cap in (0.2, None):
        for passes in (1, 4):
            p = part.copy()
            gain = fm_cpu.fm_refine(*args, p, *rest, max_passes=passes, max_work=cap)
            results[cap, passes] = (gain, p)
    assert results[0.2, 4][0] == results[0.2, 1][0]
    assert np.array_equal(results[0.2, 4][1], results[0.2, 1][1])
    assert results[None, 4][0] > results[None, 1][0]  # uncapped, later passes gain more
