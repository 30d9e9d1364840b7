"""Jet's weak and strong rebalancing on the CPU (Numba): the twin of :mod:`.rebalance_gpu`.

Rebalancing moves the cheapest vertices out of blocks heavier than ``lmax`` (Jet,
Gilbert et al.; GPU-HeiPa, GPU-IM paper section 4.2, Algorithm 5). Both rebalancers
share three steps:

1. **Proposal** (:func:`rebalance_propose`, parallel over vertices): a vertex of an
   overloaded block proposes its best-connected adjacent destination (cut-based loss,
   as GPU-HeiPa), else a fallback, and the loss lands in a log-spaced gain bucket
   (:func:`gain_bucket`).
2. **Selection** (:func:`select_prefix`, two parallel passes over chunks): per
   overloaded block the candidates in ``(bucket, id)`` order whose preceding weight is
   below the block's excess.
3. Weak rebalancing (:func:`weak_moves`) moves the selected vertices to their
   proposals; destinations may overflow. Strong rebalancing (:func:`strong_moves`)
   places them with :func:`strong_assign`, never past a destination's room.

:func:`weak_select` / :func:`strong_select` run the steps on caller-owned arrays; the
CPU Jet loop (:mod:`procmap.kernels.refinement.jet_cpu`, its rebalancing rounds) calls
them compiled. :func:`rebalance_weak` / :func:`rebalance_strong` are the standalone
entry points (``(vertices, targets)`` like ``jet_cpu.jet_lp``).

Determinism: proposals are per vertex (any chunking gives the same arrays), selection
adds integer weights (any chunking selects the same vertices), assignment is a
sequential pass, and the only randomness (the weak rebalancer's fallback block) is
``mix64(u ^ seed_key(seed))``. The GPU twin's proposals, buckets and
weak moves are bit-identical; its strong assignment is a parallel variant
(:mod:`.rebalance_gpu`, step 4).
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..common_cpu import (float_weights, largest, mix64, num_chunks, refinement_inputs,
                          seed_key, use_threads)
from ..objective.objective_cpu import pe_loads

__all__ = ["BUCKET_RATIO", "MID_BUCKET", "NUM_BUCKETS", "gain_bucket", "rebalance_propose",
           "rebalance_strong", "rebalance_weak", "select_prefix", "strong_assign",
           "strong_moves", "strong_select", "weak_moves", "weak_select"]

#: Rebalancing sorts candidate moves approximately into this many gain buckets
#: (Jet / GPU-HeiPa: 50 buckets, loss buckets centred on bucket 25).
NUM_BUCKETS = 50
MID_BUCKET = 25
#: Loss buckets are log-spaced with this ratio (loss per unit of vertex weight).
BUCKET_RATIO = 1.5

_LOG_RATIO = math.log(BUCKET_RATIO)


@nb.njit(inline="always", cache=True)
def gain_bucket(gain, w):
    """Bucket of a rebalancing move of gain ``gain`` (float, edge weight) on a vertex of
    weight ``w``: 0 = positive gain, 1 = zero gain, then losses.

    A loss ``x`` per unit of vertex weight lands in ``MID + ceil(log_1.5 x)``, clamped
    to ``[2, NUM_BUCKETS - 1]``: buckets are finer for small losses, which are the
    ones that get picked when a block needs only a few moves. Dividing by the
    weight prefers heavy vertices that shed a lot of weight per unit of loss.
    """
    if gain > 0.0:
        return 0
    if gain == 0.0:
        return 1
    x = -gain / max(w, 1)
    b = MID_BUCKET + int(math.ceil(math.log(x) / _LOG_RATIO))
    if b < 2:
        return 2
    if b > NUM_BUCKETS - 1:
        return NUM_BUCKETS - 1
    return b


@nb.njit(cache=True, nogil=True)
def _propose_range(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy, dest_ok, fallback,
                   prefix, valid_cum, valid_ids, seed_key, lo, hi, conn, seen, touched, dest,
                   bucket):
    """:func:`rebalance_propose` for the vertices ``lo <= u < hi`` with the caller's
    scratch: ``conn`` all zero (left so), ``seen`` not yet stamped with these ids."""
    nlev = prefix.size
    for u in range(lo, hi):
        dest[u] = -1
        bucket[u] = 0
        a = part[u]
        if bw[a] <= lmax or not vwgt[u] < heavy[a]:
            continue
        # interior vertices (most of an overloaded block) have no adjacent block:
        # sum their weight in edge order (the float conn[a] would get) and skip
        # the scatter
        own = 0.0
        interior = True
        for e in range(xadj[u], xadj[u + 1]):
            if part[adjncy[e]] != a:
                interior = False
                break
            own += float(adjwgt[e])
        best_b = -1
        best_c = 0.0
        if not interior:
            nt = 0
            for e in range(xadj[u], xadj[u + 1]):
                b = part[adjncy[e]]
                if seen[b] != u:
                    seen[b] = u
                    touched[nt] = b
                    nt += 1
                conn[b] += float(adjwgt[e])
            own = conn[a]
            for i in range(nt):
                b = touched[i]
                if b != a and dest_ok[b] and (best_b < 0 or conn[b] > best_c
                                              or (conn[b] == best_c and b < best_b)):
                    best_b = b
                    best_c = conn[b]
            for i in range(nt):
                conn[touched[i]] = 0.0
        if best_b < 0:
            best_c = 0.0
            if fallback:
                for t in range(nlev):
                    size = prefix[t]
                    glo = (a // size) * size
                    cnt = valid_cum[glo + size] - valid_cum[glo]
                    if cnt > 0:
                        h = mix64(np.uint64(u) ^ seed_key)
                        j = np.int64(h % np.uint64(cnt))
                        best_b = valid_ids[valid_cum[glo] + j]
                        break
                if best_b < 0:
                    continue  # no block can take anything
            else:
                best_b = -2
        dest[u] = best_b
        bucket[u] = gain_bucket(best_c - own, vwgt[u])


@nb.njit(parallel=True, cache=True, nogil=True)
def _propose_chunks(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok,
                    fallback, prefix, valid_cum, valid_ids, seed_key, nchunks, dest, bucket):
    """:func:`rebalance_propose` on the thread pool, in ``nchunks`` chunks of vertices."""
    n = part.size
    for c in nb.prange(nchunks):
        conn = np.zeros(k)
        seen = np.full(k, -1, dtype=np.int64)
        touched = np.empty(k, dtype=np.int32)
        _propose_range(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy, dest_ok, fallback,
                       prefix, valid_cum, valid_ids, seed_key, c * n // nchunks,
                       (c + 1) * n // nchunks, conn, seen, touched, dest, bucket)


@nb.njit(cache=True, nogil=True)
def rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok, fallback,
                      prefix, valid_cum, valid_ids, seed_key, par, dest, bucket):
    """Per-vertex move proposal of the rebalancers (cut-based loss, as GPU-HeiPa).

    Inputs: the CSR (``adjwgt`` float64), ``vwgt`` int64, ``part`` int32, ``bw`` the
    int64 block weights, ``lmax`` the block weight limit, per block ``heavy`` (float:
    vertices at least this heavy stay) and ``dest_ok`` (uint8: may receive), the
    hierarchy's ``prefix`` (int64), and for the fallback ``valid_cum`` (int64, ``k + 1``:
    prefix counts of ``dest_ok``), ``valid_ids`` (int32: the blocks with ``dest_ok``)
    and ``seed_key`` (``common_cpu.seed_key``).

    A vertex of an overloaded block with ``vwgt < heavy[block]`` proposes the
    best-connected adjacent block ``b`` with ``dest_ok[b]`` (ties: smallest id). The
    gain is ``conn(b) - conn(own)``. Without such a neighbour block it proposes:
    with ``fallback``, a block with ``dest_ok`` from the nearest level group of its
    own block that holds one (``mix64(u ^ seed_key)`` picks among them); without,
    ``-2`` ("anywhere", assigned later) -- both with gain ``-conn(own)``.
    Writes ``dest[u]`` (int32; -1 marks non-candidates) and ``bucket[u]``, the
    :func:`gain_bucket` of the gain (0 for non-candidates). Runs on the thread pool
    only when ``par`` and there are several chunks; the result is the same either way.
    """
    n = part.size
    nchunks = num_chunks(n, k)
    if par and nchunks > 1:
        _propose_chunks(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok,
                        fallback, prefix, valid_cum, valid_ids, seed_key, nchunks, dest, bucket)
        return
    # proposals are per vertex, so one serial pass equals any chunking
    conn = np.zeros(k)
    seen = np.full(k, -1, dtype=np.int64)
    touched = np.empty(k, dtype=np.int32)
    # np.int64(0), not 0: a literal argument would compile the callee once more
    _propose_range(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy, dest_ok, fallback,
                   prefix, valid_cum, valid_ids, seed_key, np.int64(0), n, conn, seen, touched,
                   dest, bucket)


@nb.njit(cache=True, nogil=True)
def _bucket_weights(part, vwgt, dest, bucket, slot, nbuckets, lo, hi, wsum):
    """``wsum[slot[block] * nbuckets + bucket]`` += the weight of the candidates
    ``lo <= u < hi``."""
    for u in range(lo, hi):
        if dest[u] != -1:
            wsum[slot[part[u]] * nbuckets + bucket[u]] += vwgt[u]


@nb.njit(cache=True, nogil=True)
def _select_range(part, vwgt, dest, bucket, slot, nbuckets, before, excess, lo, hi,
                  running, selected):
    """The selection of ``lo <= u < hi`` given ``running``, the weight of each
    (block, bucket) before ``lo``; returns the number selected."""
    count = 0
    for u in range(lo, hi):
        selected[u] = 0
        if dest[u] == -1:
            continue
        o = slot[part[u]]
        key = o * nbuckets + bucket[u]
        if before[key] + running[key] < excess[o]:
            selected[u] = 1
            count += 1
        running[key] += vwgt[u]
    return count


@nb.njit(parallel=True, cache=True, nogil=True)
def _chunk_bucket_weights(part, vwgt, dest, bucket, slot, nbuckets, wsum):
    """:func:`_bucket_weights` of chunk ``c`` into row ``c`` of ``wsum``, in parallel."""
    n, nchunks = part.size, wsum.shape[0]
    for c in nb.prange(nchunks):
        _bucket_weights(part, vwgt, dest, bucket, slot, nbuckets, c * n // nchunks,
                        (c + 1) * n // nchunks, wsum[c])


@nb.njit(parallel=True, cache=True, nogil=True)
def _chunk_select(part, vwgt, dest, bucket, slot, nbuckets, before, excess, running,
                  selected, counts):
    """:func:`_select_range` of chunk ``c`` from row ``c`` of ``running``, in parallel."""
    n, nchunks = part.size, running.shape[0]
    for c in nb.prange(nchunks):
        counts[c] = _select_range(part, vwgt, dest, bucket, slot, nbuckets, before, excess,
                                  c * n // nchunks, (c + 1) * n // nchunks, running[c],
                                  selected)


@nb.njit(cache=True, nogil=True)
def select_prefix(part, vwgt, dest, bucket, bw, lmax, k, nbuckets, selected, par=False):
    """Per overloaded block, select the candidates that restore its weight.

    Candidates are ordered by (bucket, vertex id); a candidate is selected when the
    weight ordered before it in its block is still below the block's excess
    ``bw - lmax``. O(n + overloaded blocks * buckets); with ``par``, two parallel
    passes over chunks of vertices (the weight per block and bucket of each chunk,
    then the selection of each chunk from the weight of the chunks before it), which
    select exactly what one sequential pass does.
    """
    n = part.size
    slot = np.full(k, -1, dtype=np.int64)
    nover = 0
    for b in range(k):
        if bw[b] > lmax:
            slot[b] = nover
            nover += 1
    keys = nover * nbuckets
    # chunks of at least 32k vertices, at most 64: the per-chunk tables (keys entries)
    # stay small next to the pass over the vertices
    nchunks = min(64, max(1, n // 32768)) if par else 1
    wsum = np.zeros((nchunks, keys), dtype=np.int64)
    if nchunks > 1:
        _chunk_bucket_weights(part, vwgt, dest, bucket, slot, nbuckets, wsum)
    else:
        # np.int64(0), not 0: a literal argument would compile the callee once more
        _bucket_weights(part, vwgt, dest, bucket, slot, nbuckets, np.int64(0), n, wsum[0])
    # running[c]: the weight of each key in the chunks before c; before: the weight of
    # the block's earlier buckets
    running = np.zeros((nchunks, keys), dtype=np.int64)
    total = np.zeros(keys, dtype=np.int64)
    for c in range(nchunks):
        for key in range(keys):
            running[c, key] = total[key]
            total[key] += wsum[c, key]
    before = np.zeros(keys, dtype=np.int64)
    excess = np.zeros(nover, dtype=np.int64)
    for b in range(k):
        o = slot[b]
        if o < 0:
            continue
        excess[o] = bw[b] - lmax
        s = 0
        for j in range(nbuckets):
            before[o * nbuckets + j] = s
            s += total[o * nbuckets + j]
    if nchunks == 1:
        return _select_range(part, vwgt, dest, bucket, slot, nbuckets, before, excess,
                             np.int64(0), n, running[0], selected)
    counts = np.zeros(nchunks, dtype=np.int64)
    _chunk_select(part, vwgt, dest, bucket, slot, nbuckets, before, excess, running,
                  selected, counts)
    return counts.sum()


@nb.njit(cache=True, nogil=True)
def strong_assign(part, vwgt, dest, bucket, selected, rem, prefix, nbuckets, target):
    """Give every selected vertex a destination with room (never past ``rem``).

    Vertices are visited in (bucket, id) order. Pass 1 keeps the preferred,
    connected destination where it still has room. Pass 2 sends the rest to the
    nearest block with room: the level groups around the source block are searched
    from the smallest up (group capacity sums skip full groups; a cursor per group
    makes the scan round-robin and amortised O(1) for unit weights). Vertices that
    fit nowhere stay. Returns the number of moves; ``target[u] = -1`` for no move.
    """
    n = part.size
    k = rem.size
    nlev = prefix.size
    # (bucket, id) order by counting sort over the selected vertices
    cnt = np.zeros(nbuckets + 1, dtype=np.int64)
    for u in range(n):
        target[u] = -1
        if selected[u]:
            cnt[bucket[u] + 1] += 1
    for j in range(nbuckets):
        cnt[j + 1] += cnt[j]
    order = np.empty(cnt[nbuckets], dtype=np.int64)
    for u in range(n):
        if selected[u]:
            order[cnt[bucket[u]]] = u
            cnt[bucket[u]] += 1
    gsum = np.zeros((nlev, k), dtype=np.int64)   # room per level-t group
    cursor = np.zeros((nlev, k), dtype=np.int64)
    for b in range(k):
        if rem[b] > 0:
            for t in range(nlev):
                gsum[t, b // prefix[t]] += rem[b]
    moved = 0
    for i in range(order.size):                  # pass 1: connected destinations
        u = order[i]
        b = dest[u]
        w = vwgt[u]
        if b >= 0 and rem[b] >= w:
            target[u] = b
            rem[b] -= w
            for t in range(nlev):
                gsum[t, b // prefix[t]] -= w
            moved += 1
    for i in range(order.size):                  # pass 2: nearest block with room
        u = order[i]
        if target[u] >= 0:
            continue
        a = part[u]
        w = vwgt[u]
        for t in range(nlev):
            size = prefix[t]
            g = a // size
            if gsum[t, g] < w:
                continue
            found = -1
            start = cursor[t, g]
            for s in range(size):
                off = (start + s) % size
                b = g * size + off
                if rem[b] >= w:
                    found = b
                    cursor[t, g] = off
                    break
            if found >= 0:
                target[u] = found
                rem[found] -= w
                for tt in range(nlev):
                    gsum[tt, found // prefix[tt]] -= w
                moved += 1
                break
    return moved


@nb.njit(cache=True, nogil=True)
def weak_select(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw, seed_key, par, dest,
                bucket, selected):
    """Weak rebalancing (paper Algorithm 5, :func:`rebalance_weak`) on caller-owned
    arrays (``adjwgt`` float64): proposals in ``dest``/``bucket``, the chosen movers
    flagged in ``selected`` (uint8); returns their number."""
    opt = float(bw.sum()) / k
    # Destinations stay below sigma (Jet: 0.99 * Lmax, but at least Lmax - 100) so
    # that a block can take several vertices before it overflows.
    sigma = max(0.99 * lmax, lmax - 100.0)
    dest_ok = np.empty(k, dtype=np.uint8)
    valid_cum = np.zeros(k + 1, dtype=np.int64)
    heavy = np.empty(k)  # Jet: vertices of >= 1.5 (c(block) - c(V)/k) stay
    for b in range(k):
        dest_ok[b] = bw[b] < sigma
        valid_cum[b + 1] = valid_cum[b] + dest_ok[b]
        heavy[b] = 1.5 * (bw[b] - opt)
    valid_ids = np.empty(valid_cum[k], dtype=np.int32)
    for b in range(k):
        if dest_ok[b]:
            valid_ids[valid_cum[b]] = b
    # np.bool_, not a literal: one compiled variant serves both rebalancers
    rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok,
                      np.bool_(True), prefix, valid_cum, valid_ids, seed_key, par, dest, bucket)
    return select_prefix(part, vwgt, dest, bucket, bw, lmax, k, NUM_BUCKETS, selected, par)


@nb.njit(cache=True, nogil=True)
def strong_select(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw, par, dest, bucket,
                  selected, target):
    """Strong rebalancing (:func:`rebalance_strong`) on caller-owned arrays (``adjwgt``
    float64; ``dest``, ``bucket``, ``selected`` scratch): writes ``target`` (-1: stays)
    of every vertex; returns the number of moves."""
    opt = float(bw.sum()) / k
    excess = 0
    for b in range(k):
        excess += max(bw[b] - lmax, 0)
    # Fill destinations up to max(opt + 1, 0.99 Lmax) (Jet), which leaves room for
    # the next LP round; use Lmax itself when that cannot absorb the excess.
    tight = min(lmax, max(int(math.floor(opt)) + 1, int(math.floor(0.99 * lmax))))
    for attempt in range(2):
        limit = tight if attempt == 0 else lmax
        if attempt == 0 and tight >= lmax:
            continue
        rem = np.empty(k, dtype=np.int64)
        for b in range(k):
            rem[b] = limit - bw[b] if bw[b] < limit else 0
        if rem.sum() < excess and limit < lmax:
            continue
        max_rem = largest(rem)
        if max_rem == 0:
            continue
        dest_ok = np.empty(k, dtype=np.uint8)
        for b in range(k):
            dest_ok[b] = rem[b] > 0
        heavy = np.full(k, float(max_rem + 1))  # only vertices that fit somewhere
        rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok,
                          np.bool_(False), prefix, np.zeros(k + 1, dtype=np.int64),
                          np.zeros(0, dtype=np.int32), np.uint64(0), par, dest, bucket)
        select_prefix(part, vwgt, dest, bucket, bw, lmax, k, NUM_BUCKETS, selected, par)
        moved = strong_assign(part, vwgt, dest, bucket, selected, rem, prefix, NUM_BUCKETS,
                              target)
        if moved:
            return moved
    for u in range(target.size):
        target[u] = -1
    return 0


def weak_moves(xadj: np.ndarray, adjncy: np.ndarray, adjwgt: np.ndarray, vwgt: np.ndarray,
               part: np.ndarray, k: int, lmax: int, prefix: np.ndarray, bw: np.ndarray,
               seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Weak rebalancing (paper Algorithm 5, :func:`rebalance_weak`) of ``part`` with block
    weights ``bw``, on arrays of the kernels' dtypes (``common_cpu.refinement_inputs``).

    Returns ``(moves, dest)``: ascending int32 ids of the vertices to move and the full
    int32 proposal array (``dest[u]`` is the destination of every moving ``u``; -1 at
    non-candidates). The GPU twin ``rebalance_gpu.weak_moves`` is bit-identical.
    """
    n = part.size
    dest = np.empty(n, dtype=np.int32)
    bucket = np.empty(n, dtype=np.int32)
    selected = np.empty(n, dtype=np.uint8)
    weak_select(xadj, adjncy, float_weights(adjwgt), vwgt, part, k, lmax, prefix, bw,
                seed_key(seed), use_threads(), dest, bucket, selected)
    return np.flatnonzero(selected).astype(np.int32), dest


