"""GPU twins of Jet's weak and strong rebalancing (kernels/rebalancing/rebalance_gpu.py) against
the CPU twin (kernels/rebalancing/rebalance_cpu.py): bit-identical proposals, buckets and weak
moves; valid, progress-making strong moves that never overfill a destination."""
import functools
import math

import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.common_cpu import seed_key
from procmap.kernels.rebalancing import rebalance_cpu as rb
from procmap.kernels.refinement.jet_cpu import block_weights

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from procmap.kernels import gpu_common as gc  # noqa: E402  (needs CuPy)
from procmap.kernels.rebalancing import rebalance_gpu as rg  # noqa: E402


# ------------------------------------------------------------------ inputs
@functools.lru_cache(maxsize=None)
def graph(name):
    if name == "grid":
        return grid_graph((48, 48))
    if name == "rgg":
        return random_geometric_graph(3000, seed=1)
    if name == "delaunay":
        return delaunay_graph(3000, seed=2)
    if name == "delaunay_big":
        return delaunay_graph(20000, seed=3)
    if name == "random":  # float edge weights, uneven degrees
        rng = np.random.default_rng(4)
        n, m = 2500, 12000
        return CommGraph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m),
                                    rng.random(m) * 5, n=n)
    if name == "hubs":  # 40 vertices of degree ~150: tables beyond LOCAL_TABLE entries
        rng = np.random.default_rng(5)
        n, m, hubs = 2500, 8000, 40
        src = np.concatenate((rng.integers(0, n, m), np.repeat(np.arange(hubs), 150)))
        dst = np.concatenate((rng.integers(0, n, m), rng.integers(0, n, hubs * 150)))
        return CommGraph.from_edges(src, dst, rng.random(src.size) * 5, n=n)
    if name == "hubs_int":  # integer weights, 12 rows above HEAVY_DEGREE (warp-scanned)
        rng = np.random.default_rng(6)
        n, m, hubs = 2500, 8000, 12
        hub_ids = np.arange(hubs) * (n // hubs)  # spread over the blocks of every case
        src = np.concatenate((rng.integers(0, n, m), np.repeat(hub_ids, 900)))
        dst = np.concatenate((rng.integers(0, n, m), rng.integers(0, n, hubs * 900)))
        return CommGraph.from_edges(src, dst, rng.integers(1, 9, src.size), n=n)
    raise ValueError(name)


def vertex_weights(n, kind, seed):
    if kind == "unit":
        return np.ones(n, np.int64)
    return np.random.default_rng(seed).integers(1, 6, n).astype(np.int64)


def overloaded_partition(n, k, seed, kind="scatter"):
    """Contiguous (spatially local) blocks, overloaded in one of two ways.

    ``scatter``: 15% of the vertices jump to a quarter of the blocks, which end up well
    over the limit while the others drop below it. ``strips``: the first half of the
    blocks is 1.4 times too big, so the inner ones have no neighbour block with room
    (their proposals fall back to the level groups, or to -2 in strong mode).
    """
    if kind == "strips":
        size = np.where(np.arange(k) < k // 2, 1.4, 0.6)
        cuts = np.cumsum(size) / size.sum() * n
        return np.searchsorted(cuts, np.arange(n), side="right").astype(np.int32)
    rng = np.random.default_rng(seed)
    part = (np.arange(n) * k // n).astype(np.int32)
    hot = rng.choice(k, size=max(1, k // 4), replace=False).astype(np.int32)
    grab = rng.random(n) < 0.15
    part[grab] = hot[rng.integers(0, hot.size, int(grab.sum()))]
    return part


CASES = [("grid", 8, (8,), "scatter"), ("grid", 8, (2, 8), "scatter"),
         ("rgg", 8, (8,), "scatter"), ("rgg", 8, (2, 8), "scatter"),
         ("delaunay", 8, (2, 8), "scatter"), ("random", 8, (8,), "scatter"),
         ("random", 8, (2, 8), "scatter"), ("delaunay_big", 192, (192,), "scatter"),
         ("delaunay_big", 192, (4, 32, 192), "scatter"),
         ("grid", 8, (8,), "strips"), ("grid", 8, (2, 8), "strips"),
         ("random", 8, (2, 8), "strips"), ("delaunay_big", 192, (4, 32, 192), "strips"),
         ("hubs", 8, (2, 8), "scatter"), ("hubs", 64, (8, 64), "strips"),
         ("hubs_int", 8, (2, 8), "scatter"), ("hubs_int", 64, (8, 64), "strips")]
CASE_IDS = [f"{g}-k{k}-{'x'.join(map(str, p))}-{kind}" for g, k, p, kind in CASES]


class Problem:
    """One rebalancing input, on the host (numpy) and on the device (cupy)."""

    def __init__(self, name, k, prefix, pkind, wkind, seed=0):
        g = graph(name)
        self.n, self.k = g.n, k
        self.xadj = np.ascontiguousarray(g.xadj, np.int64)
        self.adjncy = np.ascontiguousarray(g.adjncy, np.int32)
        self.fwgt = np.ascontiguousarray(g.adjwgt, np.float64)
        self.vwgt = vertex_weights(g.n, wkind, seed + 7)
        self.part = overloaded_partition(g.n, k, seed, pkind)
        self.prefix = np.asarray(prefix, np.int64)
        self.bw = block_weights(self.part, self.vwgt, k)
        self.lmax = math.ceil(1.03 * int(self.vwgt.sum()) / k)
        assert self.bw.max() > self.lmax  # the test needs something to rebalance
        self.d = {name: cp.asarray(getattr(self, name))
                  for name in ("xadj", "adjncy", "fwgt", "vwgt", "part", "prefix", "bw")}

    def cpu_args(self):
        return (self.xadj, self.adjncy, self.fwgt, self.vwgt, self.part, self.k, self.lmax,
                self.prefix, self.bw)

    def gpu_args(self):
        d = self.d
        return (d["xadj"], d["adjncy"], d["fwgt"], d["vwgt"], d["part"], self.k, self.lmax,
                d["prefix"], d["bw"])


@functools.lru_cache(maxsize=None)
def problem(name, k, prefix, pkind, wkind, seed=0):
    return Problem(name, k, prefix, pkind, wkind, seed)


def host(a):
    return cp.asnumpy(a)


# ------------------------------------------------------------------ gain buckets
def test_bucket_table_matches_cpu_bucket():
    thr = rg.bucket_thresholds()
    rng = np.random.default_rng(0)
    xs = [1.5 ** p for p in range(-26, 27)]
    xs += [np.nextafter(x, d) for x in xs for d in (0.0, np.inf)]
    xs += list(rng.integers(1, 300, 2000) / rng.integers(1, 9, 2000))
    xs += list(rng.random(2000) * 50)
    for x in xs:
        assert 2 + int(np.sum(x > thr)) == rb.gain_bucket(-float(x), 1), x


# ------------------------------------------------------------------ proposal
def _proposal_params(p, strong):
    """The CPU's parameters of rebalance_propose in weak or strong mode."""
    k, bw = p.k, p.bw
    if strong:
        rem = np.where(bw < p.lmax, p.lmax - bw, 0).astype(np.int64)
        dest_ok = (rem > 0).astype(np.uint8)
        heavy = np.full(k, rem.max() + 1, np.float64)
        return heavy, dest_ok, False, np.zeros(k + 1, np.int64), np.zeros(0, np.int32), 0
    opt = float(bw.sum()) / k
    dest_ok = (bw < max(0.99 * p.lmax, p.lmax - 100.0)).astype(np.uint8)
    valid_cum = np.concatenate(([0], np.cumsum(dest_ok))).astype(np.int64)
    valid_ids = np.flatnonzero(dest_ok).astype(np.int32)
    return 1.5 * (bw - opt), dest_ok, True, valid_cum, valid_ids, 5


@pytest.mark.parametrize("strong", [False, True], ids=["weak", "strong"])
@pytest.mark.parametrize("wkind", ["unit", "random"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_propose_is_bit_identical(case, wkind, strong):
    p = problem(*case, wkind)
    heavy, dest_ok, fallback, valid_cum, valid_ids, seed = _proposal_params(p, strong)
    n, key = p.n, seed_key(seed)
    dest = np.empty(n, np.int32)
    bucket = np.empty(n, np.int32)
    rb.rebalance_propose(p.xadj, p.adjncy, p.fwgt, p.vwgt, p.part, p.k, p.bw, p.lmax, heavy,
                         dest_ok, fallback, p.prefix, valid_cum, valid_ids, key, True, dest,
                         bucket)
    d = p.d
    g_dest, g_bucket = rg.rebalance_propose(d["xadj"], d["adjncy"], d["fwgt"], d["vwgt"],
                                            d["part"], d["bw"], p.lmax, cp.asarray(heavy),
                                            cp.asarray(dest_ok), d["prefix"],
                                            cp.asarray(valid_cum), cp.asarray(valid_ids), key,
                                            fallback)
    assert np.count_nonzero(dest != -1) > 0
    if case[0] == "hubs":  # some candidates use the global scratch table
        big = np.diff(p.xadj) > gc.LOCAL_TABLE
        assert np.count_nonzero(dest[big] != -1) > 0
    if case[0] == "hubs_int":  # some candidates are rows a whole warp scans (int64 below)
        big = np.diff(p.xadj) > 512  # HEAVY_DEGREE, cuda/conn_table.cuh
        assert np.count_nonzero(dest[big] != -1) > 0
    np.testing.assert_array_equal(host(g_dest), dest)
    np.testing.assert_array_equal(host(g_bucket), bucket)
    if not np.array_equal(p.fwgt, np.round(p.fwgt)):
        return
    # integer weights given as int64 are read as the same doubles (weight_at, common.cuh)
    iw = cp.asarray(p.fwgt.astype(np.int64))
    i_dest, i_bucket = rg.rebalance_propose(d["xadj"], d["adjncy"], iw, d["vwgt"], d["part"],
                                            d["bw"], p.lmax, cp.asarray(heavy),
                                            cp.asarray(dest_ok), d["prefix"],
                                            cp.asarray(valid_cum), cp.asarray(valid_ids), key,
                                            fallback)
    np.testing.assert_array_equal(host(i_dest), dest)
    np.testing.assert_array_equal(host(i_bucket), bucket)


# ------------------------------------------------------------------ weak
@pytest.mark.parametrize("wkind", ["unit", "random"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_weak_step_without_sorting_is_bit_identical(case, wkind):
    """WeakStep (the captured loop's weak iteration: fixed sizes, chunked in-order
    selection) writes exactly the CPU's weak moves into the target array."""
    p = problem(*case, wkind)
    d = p.d
    step = rg.WeakStep(p.n, p.k)
    table = gc.TableScratch(d["xadj"], 1)
    for seed in (0, 3):
        moves, dest = rb.weak_moves(*p.cpu_args(), seed)
        target = cp.full(p.n, -1, dtype=cp.int32)
        step.enqueue(d["xadj"], d["adjncy"], d["fwgt"], d["vwgt"], d["part"], d["bw"], p.lmax,
                     d["prefix"], seed, table, target, None)
        want = np.full(p.n, -1, np.int32)
        want[moves] = dest[moves]
        assert moves.size > 0
        np.testing.assert_array_equal(host(target), want)


@pytest.mark.parametrize("wkind", ["unit", "random"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_weak_moves_are_bit_identical(case, wkind):
    p = problem(*case, wkind)
    for seed in (0, 3):
        moves, dest = rb.weak_moves(*p.cpu_args(), seed)
        g_moves, g_dest = rg.weak_moves(*p.gpu_args(), seed)
        assert moves.size > 0
        assert g_moves.dtype == cp.int32 and g_dest.dtype == cp.int32
        np.testing.assert_array_equal(host(g_moves), moves)
        np.testing.assert_array_equal(host(g_dest), dest)


def test_rebalance_weak_wrapper_matches_cpu():
    g = graph("rgg")
    k, prefix = 8, [2, 8]
    vwgt = vertex_weights(g.n, "random", 1)
    part = overloaded_partition(g.n, k, 5)
    lmax = math.ceil(1.03 * int(vwgt.sum()) / k)
    moves, targets = rb.rebalance_weak(g.xadj, g.adjncy, g.adjwgt, vwgt, part, k, lmax, prefix,
                                       seed=9)
    g_moves, g_targets = rg.rebalance_weak(g.xadj, g.adjncy, g.adjwgt, vwgt, part, k, lmax,
                                           prefix, seed=9)
    np.testing.assert_array_equal(host(g_moves), moves)
    np.testing.assert_array_equal(host(g_targets), targets)


# ------------------------------------------------------------------ strong
def _check_valid(p, moves, target, bw):
    """Moves ascending and unique, out of overloaded blocks, to other blocks; target -1
    elsewhere. Returns the block weights after the moves."""
    assert np.all(np.diff(moves) > 0)
    assert np.all(target[moves] >= 0) and np.all(target[moves] != p.part[moves])
    stay = np.ones(p.n, bool)
    stay[moves] = False
    assert np.all(target[stay] == -1)
    assert np.all(bw[p.part[moves]] > p.lmax)
    new = p.part.copy()
    new[moves] = target[moves]
    return block_weights(new, p.vwgt, p.k)


def _overload(bw, lmax):
    return int(np.maximum(bw - lmax, 0).sum())


@pytest.mark.parametrize("wkind", ["unit", "random"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_strong_moves_valid_progress_and_balance(case, wkind):
    p = problem(*case, wkind)
    moves, target = rb.strong_moves(*p.cpu_args())
    g_moves, g_target = rg.strong_moves(*p.gpu_args())
    g_moves, g_target = host(g_moves), host(g_target)
    assert g_moves.dtype == np.int32 and g_target.dtype == np.int32
    after_cpu = _check_valid(p, moves, target, p.bw)
    after = _check_valid(p, g_moves, g_target, p.bw)
    incoming = after > p.bw
    assert np.all(after[incoming] <= p.lmax)  # no destination filled past the limit
    if moves.size:
        assert _overload(after, p.lmax) < _overload(p.bw, p.lmax)
    if after_cpu.max() <= p.lmax:
        assert after.max() <= p.lmax
    again_moves, again_target = rg.strong_moves(*p.gpu_args())  # deterministic
    np.testing.assert_array_equal(host(again_moves), g_moves)
    np.testing.assert_array_equal(host(again_target), g_target)


def _cpu_selection(p, rem):
    """The CPU's strong-mode proposal and selection for room ``rem``."""
    n, k = p.n, p.k
    dest = np.empty(n, np.int32)
    bucket = np.empty(n, np.int32)
    rb.rebalance_propose(p.xadj, p.adjncy, p.fwgt, p.vwgt, p.part, k, p.bw, p.lmax,
                         np.full(k, rem.max() + 1, np.float64), (rem > 0).astype(np.uint8),
                         False, p.prefix, np.zeros(k + 1, np.int64), np.zeros(0, np.int32),
                         np.uint64(0), True, dest, bucket)
    selected = np.empty(n, np.uint8)
    rb.select_prefix(p.part, p.vwgt, dest, bucket, p.bw, p.lmax, k, rb.NUM_BUCKETS, selected)
    return dest, bucket, selected


@pytest.mark.parametrize("wkind", ["unit", "random"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_strong_assign_respects_room(case, wkind):
    p = problem(*case, wkind)
    limit = min(p.lmax, max(int(math.floor(p.bw.sum() / p.k)) + 1,
                            int(math.floor(0.99 * p.lmax))))
    rem = np.where(p.bw < limit, limit - p.bw, 0).astype(np.int64)
    dest, bucket, selected = _cpu_selection(p, rem)
    chosen = np.flatnonzero(selected)
    # selection on the device is the CPU's
    g_chosen = rg.select_prefix(p.d["part"], p.d["vwgt"], cp.asarray(dest), cp.asarray(bucket),
                                p.d["bw"], p.lmax)
    np.testing.assert_array_equal(host(g_chosen), chosen)
    cpu_target = np.empty(p.n, np.int32)
    cpu_moved = rb.strong_assign(p.part, p.vwgt, dest, bucket, selected, rem.copy(), p.prefix,
                                 rb.NUM_BUCKETS, cpu_target)
    g_rem = cp.asarray(rem.copy())  # (a copy even where asarray would not make one)
    g_target = cp.zeros(p.n, cp.int32)
    moved = rg.strong_assign(p.d["part"], p.d["vwgt"], cp.asarray(dest), cp.asarray(bucket),
                             g_chosen, g_rem, [int(s) for s in p.prefix], g_target)
    target = host(g_target)
    movers = np.flatnonzero(target >= 0)
    assert moved == movers.size and moved > 0
    assert np.all(np.isin(movers, chosen))
    incoming = np.bincount(target[movers], weights=p.vwgt[movers], minlength=p.k)
    assert np.all(incoming <= rem)                            # never past the room
    np.testing.assert_array_equal(host(g_rem), rem - incoming.astype(np.int64))
    if cpu_moved:
        assert moved > 0
    if wkind == "unit":
        # pass 1 equals the CPU's: per preferred block, the first rem[block] vertices
        # in (bucket, id) order. A vertex turned away found its block full, so pass 2
        # cannot put it there either: target == dest marks exactly the pass-1 moves.
        pref = chosen[dest[chosen] >= 0]
        order = np.lexsort((pref, bucket[pref], dest[pref]))
        pref, blocks = pref[order], dest[pref[order]]
        start = np.searchsorted(blocks, blocks, side="left")
        expected = pref[np.arange(pref.size) - start < rem[blocks]]
        expected = np.sort(expected)
        np.testing.assert_array_equal(np.flatnonzero((target >= 0) & (target == dest)), expected)
        np.testing.assert_array_equal(np.flatnonzero((cpu_target >= 0) & (cpu_target == dest)),
                                      expected)
        assert moved == cpu_moved  # unit weights: both place min(selected, room) per level


def test_strong_moves_heavy_vertex_when_only_that_fits():
    # block 0 is one over the limit and holds only weight-3 vertices (the CPU test's case)
    g = CommGraph.from_edges([0, 1, 2, 3, 4], [1, 2, 3, 4, 5], n=6, vwgt=[3, 3, 3, 1, 1, 1])
    part = np.array([0, 0, 0, 1, 1, 1], np.int32)
    moves, targets = rg.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, 8, [2])
    new = part.copy()
    new[host(moves)] = host(targets)
    assert block_weights(new, g.vwgt, 2).max() <= 8


def test_straddling_vertex_still_moves():
    # block weights 10, 8, 6 with lmax 9: rooms 0, 1, 3. The weight-2 vertex (not adjacent
    # to a block with room) straddles rooms 1 and 3 in the layout; the slot layout
    # (W = 2: slots 0 and 1) sends it to block 2, like the CPU's first fit
    g = CommGraph.from_edges([0, 2, 3], [1, 3, 4], n=5, vwgt=[2, 8, 8, 3, 3])
    part = np.array([0, 0, 1, 2, 2], np.int32)
    moves, targets = rg.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 3, 9, [3])
    cpu_moves, cpu_targets = rb.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 3, 9,
                                                 [3])
    np.testing.assert_array_equal(host(moves), cpu_moves)
    np.testing.assert_array_equal(host(targets), cpu_targets)


def test_balanced_input_moves_nothing():
    g = grid_graph((20, 20))
    k = 4
    part = (np.arange(g.n) * k // g.n).astype(np.int32)
    lmax = math.ceil(1.03 * g.n / k)
    for fn in (rg.rebalance_weak, rg.rebalance_strong):
        moves, targets = fn(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, [k])
        assert moves.size == 0 and targets.size == 0


def test_block_weights_match_cpu():
    p = problem("random", 8, (2, 8), "scatter", "random")
    np.testing.assert_array_equal(host(rg.block_weights(p.d["part"], p.d["vwgt"], p.k)), p.bw)
