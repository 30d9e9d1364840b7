"""GPU swap refinement (kernels/refinement/swap_gpu.py) against the CPU twin (kernels/refinement/swap_cpu.py)
and against a pure-Python model of its parallel rounds."""
import functools
import struct

import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.refinement import jet_cpu, swap_cpu

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

DIST = np.array([1.0, 10.0, 100.0])
#: 4:8:6 (192 PEs) and 8:32:6 (1536 PEs)
SMALL = np.array([4, 32, 192])
MEDIUM = np.array([8, 256, 1536])


# ------------------------------------------------------------------ problems
def permuted(g, seed):
    """``g`` with its tasks renumbered by a random permutation."""
    perm = np.random.default_rng(seed).permutation(g.n)
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    return CommGraph.from_edges(perm[src], perm[g.adjncy], g.adjwgt, n=g.n, symmetric=True)


def random_graph(n, m, seed, float_weights):
    """Sparse random pattern with integer or float volumes and non-unit task weights
    (ignored by placement, which counts tasks)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 7 if float_weights else rng.integers(1, 9, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 4, n))


def block(n, cap):
    """Tasks in index order over the slots (spread evenly when n < slots)."""
    slots = np.repeat(np.arange(cap.size), cap)
    return slots[np.arange(n) * slots.size // n].astype(np.int32)


def perturbed_block(n, cap, frac, seed):
    """Block placement with a random fraction of the tasks shuffled among themselves."""
    pe = block(n, cap)
    rng = np.random.default_rng(seed)
    idx = rng.choice(n, int(n * frac), replace=False)
    pe[idx] = pe[rng.permutation(idx)]
    return pe


def ones(k):
    return np.ones(k, dtype=np.int64)


CASES = {
    # name: (graph, cap, prefix)
    "stencil192_block": (lambda: grid_graph((8, 6, 4)), lambda: ones(192), SMALL),
    "stencil192_perm": (lambda: permuted(grid_graph((8, 6, 4)), 1), lambda: ones(192), SMALL),
    "stencil1536_block": (lambda: grid_graph((16, 12, 8)), lambda: ones(1536), MEDIUM),
    "stencil1536_perm": (lambda: permuted(grid_graph((16, 12, 8)), 2), lambda: ones(1536), MEDIUM),
    "stencil192_two_slots": (lambda: permuted(grid_graph((8, 6, 4)), 3),
                             lambda: np.full(192, 2, dtype=np.int64), SMALL),
    "stencil1536_irregular": (lambda: permuted(grid_graph((16, 12, 8)), 4),
                              lambda: np.random.default_rng(4).integers(1, 4, 1536), MEDIUM),
    "rand_int": (lambda: random_graph(192, 800, 5, False), lambda: ones(192), SMALL),
    "rand_float": (lambda: random_graph(1536, 6000, 6, True), lambda: ones(1536), MEDIUM),
    "rand_float_fewer_tasks": (lambda: random_graph(1200, 5000, 7, True),
                               lambda: np.random.default_rng(7).integers(0, 3, 1536), MEDIUM),
    "rgg": (lambda: permuted(random_geometric_graph(1536, seed=8), 8), lambda: ones(1536), MEDIUM),
    "delaunay_two_slots": (lambda: permuted(delaunay_graph(1000, seed=9), 9),
                           lambda: np.full(1536, 2, dtype=np.int64), MEDIUM),
}


@functools.lru_cache(maxsize=None)
def case(name):
    """``(graph, cap, prefix, start)``, built once per session (never modified)."""
    make_graph, make_cap, prefix = CASES[name]
    g, cap = make_graph(), np.asarray(make_cap(), dtype=np.int64)
    assert cap.sum() >= g.n
    return g, cap, prefix, block(g.n, cap)


def J(g, pe, prefix):
    return jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, np.asarray(pe, dtype=np.int32), prefix, DIST)


def gpu_refine(g, start, cap, prefix, **kw):
    from procmap.kernels.refinement import swap_gpu

    pe = cp.asarray(start.copy())
    gain = swap_gpu.swap_refine(cp.asarray(g.xadj), cp.asarray(g.adjncy), cp.asarray(g.adjwgt),
                                pe, cp.asarray(cap), prefix, DIST, **kw)
    return cp.asnumpy(pe), gain


def cpu_refine(g, start, cap, prefix, **kw):
    pe = start.copy()
    gain = swap_cpu.swap_refine(g.xadj, g.adjncy, g.adjwgt, pe, cap, prefix, DIST, **kw)
    return pe, gain


def assert_valid(pe, n, cap):
    assert pe.shape == (n,) and pe.dtype == np.int32
    assert pe.min() >= 0 and pe.max() < cap.size
    assert np.all(np.bincount(pe, minlength=cap.size) <= cap)


def assert_gain_matches(g, j0, j1, gain):
    if g.adjwgt.dtype.kind == "i":
        assert j0 - j1 == 2 * gain  # integer volumes and distances: every sum is exact
    else:
        assert j0 - j1 == pytest.approx(2 * gain, rel=1e-12, abs=1e-9 * j0)


# ------------------------------------------------------------------ against the CPU twin
@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_exact_gain_deterministic_and_close_to_cpu(name):
    g, cap, prefix, start = case(name)
    pe, gain = gpu_refine(g, start, cap, prefix)
    assert_valid(pe, g.n, cap)
    j0, j1 = J(g, start, prefix), J(g, pe, prefix)
    assert gain >= 0.0 and j1 <= j0
    assert_gain_matches(g, j0, j1, gain)
    again, gain2 = gpu_refine(g, start, cap, prefix)
    assert np.array_equal(pe, again) and gain == gain2
    cpu_pe, _ = cpu_refine(g, start, cap, prefix)
    assert j1 <= 1.05 * J(g, cpu_pe, prefix)
    if "perm" in name or "rand" in name:
        assert gain > 0.0  # a poor start: there is something to gain


@pytest.mark.parametrize("name", ["stencil192_perm", "stencil1536_irregular", "rand_float",
                                  "rand_float_fewer_tasks"])
def test_converged_result_is_a_local_optimum_of_the_cpu_twin(name):
    """The GPU evaluates every action with the CPU's formulas, so when it stops for
    lack of improving actions the CPU twin finds none either."""
    g, cap, prefix, start = case(name)
    pe, _ = gpu_refine(g, start, cap, prefix, max_passes=1000)
    polished, gain = cpu_refine(g, pe, cap, prefix)
    assert gain == 0.0 and np.array_equal(polished, pe)
    pe2, gain2 = gpu_refine(g, pe, cap, prefix)
    assert gain2 == 0.0 and np.array_equal(pe2, pe)


def test_large_stencil_parallel_rounds():
    """~100k tasks, one per PE, from a block placement with 10% of the tasks shuffled."""
    g = grid_graph((48, 48, 48))
    prefix = np.array([8, 256, g.n])
    cap = ones(g.n)
    start = perturbed_block(g.n, cap, 0.1, 0)
    pe, gain = gpu_refine(g, start, cap, prefix)
    assert_valid(pe, g.n, cap)
    j0, j1 = J(g, start, prefix), J(g, pe, prefix)
    assert_gain_matches(g, j0, j1, gain)
    cpu_pe, _ = cpu_refine(g, start, cap, prefix)
    j_cpu = J(g, cpu_pe, prefix)
    assert j1 <= 1.05 * j_cpu and j0 - j1 >= 0.8 * (j0 - j_cpu)


# ------------------------------------------------------------------ inputs
def test_non_int32_pe_is_written_back_and_numpy_inputs_work():
    from procmap.kernels.refinement import swap_gpu

    g, cap, prefix, start = case("stencil192_perm")
    expected, gain = gpu_refine(g, start, cap, prefix)
    pe = cp.asarray(start.astype(np.int64))
    got = swap_gpu.swap_refine(g.xadj, g.adjncy, g.adjwgt, pe, cap, prefix, DIST)
    assert pe.dtype == cp.int64 and np.array_equal(cp.asnumpy(pe), expected) and got == gain


def test_rejects_overfull_pe_and_handles_trivial_graphs():
    from procmap.kernels.refinement import swap_gpu

    g, cap, prefix, _ = case("stencil192_perm")
    pe = cp.zeros(g.n, dtype=cp.int32)
    with pytest.raises(ValueError):
        swap_gpu.swap_refine(g.xadj, g.adjncy, g.adjwgt, pe, cap, prefix, DIST)
    empty = CommGraph.from_edges([], [], [], n=0)
    assert swap_gpu.swap_refine(empty.xadj, empty.adjncy, empty.adjwgt,
                                cp.zeros(0, dtype=cp.int32), cap, prefix, DIST) == 0.0
    lonely = CommGraph.from_edges([], [], [], n=5)
    pe = cp.arange(5, dtype=cp.int32)
    assert swap_gpu.swap_refine(lonely.xadj, lonely.adjncy, lonely.adjwgt, pe, cap, prefix,
                                DIST) == 0.0
    assert np.array_equal(cp.asnumpy(pe), np.arange(5))


# ------------------------------------------------------------------ the parallel rounds, exactly
M32 = (1 << 32) - 1
M64 = (1 << 64) - 1


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def action_key(gain, u, salt):
    bits = struct.unpack("<Q", struct.pack("<d", gain))[0]
    bits = (~bits & M64) if bits >> 63 else bits | (1 << 63)
    x = (u ^ mix64(salt)) & M32
    x = (x * 0x9E3779B1) & M32
    x ^= x >> 16
    x = (x * 0x85EBCA77) & M32
    x ^= x >> 13
    return (bits >> 32 << 32) | x


class Reference:
    """Pure-Python model of swap_gpu's rounds (the module docstring's steps 1-5)."""

    def __init__(self, g, cap, prefix):
        self.xadj, self.adj = g.xadj.tolist(), g.adjncy.tolist()
        self.w = g.adjwgt.astype(np.float64).tolist()
        self.cap, self.prefix, self.n = cap.tolist(), prefix.tolist(), g.n

    def row(self, u):
        return range(self.xadj[u], self.xadj[u + 1])

    def D(self, p, q):
        if p == q:
            return 0.0
        t = 0
        while p // self.prefix[t] != q // self.prefix[t]:
            t += 1
        return float(DIST[t])

    def cost_at(self, u, q, pe):
        c = 0.0
        for e in self.row(u):
            c += self.w[e] * self.D(q, pe[self.adj[e]])
        return c

    def c_uv(self, u, v):
        for e in self.row(u):
            if self.adj[e] == v:
                return self.w[e]
        return 0.0

    def propose(self, u, pe, on, free, base, min_gain):
        p, best = pe[u], (min_gain, -1, -1)
        seen = set()
        for e in self.row(u):
            q = pe[self.adj[e]]
            if q == p or q in seen:
                continue
            seen.add(q)
            gain_u = base[u] - self.cost_at(u, q, pe)
            options = [(gain_u, -1)] if free[q] > 0 else []
            for v in on[q]:
                gain_v = base[v] - self.cost_at(v, p, pe)
                options.append((gain_u + gain_v - 2.0 * self.c_uv(u, v) * self.D(p, q), v))
            for g, v in options:
                if g > best[0] or (best[1] >= 0 and g == best[0] and (q, v) < best[1:]):
                    best = (g, q, v)
        return best if best[1] >= 0 else None

    def round(self, pe, done, salt, min_gain):
        n = self.n
        counts = np.bincount(pe, minlength=len(self.cap)).tolist()
        free = [c - x for c, x in zip(self.cap, counts)]
        on = [[] for _ in self.cap]
        for u in range(n):
            on[pe[u]].append(u)
        base = [self.cost_at(u, pe[u], pe) for u in range(n)]
        acts = {u: self.propose(u, pe, on, free, base, min_gain)
                for u in range(n) if not done[u] and base[u] != 0.0}
        acts = {u: a for u, a in acts.items() if a is not None}
        key = {u: action_key(a[0], u, salt) for u, a in acts.items()}
        mark = [0] * n
        for u, (_, _, v) in acts.items():
            for x in (u, v) if v >= 0 else (u,):
                mark[x] = max(mark[x], key[u])

        def closed(x):
            return [x] + [self.adj[e] for e in self.row(x)]

        sel = [u for u, (_, _, v) in sorted(acts.items())
               if all(mark[y] <= key[u] for y in closed(u) + (closed(v) if v >= 0 else []))]
        movers = sorted((u for u in sel if acts[u][2] < 0), key=lambda u: -key[u])
        taken = [0] * len(self.cap)
        for u in movers:
            q = acts[u][1]
            taken[q] += 1
            if taken[q] > free[q]:
                sel.remove(u)
        for u in sel:
            _, q, v = acts[u]
            if v >= 0:
                pe[v] = pe[u]
            pe[u] = q
            done[u] = True
        return len(sel), float(np.sum(np.array([acts[u][0] for u in sel], dtype=np.float64)))

    def refine(self, pe, max_passes=20, min_gain=1e-9, rounds_per_pass=64):
        pe = pe.copy()
        total, salt = 0.0, 0
        for _ in range(max_passes):
            done = [False] * self.n
            applied = 0
            for _ in range(rounds_per_pass):
                count, gain = self.round(pe, done, salt, min_gain)
                salt += 1
                if count == 0:
                    break
                applied += count
                total += gain
            if applied == 0:
                break
        return pe, total


@pytest.mark.parametrize("name", ["stencil192_perm", "stencil192_two_slots", "rand_int"])
@pytest.mark.parametrize("max_passes", [1, 20])
def test_rounds_match_python_model_exactly(name, max_passes):
    """Same placement and the very same float gain as the model of the selection rule
    (local maximum of (gain, hash) keys, free-slot limit, passes)."""
    from procmap.kernels.refinement import swap_gpu

    g, cap, prefix, start = case(name)
    ref_pe, ref_gain = Reference(g, cap, prefix).refine(
        start, max_passes=max_passes, rounds_per_pass=swap_gpu.ROUNDS_PER_PASS)
    pe, gain = gpu_refine(g, start, cap, prefix, max_passes=max_passes)
    assert np.array_equal(pe, ref_pe) and gain == ref_gain


def test_python_model_on_irregular_capacities_with_float_weights():
    from procmap.kernels.refinement import swap_gpu

    g = random_graph(150, 500, 11, True)
    cap = np.random.default_rng(11).integers(0, 4, 192).astype(np.int64)
    start = block(g.n, cap)
    ref_pe, ref_gain = Reference(g, cap, SMALL).refine(
        start, rounds_per_pass=swap_gpu.ROUNDS_PER_PASS)
    pe, gain = gpu_refine(g, start, cap, SMALL)
    assert np.array_equal(pe, ref_pe) and gain == ref_gain and gain > 0.0