def strong_moves(xadj: np.ndarray, adjncy: np.ndarray, adjwgt: np.ndarray, vwgt: np.ndarray,
                 part: np.ndarray, k: int, lmax: int, prefix: np.ndarray,
                 bw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strong rebalancing (:func:`rebalance_strong`) of ``part`` with block weights ``bw``,
    on arrays of the kernels' dtypes (``common_cpu.refinement_inputs``).

    Returns ``(moves, target)``: ascending int32 ids and the full int32 target array
    (-1 at vertices that stay).
    """
    n = part.size
    target = np.full(n, -1, dtype=np.int32)
    strong_select(xadj, adjncy, float_weights(adjwgt), vwgt, part, k, lmax, prefix, bw,
                  use_threads(), np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32),
                  np.empty(n, dtype=np.uint8), target)
    return np.flatnonzero(target >= 0).astype(np.int32), target


def rebalance_weak(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, *,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Jet's weak rebalancing: cheap moves out of overloaded blocks.

    Every vertex of a block heavier than ``lmax`` (and lighter than
    ``1.5 * (c(block) - c(V)/k)``) proposes its best-connected adjacent block below
    ``sigma = max(0.99 Lmax, Lmax - 100)``, else a block below sigma from the
    nearest level group of its block (hash of vertex and ``seed`` among them; in
    cut mode any block). Per block, the lowest-loss proposals (gain buckets, then
    vertex id) covering the excess move. Destinations may end up overloaded.

    Returns ``(vertices, targets)``: ascending int32 ids and their destinations (as
    ``jet_cpu.jet_lp``). ``part`` is not modified.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, _ = refinement_inputs(xadj, adjncy, adjwgt, vwgt,
                                                                    part, prefix, None)
    bw = pe_loads(part, vwgt, int(k))[0]
    moves, dest = weak_moves(xadj, adjncy, adjwgt, vwgt, part, int(k), int(lmax), prefix, bw, seed)
    return moves, dest[moves]


def rebalance_strong(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int,
                     prefix) -> tuple[np.ndarray, np.ndarray]:
    """Jet-style strong rebalancing: restores balance in one step when possible.

    Destinations are the blocks below ``max(opt + 1, 0.99 Lmax)`` (``opt = c(V)/k``;
    ``Lmax`` itself when that is too little room or moves nothing), each with the
    room up to that limit. Vertices of overloaded blocks that fit somewhere are
    bucketed by the cut loss to their best-connected destination (``-conn(own)``
    when none is adjacent), the cheapest covering each block's excess are selected,
    then placed in their connected destination while it has room, else in the
    nearest block with room. No destination is filled past its room, so the total
    overload strictly drops whenever some vertex of an overloaded block fits in
    some other block.

    Returns ``(vertices, targets)``: ascending int32 ids and their destinations (as
    ``jet_cpu.jet_lp``). ``part`` is not modified.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, _ = refinement_inputs(xadj, adjncy, adjwgt, vwgt,
                                                                    part, prefix, None)
    bw = pe_loads(part, vwgt, int(k))[0]
    moves, target = strong_moves(xadj, adjncy, adjwgt, vwgt, part, int(k), int(lmax), prefix, bw)
    return moves, target[moves]
