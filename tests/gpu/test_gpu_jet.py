"""GPU Jet label propagation and refinement loop against the CPU twin (kernels/refinement/jet_cpu.py)."""
import functools
import math

import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.kernels.refinement import jet_cpu

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

#: (prefix, dist): cut mode (edge cut, k = 8) and a 3-level hierarchy (k = 192).
MODES = {
    "cut": (np.array([8]), np.array([1.0])),
    "dist": (np.array([4, 32, 192]), np.array([1.0, 10.0, 100.0])),
}


def weighted_graph(n, m, seed, float_weights):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 7 if float_weights else rng.integers(1, 9, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 4, n))


def hub_graph(seed):
    """Sparse random graph plus one vertex adjacent to all others: its connectivity
    table is a hash table with many blocks (no degree caps)."""
    rng = np.random.default_rng(seed)
    n = 2500
    src = np.concatenate((rng.integers(0, n, 6000), np.zeros(n - 1, dtype=np.int64)))
    dst = np.concatenate((rng.integers(0, n, 6000), np.arange(1, n)))
    return CommGraph.from_edges(src, dst, rng.random(src.size) * 3, n=n)


def hubs_int_graph(seed):
    """Integer weights, one vertex adjacent to all others and five of degree about 800:
    rows above HEAVY_DEGREE (cuda/conn_table.cuh), which a whole warp scans."""
    rng = np.random.default_rng(seed)
    n = 2500
    src = np.concatenate((rng.integers(0, n, 8000), np.zeros(n - 1, dtype=np.int64),
                          np.repeat(np.arange(1, 6), 900)))
    dst = np.concatenate((rng.integers(0, n, 8000), np.arange(1, n),
                          rng.integers(0, n, 5 * 900)))
    return CommGraph.from_edges(src, dst, rng.integers(1, 9, src.size), n=n)


#: Rows longer than this are scanned by a whole warp (HEAVY_DEGREE in cuda/conn_table.cuh).
HEAVY_DEGREE = 512

GRAPHS = {
    "grid": lambda: grid_graph((48, 40)),
    "rgg": lambda: random_geometric_graph(3000, seed=1),
    "delaunay": lambda: delaunay_graph(3000, seed=2),
    "rand_int": lambda: weighted_graph(1500, 12000, 3, False),    # degree ~16: linear and hashed tables
    "rand_float": lambda: weighted_graph(1500, 12000, 4, True),
    "hub": lambda: hub_graph(5),
    "hubs_int": lambda: hubs_int_graph(6),
}


@functools.lru_cache(maxsize=None)
def graph(name):
    """Graphs are built once per session (the tests never modify them)."""
    return GRAPHS[name]()


def block_ranges(n, k):
    return (np.arange(n, dtype=np.int64) * k // n).astype(np.int32)


def random_balanced(n, k, seed):
    return np.random.default_rng(seed).permutation(np.arange(n) % k).astype(np.int32)


def start(kind, n, k):
    return block_ranges(n, k) if kind == "ranges" else random_balanced(n, k, 17)


def dev(g):
    return cp.asarray(g.xadj), cp.asarray(g.adjncy), cp.asarray(g.adjwgt), cp.asarray(g.vwgt)


def lmax_of(g, k, eps=0.03):
    return math.ceil((1 + eps) * int(g.vwgt.sum()) / k)


# ------------------------------------------------------------------ label propagation
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["ranges", "random"])
def test_lp_proposals_are_bit_identical(name, mode, kind):
    """First filter: the same destination and the very same float gain per vertex
    (0 for the vertices without a destination on both)."""
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = start(kind, g.n, k)
    locked = (np.random.default_rng(3).random(g.n) < 0.2).astype(np.uint8)
    ratio = 0.75
    dest, gain = jet_cpu.lp_proposals(g.xadj, g.adjncy, g.adjwgt, part, k, prefix, dist,
                                      locked=locked, filter_ratio=ratio)
    g_dest, g_gain = jet_gpu.lp_proposals(*dev(g)[:3], cp.asarray(part), k, prefix, dist,
                                          locked=cp.asarray(locked), filter_ratio=ratio)
    np.testing.assert_array_equal(g_dest.get(), dest)
    np.testing.assert_array_equal(g_gain.get().view(np.int64), gain.view(np.int64))
    if kind == "random":
        assert (dest >= 0).any()
    if name == "hubs_int" and mode == "cut":  # the warp-scanned rows propose too
        heavy = np.diff(g.xadj) > HEAVY_DEGREE
        assert heavy.sum() >= 6 and (dest[heavy] >= 0).any()


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["ranges", "random"])
@pytest.mark.parametrize("locks", [False, True])
def test_jet_lp_matches_cpu(name, mode, kind, locks):
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = start(kind, g.n, k)
    locked = (np.random.default_rng(4).random(g.n) < 0.3) if locks else None
    want_moves, want_targets = jet_cpu.jet_lp(g.xadj, g.adjncy, g.adjwgt, part, k, prefix, dist,
                                              locked=locked)
    xadj, adjncy, adjwgt, _ = dev(g)
    moves, targets = jet_gpu.jet_lp(xadj, adjncy, adjwgt, cp.asarray(part), k, cp.asarray(prefix),
                                    dist, locked=None if locked is None else cp.asarray(locked))
    assert moves.dtype == cp.int32 and targets.dtype == cp.int32
    np.testing.assert_array_equal(moves.get(), want_moves)
    np.testing.assert_array_equal(targets.get(), want_targets)
    if locked is not None:
        assert not locked[moves.get()].any()


