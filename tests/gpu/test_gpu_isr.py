"""GPU independent-set refinement (kernels/refinement/isr_gpu.py) against the CPU twin
(kernels/refinement/isr_cpu.py)."""
import functools
import math

import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.kernels.refinement import isr_cpu, jet_cpu

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

#: (prefix, dist): cut mode (k = 8) and the 4:8:6 hierarchy (k = 192).
MODES = {
    "cut": (np.array([8]), np.array([2.0])),
    "tree": (np.array([4, 32, 192]), np.array([1.0, 10.0, 100.0])),
}


def weighted_graph(n, m, seed, float_weights):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 7 if float_weights else rng.integers(1, 9, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 4, n))


def hub_graph(seed):
    """Sparse random graph plus a vertex adjacent to all others (large hash table)."""
    rng = np.random.default_rng(seed)
    n = 1500
    src = np.concatenate((rng.integers(0, n, 4000), np.zeros(n - 1, dtype=np.int64)))
    dst = np.concatenate((rng.integers(0, n, 4000), np.arange(1, n)))
    return CommGraph.from_edges(src, dst, rng.integers(1, 4, src.size), n=n)


GRAPHS = {
    "grid": lambda: grid_graph((48, 40)),
    "rgg": lambda: random_geometric_graph(2500, seed=1),
    "delaunay": lambda: delaunay_graph(2500, seed=2),
    "rand_int": lambda: weighted_graph(1500, 9000, 3, False),
    "rand_float": lambda: weighted_graph(1500, 9000, 4, True),
    "hub": lambda: hub_graph(5),
}
INT_GRAPHS = ["grid", "rgg", "delaunay", "rand_int"]


@functools.lru_cache(maxsize=None)
def graph(name):
    return GRAPHS[name]()


def dev(g):
    return cp.asarray(g.xadj), cp.asarray(g.adjncy), cp.asarray(g.adjwgt), cp.asarray(g.vwgt)


def random_balanced(n, k, seed):
    return np.random.default_rng(seed).permutation(np.arange(n) % k).astype(np.int32)


def weight_ranges(g, k):
    cum = np.cumsum(g.vwgt) - 1
    return (cum * k // int(g.vwgt.sum())).astype(np.int32)


def start_and_limit(g, k, kind, eps=0.03):
    """A start partition and a limit that admits it."""
    part = random_balanced(g.n, k, 7) if kind == "random" else weight_ranges(g, k)
    lmax = math.ceil((1 + eps) * int(g.vwgt.sum()) / k)
    return part, max(lmax, int(jet_cpu.block_weights(part, g.vwgt, k).max()))


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


# ------------------------------------------------------------------ one step
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_candidates_are_bit_identical(name, mode):
    """Destinations, the very same float gains, and the independent set."""
    from procmap.kernels.refinement import isr_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part, lmax = start_and_limit(g, k, "random")
    bw = jet_cpu.block_weights(part, g.vwgt, k)
    dest, gain, sel = isr_cpu.isr_candidates(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                             prefix, dist, step=5, seed=3)
    gg = isr_gpu.DeviceGraph(*dev(g), prefix, dist)
    isr = isr_gpu.ISRStep(gg, k)
    # the GPU derives the step's key on the device from the seed and the step number
    isr.candidates(gg, cp.asarray(part), cp.asarray(bw), k, lmax, 3, cp.asarray([5]))
    np.testing.assert_array_equal(isr.dest.get(), dest)
    np.testing.assert_array_equal(bits(isr.gain.get()), bits(gain))
    np.testing.assert_array_equal(isr.sel.get(), sel)
    assert sel.sum() > 0


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_consecutive_steps_are_bit_identical(name, mode):
    """Four steps, each from the previous step's result: the same moves, targets and
    gains in the same order."""
    from procmap.kernels.refinement import isr_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part, lmax = start_and_limit(g, k, "random")
    xadj, adjncy, adjwgt, vwgt = dev(g)
    for step in range(4):
        want = isr_cpu.isr_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, dist,
                                 step=step, seed=1)
        dpart = cp.asarray(part)
        got = isr_gpu.isr_moves(xadj, adjncy, adjwgt, vwgt, dpart, k, lmax, cp.asarray(prefix),
                                dist, step=step, seed=1)
        np.testing.assert_array_equal(dpart.get(), part)
        assert got[0].dtype == cp.int32 and got[1].dtype == cp.int32
        np.testing.assert_array_equal(got[0].get(), want[0])
        np.testing.assert_array_equal(got[1].get(), want[1])
        np.testing.assert_array_equal(bits(got[2].get()), bits(want[2]))
        assert want[0].size > 0
        part = part.copy()
        part[want[0]] = want[1]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_selection_from_overloaded_start_matches_cpu(mode):
    """Blocks above lmax before the first move (with and without moves of their own)
    make the prefixes before their repair infeasible, on both devices."""
    from procmap.kernels.refinement import isr_gpu
    g = graph("delaunay")
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part = random_balanced(g.n, k, 2)
    lmax = int(jet_cpu.block_weights(part, g.vwgt, k).max())
    part[:4] = 0  # block 0 a little over
    want = isr_cpu.isr_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, dist)
    got = isr_gpu.isr_moves(*dev(g), cp.asarray(part), k, lmax, prefix, dist)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x.get(), y)


