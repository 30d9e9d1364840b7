"""Jet's weak and strong rebalancing, the CPU twin (kernels/rebalancing/rebalance_cpu.py):
balance guarantees, the compiled rebalancers against their NumPy glue, proposals from
their definition."""
import math

import numpy as np
import pytest

from procmap.graph import CommGraph
from procmap.generators import grid_graph
from procmap.kernels.common_cpu import mix64, seed_key
from procmap.kernels.rebalancing import rebalance_cpu as rb
from procmap.kernels.refinement.jet_cpu import block_weights
from procmap.topology import Hierarchy
from tests.test_jet import CUT4, TREE8, geometric_graph, lmax_of, noisy_blocks, random_graph


def test_rebalance_strong_restores_balance_in_one_step():
    g = grid_graph((30, 30))
    k = 4
    lmax = lmax_of(g, k)
    rng = np.random.default_rng(0)
    part = np.where(rng.random(g.n) < 0.8, 0, rng.integers(1, k, g.n)).astype(np.int32)
    for prefix in ([4], [2, 4]):
        moves, targets = rb.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                              prefix)
        assert np.all(part[moves] != targets)
        new = part.copy()
        new[moves] = targets
        assert block_weights(new, g.vwgt, k).max() <= lmax


def test_rebalance_strong_moves_heavy_vertex_when_only_that_fits():
    # block 0 is one over the limit and holds only weight-3 vertices: the sole
    # feasible progress moves one of them out, past Jet's heavy-vertex filters.
    g = CommGraph.from_edges([0, 1, 2, 3, 4], [1, 2, 3, 4, 5], n=6, vwgt=[3, 3, 3, 1, 1, 1])
    part = np.array([0, 0, 0, 1, 1, 1], np.int32)
    moves, targets = rb.rebalance_strong(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, 8, [2])
    new = part.copy()
    new[moves] = targets
    assert block_weights(new, g.vwgt, 2).max() <= 8


def test_rebalance_weak_moves_out_of_overloaded_blocks_only():
    g = grid_graph((20, 20))
    k = 4
    lmax = lmax_of(g, k)
    part = (np.arange(g.n) // 20 * 4 // 20).astype(np.int32)  # 4 horizontal strips
    part[(np.arange(g.n) // 20) == 5] = 0                    # strip 0 grows by a row
    bw = block_weights(part, g.vwgt, k)
    moves, targets = rb.rebalance_weak(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, [4])
    assert moves.size >= bw[0] - lmax
    assert np.all(bw[part[moves]] > lmax)
    assert np.all(bw[targets] < lmax)
    new = part.copy()
    new[moves] = targets
    assert block_weights(new, g.vwgt, k)[0] <= lmax


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
    rb.rebalance_propose(g.xadj, g.adjncy, adjwgt, g.vwgt, part, k, bw, lmax, heavy, dest_ok,
                         True, prefix, valid_cum, valid_ids, seed_key(seed), True, dest, bucket)
    selected = np.empty(g.n, np.uint8)
    rb.select_prefix(part, g.vwgt, dest, bucket, bw, lmax, k, rb.NUM_BUCKETS, selected)
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
        rb.rebalance_propose(g.xadj, g.adjncy, adjwgt, g.vwgt, part, k, bw, lmax,
                             np.full(k, max_rem + 1.0), (rem > 0).astype(np.uint8), False,
                             prefix, np.zeros(k + 1, np.int64), np.zeros(0, np.int32),
                             np.uint64(0), True, dest, bucket)
        selected = np.empty(g.n, np.uint8)
        rb.select_prefix(part, g.vwgt, dest, bucket, bw, lmax, k, rb.NUM_BUCKETS, selected)
        if rb.strong_assign(part, g.vwgt, dest, bucket, selected, rem, prefix, rb.NUM_BUCKETS,
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
        bw = block_weights(part, g.vwgt, k)
        weak = rb.weak_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, bw, 5)
        for got, want in zip(weak, weak_reference(g, part, k, lmax, prefix, bw, 5)):
            np.testing.assert_array_equal(got, want)
        strong = rb.strong_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, bw)
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
    bw = block_weights(part, g.vwgt, k)
    assert bw[0] > lmax
    dest_ok = (bw < lmax).astype(np.uint8)
    valid_cum = np.concatenate(([0], np.cumsum(dest_ok))).astype(np.int64)
    valid_ids = np.flatnonzero(dest_ok).astype(np.int32)
    heavy = np.full(k, 3.0)                                  # weight-3 vertices stay
    dest, bucket = np.empty(g.n, np.int32), np.empty(g.n, np.int32)
    key = seed_key(4)
    rb.rebalance_propose(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, bw, lmax, heavy, dest_ok,
                         True, prefix, valid_cum, valid_ids, key, False, dest, bucket)
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
        assert bucket[u] == rb.gain_bucket(best_c - own, int(g.vwgt[u]))
    assert interior > 50


@pytest.mark.parametrize("k", [6, 192])
def test_chunked_selection_selects_what_one_pass_selects(k):
    """select_prefix with ``par`` (chunks of vertices, each starting from the weight of
    the chunks before it) against one sequential pass, with several chunks (n is many
    times the chunk size) and some blocks far over ``lmax``."""
    rng = np.random.default_rng(11)
    n = 600_000
    part = rng.integers(0, k, n).astype(np.int32)
    part[rng.random(n) < 0.3] = 1  # block 1 and a few others heavy
    vwgt = rng.integers(1, 6, n).astype(np.int64)
    bw = np.bincount(part, weights=vwgt, minlength=k).astype(np.int64)
    lmax = int(np.sort(bw)[k // 2])  # about half of the blocks are overloaded
    # candidates (dest >= 0) only in overloaded blocks, as rebalance_propose makes them
    candidate = (rng.random(n) < 0.7) & (bw[part] > lmax)
    dest = np.where(candidate, rng.integers(0, k, n), -1).astype(np.int32)
    bucket = rng.integers(0, rb.NUM_BUCKETS, n).astype(np.int32)
    serial, chunked = np.empty(n, np.uint8), np.empty(n, np.uint8)
    count = rb.select_prefix(part, vwgt, dest, bucket, bw, lmax, k, rb.NUM_BUCKETS, serial,
                             False)
    assert rb.select_prefix(part, vwgt, dest, bucket, bw, lmax, k, rb.NUM_BUCKETS, chunked,
                            True) == count
    np.testing.assert_array_equal(chunked, serial)
    assert 0 < count < np.count_nonzero(dest >= 0)
    assert np.all(dest[serial == 1] >= 0)
    moved = np.bincount(part, weights=vwgt * serial, minlength=k)
    offered = np.bincount(part, weights=vwgt * (dest >= 0), minlength=k)
    over = bw > lmax
    # each overloaded block gives up its excess, or every candidate it has
    assert np.all(moved[over] >= np.minimum(bw[over] - lmax, offered[over]))