@pytest.mark.parametrize("ratio", [0.0, 0.25, 1.0])
def test_jet_lp_cut_filter_ratio_matches_cpu(ratio):
    from procmap.kernels.refinement import jet_gpu
    g = weighted_graph(1200, 9000, 8, False)
    prefix, dist = np.array([6]), np.array([3.0])
    part = random_balanced(g.n, 6, 9)
    want = jet_cpu.jet_lp(g.xadj, g.adjncy, g.adjwgt, part, 6, prefix, dist, filter_ratio=ratio)
    xadj, adjncy, adjwgt, _ = dev(g)
    got = jet_gpu.jet_lp(xadj, adjncy, adjwgt, cp.asarray(part), 6, prefix, dist,
                         filter_ratio=ratio)
    np.testing.assert_array_equal(got[0].get(), want[0])
    np.testing.assert_array_equal(got[1].get(), want[1])


# ------------------------------------------------------------------ objective helpers
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_cost_and_block_weights_match_cpu(name, mode):
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = random_balanced(g.n, k, 5)
    xadj, adjncy, adjwgt, vwgt = dev(g)
    want = jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, part, prefix, dist)
    got = jet_gpu.cost(xadj, adjncy, adjwgt, cp.asarray(part), cp.asarray(prefix), dist)
    assert isinstance(got, float)
    if g.adjwgt.dtype.kind == "f":
        assert got == pytest.approx(want, rel=1e-12)
    else:
        assert got == want
    bw = jet_gpu.block_weights(cp.asarray(part), vwgt, k)
    assert bw.dtype == cp.int64
    np.testing.assert_array_equal(bw.get(), jet_cpu.block_weights(part, g.vwgt, k))


def test_reexports_come_from_the_cpu_module():
    from procmap.kernels.refinement import jet_gpu
    assert jet_gpu.filter_schedule is jet_cpu.filter_schedule
    assert jet_gpu.ULTRA_FILTER_RATIOS is jet_cpu.ULTRA_FILTER_RATIOS


# ------------------------------------------------------------------ refinement loop
@pytest.mark.parametrize("name", ["grid", "rgg", "delaunay", "rand_int", "hubs_int"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_lp_only_refinement_is_bit_identical(name, mode):
    """No block can overload (lmax = total weight): only LP rounds run, and with
    integer weights the GPU loop must reproduce the CPU loop exactly."""
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = random_balanced(g.n, k, 6)
    lmax = int(g.vwgt.sum())
    want_part, want_cost = jet_cpu.jet_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                              prefix, dist)
    got_part, got_cost = jet_gpu.jet_refine(*dev(g), cp.asarray(part), k, lmax, prefix, dist)
    assert got_part.dtype == cp.int32
    np.testing.assert_array_equal(got_part.get(), want_part)
    assert got_cost == want_cost


def skewed(n, k):
    """Block ranges with a quarter of all vertices piled into block 0 (overloaded)."""
    part = block_ranges(n, k)
    part[: n // 4] = 0
    return part


@pytest.mark.parametrize("name", ["grid", "rgg", "delaunay", "rand_int", "rand_float", "hubs_int"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["random", "skewed"])
def test_jet_refine_balance_and_cost_match_cpu(name, mode, kind):
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = random_balanced(g.n, k, 7) if kind == "random" else skewed(g.n, k)
    lmax = lmax_of(g, k)
    want_part, want_cost = jet_cpu.jet_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                              prefix, dist)
    xadj, adjncy, adjwgt, vwgt = dev(g)
    dpart = cp.asarray(part)
    got_part, got_cost = jet_gpu.jet_refine(xadj, adjncy, adjwgt, vwgt, dpart, k, lmax,
                                            cp.asarray(prefix), cp.asarray(dist))
    np.testing.assert_array_equal(dpart.get(), part)   # input untouched
    host = got_part.get()
    assert host.dtype == np.int32 and host.min() >= 0 and host.max() < k
    want_maxw = int(jet_cpu.block_weights(want_part, g.vwgt, k).max())
    got_maxw = int(jet_cpu.block_weights(host, g.vwgt, k).max())
    if want_maxw <= lmax:
        assert got_maxw <= lmax
    # the reported cost is the partition's cost
    fresh = jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, host, prefix, dist)
    assert got_cost == pytest.approx(fresh, rel=1e-12)
    # the rebalancers may pick other moves than the CPU's: same quality on the
    # generator graphs (random graphs with random partitions are too noisy for 3%)
    if got_maxw <= lmax and want_maxw <= lmax and not name.startswith("rand"):
        assert got_cost <= 1.03 * want_cost + 1e-9
    # refinement never makes a balanced start worse
    if int(jet_cpu.block_weights(part, g.vwgt, k).max()) <= lmax:
        assert got_cost <= jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, part, prefix, dist) + 1e-9