def test_prefix_selection_on_synthetic_moves():
    """The event-based selection (sorts, prefix sums, difference array) against the CPU's
    sequential scan on random move lists, non-monotone feasibility included."""
    from procmap.kernels.refinement import isr_gpu
    rng = np.random.default_rng(0)
    seen = set()
    for trial in range(15):
        n = int(rng.integers(20, 300))
        k = int(rng.integers(2, 10))
        xadj = np.zeros(n + 1, np.int64)  # no edges: candidates are set by hand
        vwgt = rng.integers(1, 5, n)
        part = rng.integers(0, k, n).astype(np.int32)
        dest = ((part + rng.integers(1, k, n)) % k).astype(np.int32)
        sel = (rng.random(n) < 0.6).astype(np.uint8)
        gain = rng.integers(1, 6, n).astype(np.float64)  # many ties: id order matters
        bw = jet_cpu.block_weights(part, vwgt, k)
        lmax = int(bw.max()) + (-2, -1, 0, 1, 3)[trial % 5]  # some blocks start overloaded
        ids = np.flatnonzero(sel)
        ids = ids[np.lexsort((ids, -gain[ids]))]
        want = isr_cpu.longest_feasible_prefix(part[ids], dest[ids], vwgt[ids], bw, lmax) + 1
        seen.add("none" if want == 0 else "all" if want == ids.size else "part")
        gg = isr_gpu.DeviceGraph(cp.asarray(xadj), cp.zeros(0, cp.int32), cp.zeros(0, cp.int64),
                            cp.asarray(vwgt), np.array([k]), np.array([1.0]))
        isr = isr_gpu.ISRStep(gg, k)
        isr.dest[...] = cp.asarray(dest)
        isr.gain[...] = cp.asarray(gain)
        isr.sel[...] = cp.asarray(sel)
        target = cp.full(n, -1, cp.int32)
        isr.select(gg, cp.asarray(part), cp.asarray(bw), k, lmax, target)
        assert int(isr.jstar[0]) == want, trial
        np.testing.assert_array_equal(isr.order[:want].get(), ids[:want])
        expect = np.full(n, -1, np.int32)
        expect[ids[:want]] = dest[ids[:want]]
        np.testing.assert_array_equal(target.get(), expect)
    assert seen == {"none", "part", "all"}


# ------------------------------------------------------------------ refinement loop
@pytest.mark.parametrize("name", INT_GRAPHS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_refine_from_balanced_start_is_bit_identical(name, mode):
    from procmap.kernels.refinement import isr_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part, lmax = start_and_limit(g, k, "random")
    want = isr_cpu.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                         prefix, dist, seed=4)
    dpart = cp.asarray(part)
    got = isr_gpu.isr_refine_with_stats(*dev(g), dpart, k, lmax, cp.asarray(prefix),
                                        cp.asarray(dist), seed=4)
    np.testing.assert_array_equal(dpart.get(), part)
    assert got[0].dtype == cp.int32
    np.testing.assert_array_equal(got[0].get(), want[0])
    assert got[1] == want[1]
    assert got[2] == want[2]
    assert want[2]["isr_moves"] > 0


def test_isr_refine_matches_cpu_to_convergence():
    """phi = 1: hundreds of steps until no candidate is left, still bit-identical."""
    from procmap.kernels.refinement import isr_gpu
    g = graph("rgg")
    prefix, dist = MODES["tree"]
    part, lmax = start_and_limit(g, 192, "random")
    want = isr_cpu.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 192, lmax, prefix, dist,
                              phi=1.0)
    got = isr_gpu.isr_refine(*dev(g), cp.asarray(part), 192, lmax, prefix, dist, phi=1.0)
    np.testing.assert_array_equal(got[0].get(), want[0])
    assert got[1] == want[1]


def skewed(g, k):
    part = weight_ranges(g, k)
    part[: g.n // 4] = 0
    return part


@pytest.mark.parametrize("name", ["grid", "rgg", "rand_int", "rand_float"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["random", "skewed"])
def test_refine_validity(name, mode, kind):
    """Balanced whenever the CPU balances, the reported cost is the partition's, never
    worse than a balanced start, and bit-identical when no strong step ran."""
    from procmap.kernels.refinement import isr_gpu
    g = graph(name)
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    lmax = math.ceil(1.03 * int(g.vwgt.sum()) / k)
    part = random_balanced(g.n, k, 7) if kind == "random" else skewed(g, k)
    want = isr_cpu.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                         prefix, dist)
    got_part, got_cost, got_stats = isr_gpu.isr_refine_with_stats(*dev(g), cp.asarray(part), k,
                                                                  lmax, prefix, dist)
    host = got_part.get()
    assert host.min() >= 0 and host.max() < k
    maxw = int(jet_cpu.block_weights(host, g.vwgt, k).max())
    if int(jet_cpu.block_weights(want[0], g.vwgt, k).max()) <= lmax:
        assert maxw <= lmax
    fresh = jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, host, prefix, dist)
    if g.adjwgt.dtype.kind == "f":
        assert got_cost == pytest.approx(fresh, rel=1e-12)
    else:
        assert got_cost == fresh
    start_maxw = int(jet_cpu.block_weights(part, g.vwgt, k).max())
    if start_maxw <= lmax:
        assert got_cost <= jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, part, prefix, dist) + 1e-9
    if g.adjwgt.dtype.kind != "f" and want[2]["strong_steps"] == 0 \
            and got_stats["strong_steps"] == 0:
        np.testing.assert_array_equal(host, want[0])
        assert got_cost == want[1] and got_stats == want[2]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_iteration_cap_matches_cpu(mode, monkeypatch):
    """HARD_CAP ends the loop on the device (loop_control's max_rounds) after the very
    iteration where the CPU loop stops."""
    from procmap.kernels.refinement import isr_gpu
    g = graph("rgg")
    prefix, dist = MODES[mode]
    k = int(prefix[-1])
    part, lmax = start_and_limit(g, k, "random")
    monkeypatch.setattr(isr_cpu, "HARD_CAP", 5)
    monkeypatch.setattr(isr_gpu, "HARD_CAP", 5)
    want = isr_cpu.isr_refine_with_stats(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                         prefix, dist, phi=1.0, max_iters=100)
    got = isr_gpu.isr_refine_with_stats(*dev(g), cp.asarray(part), k, lmax, prefix, dist,
                                        phi=1.0, max_iters=100)
    assert got[2]["iterations"] == 5
    np.testing.assert_array_equal(got[0].get(), want[0])
    assert got[1] == want[1] and got[2] == want[2]


def test_refine_is_deterministic_and_leaves_input():
    from procmap.kernels.refinement import isr_gpu
    g = graph("rand_float")
    prefix, dist = MODES["tree"]
    part = cp.asarray(skewed(g, 192))
    keep = part.copy()
    lmax = math.ceil(1.03 * int(g.vwgt.sum()) / 192)
    a = isr_gpu.isr_refine(*dev(g), part, 192, lmax, prefix, dist, seed=3)
    b = isr_gpu.isr_refine(*dev(g), part, 192, lmax, prefix, dist, seed=3)
    np.testing.assert_array_equal(a[0].get(), b[0].get())
    assert a[1] == b[1]
    np.testing.assert_array_equal(part.get(), keep.get())


def test_trivial_cases():
    from procmap.kernels.refinement import isr_gpu
    g = grid_graph((6, 5))
    xadj, adjncy, adjwgt, vwgt = dev(g)
    part = cp.zeros(g.n, cp.int32)
    got, c = isr_gpu.isr_refine(xadj, adjncy, adjwgt, vwgt, part, 1, g.n, [1], [1.0])
    np.testing.assert_array_equal(got.get(), np.zeros(g.n))
    assert c == 0.0 and got is not part
    with pytest.raises(ValueError):
        isr_gpu.isr_refine(xadj, adjncy, adjwgt, vwgt, part, 4, g.n, [2], [1.0])
    with pytest.raises(ValueError):
        isr_gpu.isr_refine(xadj, adjncy, adjwgt, vwgt, part, 2, g.n, [2], [1.0], phi=1.5)
    assert isr_gpu.step_key is isr_cpu.step_key and isr_gpu.HARD_CAP == isr_cpu.HARD_CAP