def test_jet_refine_is_deterministic():
    from procmap.kernels.refinement import jet_gpu
    g = graph("rand_float")
    prefix, dist = MODES["dist"]
    part = cp.asarray(skewed(g.n, 192))
    args = (*dev(g), part, 192, lmax_of(g, 192), prefix, dist)
    a = jet_gpu.jet_refine(*args, seed=3)
    b = jet_gpu.jet_refine(*args, seed=3)
    np.testing.assert_array_equal(a[0].get(), b[0].get())
    assert a[1] == b[1]


def test_jet_refine_trivial_cases():
    from procmap.kernels.refinement import jet_gpu
    g = grid_graph((6, 5))
    xadj, adjncy, adjwgt, vwgt = dev(g)
    part = cp.zeros(g.n, cp.int32)
    got, c = jet_gpu.jet_refine(xadj, adjncy, adjwgt, vwgt, part, 1, g.n, [1], [1.0])
    np.testing.assert_array_equal(got.get(), np.zeros(g.n))
    assert c == 0.0 and got is not part
    with pytest.raises(ValueError):
        jet_gpu.jet_refine(xadj, adjncy, adjwgt, vwgt, part, 4, g.n, [2], [1.0])
    with pytest.raises(ValueError):
        jet_gpu.jet_refine(xadj, adjncy, adjwgt, vwgt, part, 2, g.n, [2], [1.0], phi=1.5)


@pytest.mark.parametrize("name", ["grid", "rgg", "delaunay", "rand_int", "hubs_int"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["random", "skewed"])
def test_jet_refine_equals_cpu_when_no_strong_step(name, mode, kind):
    """LP rounds and weak rebalancing are bit-identical to the CPU, in the device loop
    too: with strong rebalancing ruled out, the whole loop is (integer weights)."""
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = random_balanced(g.n, k, 7) if kind == "random" else skewed(g.n, k)
    lmax = lmax_of(g, k)
    want = jet_cpu.jet_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, dist,
                              max_weak=1000)
    got = jet_gpu.jet_refine(*dev(g), cp.asarray(part), k, lmax, prefix, dist, max_weak=1000)
    np.testing.assert_array_equal(got[0].get(), want[0])
    assert got[1] == want[1]


def test_ultra_refine_matches_cpu_when_lp_only():
    from procmap.kernels.refinement import jet_gpu
    g = graph("delaunay")
    prefix, dist = MODES["cut"]
    part = random_balanced(g.n, 8, 8)
    lmax = int(g.vwgt.sum())
    ratios = (0.85, 0.45, 0.05)
    want = jet_cpu.ultra_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 8, lmax, prefix, dist,
                                filter_ratios=ratios)
    got = jet_gpu.ultra_refine(*dev(g), cp.asarray(part), 8, lmax, prefix, dist,
                               filter_ratios=ratios)
    np.testing.assert_array_equal(got[0].get(), want[0])
    assert got[1] == want[1]


@pytest.mark.parametrize("name", ["delaunay", "rand_float"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_ultra_refine_passes_equal_separate_jet_refines(name, mode):
    """The passes of ultra_refine share one device state and loop graph; each must
    behave as a fresh jet_refine from the previous result, rebalancing included."""
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = cp.asarray(skewed(g.n, k))  # unbalanced: the first pass rebalances
    lmax = lmax_of(g, k)
    ratios = (0.85, 0.5, 0.05)
    want, want_cost = part, None
    for ratio in ratios:
        want, want_cost = jet_gpu.jet_refine(*dev(g), want, k, lmax, prefix, dist,
                                             filter_ratio=ratio)
    got, got_cost = jet_gpu.ultra_refine(*dev(g), part, k, lmax, prefix, dist,
                                         filter_ratios=ratios)
    np.testing.assert_array_equal(got.get(), want.get())
    assert got_cost == want_cost


@pytest.mark.parametrize("name", ["grid", "rgg", "rand_int", "hubs_int"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("start_iters", [1, 3])
def test_start_patience_is_bit_identical(name, mode, start_iters):
    """The start patience (``start_iters``: iterations without progress that end a loop
    none of whose iterations has progressed yet) stops the GPU loop where it stops the
    CPU loop, from a random start (progress at once) and from a converged partition
    (often none), with integer weights and LP rounds only."""
    from procmap.kernels.refinement import jet_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    lmax = int(g.vwgt.sum())
    part = random_balanced(g.n, k, 6)
    for _ in range(2):  # the random start, then the partition it converged to
        want, want_cost = jet_cpu.jet_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                             prefix, dist, max_iters=20, phi=1.0,
                                             start_iters=start_iters)
        got, got_cost = jet_gpu.jet_refine(*dev(g), cp.asarray(part), k, lmax, prefix, dist,
                                           max_iters=20, phi=1.0, start_iters=start_iters)
        np.testing.assert_array_equal(got.get(), want)
        assert got_cost == want_cost
        part = want
