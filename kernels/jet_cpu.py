"""Jet refinement (CPU twins of the GPU kernels): label propagation and rebalancing.

This is the refinement of Jet (Gilbert et al.) as adapted to process mapping by
GPU-HeiPa (GPU-IM paper, section 4.2, Algorithms 4-6):

* :func:`jet_lp` -- *unconstrained* label propagation. Every unlocked vertex
  proposes its best adjacent block, the proposals pass a filter, an "afterburner"
  re-evaluates each proposal assuming the higher-priority proposals among its
  neighbours were already executed, and the survivors move (balance ignored).
* :func:`rebalance_weak` / :func:`rebalance_strong` -- move the cheapest vertices
  (approximately sorted by loss with log-spaced buckets) out of overloaded blocks.
  Weak may overload a destination; strong never fills a destination past its
  limit, so it always makes progress when a feasible move exists.
* :func:`jet_refine` -- the overall loop (Algorithm 6) that alternates the three
  and keeps the best partition seen; :func:`ultra_refine` chains it over Jet's
  "ultra" schedule of filter ratios.

Objective
---------
Blocks are PEs of a hierarchy given by ``prefix = [P_1, ..., P_l]`` (``P_t`` PEs per
level-t group, ``P_l = k``) and ``dist = [d_1, ..., d_l]``: ``D(p, q) = d_t`` for the
smallest ``t`` with ``p // P_t == q // P_t`` (0 when ``p == q``). The cost is
``J = sum over CSR entries (u, v) of w(u, v) * D(part[u], part[v])`` (each undirected
edge twice). A single level (``prefix = [k]``) is edge-cut partitioning ("cut
mode"): ``J = 2 * d_1 * cut``. Cut mode takes a fast path and Jet's relaxed
negative-gain filter; the general case ("distance mode") uses the gain of paper
equation 1 and accepts non-negative gains only (GPU-HeiPa).

Gains in distance mode
----------------------
Equation 1, ``G(u: a -> b) = sum_c conn(u, c) * (D(a, c) - D(b, c))``, is evaluated
through *group connectivities*: ``W_t(x)`` = edge weight from ``u`` into the
level-t group of block ``x`` (``W_0(x) = conn(u, x)``). Telescoping the distances
gives ``G = sum_{t < l} (d_{t+1} - d_t) * (W_t(b) - W_t(a))`` with ``d_0 = 0``, so
one pass over the neighbours (``l`` scatter-adds each) yields the gain of every
adjacent block in ``O(l)`` -- no ``k x k`` matrix, no quadratic loop over blocks.

Determinism
-----------
Every parallel loop writes only entries owned by its own index and reads state
frozen at the start of the loop; chunk boundaries depend on ``n`` and ``k`` only,
so even floating-point reductions are summed in the same order for any number of
Numba threads. Resolution steps that need an order (prefix selection, capacity
assignment) are sequential passes over the few vertices concerned. Ties are
broken by block id / vertex id, and the only randomness (the weak rebalancer's
choice among equally near blocks) is a hash of ``(vertex, seed)``.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from .common_cpu import distance as _distance
from .common_cpu import level_index as _level_index
from .common_cpu import mix64 as _mix64
from .objective_cpu import level_traffic, pe_loads

# ------------------------------------------------------------------ constants
#: Rebalancing sorts candidate moves approximately into this many gain buckets
#: (Jet / GPU-HeiPa: 50 buckets, loss buckets centred on bucket 25).
NUM_BUCKETS = 50
MID_BUCKET = 25
#: Loss buckets are log-spaced with this ratio (loss per unit of vertex weight).
BUCKET_RATIO = 1.5

#: Jet's "ultra" schedule: 17 refinement passes with these filter ratios.
ULTRA_FILTER_RATIOS = tuple(round(0.85 - 0.05 * i, 2) for i in range(17))

_LOG_RATIO = math.log(BUCKET_RATIO)


def filter_schedule(*, ultra: bool = False, finest: bool = True) -> tuple[float, ...]:
    """Filter ratios of the refinement passes on one level (Jet / GPU-HeiPa).

    ``ultra``: 0.85, 0.80, ..., 0.05 (17 passes). Otherwise one pass, with 0.25 on
    the finest level and 0.75 on coarser ones (GPU-HeiPa's choice; Jet uses 0.25
    for unit edge weights and 0.75 otherwise).
    """
    if ultra:
        return ULTRA_FILTER_RATIOS
    return (0.25,) if finest else (0.75,)


def _num_chunks(n: int, k: int) -> int:
    """Chunks of the parallel loops: a function of ``n`` and ``k`` only.

    Chunks own per-chunk scratch of ``O(k * l)`` entries, so a chunk spans at least
    ``2k`` vertices (zeroing the scratch costs less than the work); independence of
    the thread count keeps float reductions bit-identical across thread counts.
    """
    span = max(2048, 2 * k)
    return max(1, min(-(-n // span), 4096))


# ------------------------------------------------------------------ helpers
def _seed_key(seed: int) -> np.uint64:
    return np.uint64((int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64)


@nb.njit(inline="always", cache=True)
def _gain_bucket(gain, w):
    """Bucket of a rebalancing move: 0 = positive gain, 1 = zero gain, then losses.

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


# ------------------------------------------------------------------ objective
def _traffic(xadj, adjncy, adjwgt, part, prefix, k) -> np.ndarray:
    """Traffic per level (index 0 = inside a block), the objective kernel's own."""
    return level_traffic(xadj, adjncy, adjwgt, part, prefix)


def _cost_of(traffic, dist) -> float:
    """``J = sum_t d_t * traffic[t]`` (traffic[0] stays inside blocks)."""
    return float(sum(float(d) * traffic[t + 1] for t, d in enumerate(dist)))


def _judge(cost, maxw, best_cost, best_maxw, lmax, phi) -> tuple[bool, bool]:
    """Jet's best-partition rule after an iteration: ``(keep, progress)``.

    A balanced partition beats an unbalanced one; among balanced ones the lower cost
    wins, among unbalanced ones the lower max block weight, then the lower cost.
    ``progress`` (the patience counter restarts) needs a cost below ``phi * best`` or
    a lower max block weight while no balanced partition is known. The GPU loop's
    ``loop_control`` (cuda/jet_loop.cu) applies the same rule on the device.
    """
    best_ok = best_maxw <= lmax
    if maxw <= lmax:
        keep = not best_ok or cost < best_cost
        return keep, keep and (not best_ok or cost < phi * best_cost)
    if best_ok:
        return False, False
    keep = maxw < best_maxw or (maxw == best_maxw and cost < best_cost)
    return keep, maxw < best_maxw


def block_weights(part, vwgt, k: int) -> np.ndarray:
    """Total vertex weight per block (int64, length ``k``)."""
    return pe_loads(np.asarray(part), np.asarray(vwgt, dtype=np.int64), int(k))[0]


def cost(xadj, adjncy, adjwgt, part, prefix, dist) -> float:
    """The objective ``J``: every CSR entry ``(u, v)`` adds ``w * D(part[u], part[v])``.

    Both directions of each edge count, so in cut mode (``prefix = [k]``,
    ``dist = [1]``) this is twice the edge cut.
    """
    prefix = np.asarray(prefix, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    part = np.asarray(part, dtype=np.int32)
    traffic = _traffic(xadj, adjncy, np.asarray(adjwgt), part, prefix, int(prefix[-1]))
    return _cost_of(traffic, dist)


# ------------------------------------------------------------------ label propagation
@nb.njit(parallel=True, cache=True)
def _lp_propose(xadj, adjncy, adjwgt, part, k, grp, delta, cut_mode, filter_ratio,
                locked, active, nchunks, dest, gain):
    """First filter of Algorithm 4: best adjacent block of every vertex in ``active``.

    ``grp[t, b] = b // P_t`` (``P_0 = 1``) is the level-t group of block ``b`` (a
    table: integer division is slow in the inner loop), ``delta[t] = d_{t+1} - d_t``.
    Writes ``dest[u]`` (-1: no candidate) and ``gain[u]`` of the vertices ``u`` in
    ``active`` (locked ones get -1). Cut mode: gain in edge weight (``conn(b) - conn(a)``), candidate if
    ``gain >= 0`` or ``-gain < floor(filter_ratio * conn(a))`` (Jet). Distance mode:
    gain of equation 1, candidate if ``gain >= 0`` (GPU-HeiPa).
    """
    n = active.size
    nlev = grp.shape[0]
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        acc = np.zeros((nlev, k))          # acc[t, g]: weight into level-t group g
        seen = np.full(k, -1, dtype=np.int64)  # stamp: block already listed for u
        touched = np.empty(k, dtype=np.int32)
        for i in range(lo, hi):
            u = active[i]
            dest[u] = -1
            gain[u] = 0.0
            if locked[u]:
                continue
            a = part[u]
            # interior vertices (all neighbours at home) have nowhere to go: most
            # vertices of a good partition, so skip them before any scatter work
            boundary = False
            for e in range(xadj[u], xadj[u + 1]):
                if part[adjncy[e]] != a:
                    boundary = True
                    break
            if not boundary:
                continue
            nt = 0
            for e in range(xadj[u], xadj[u + 1]):
                b = part[adjncy[e]]
                w = float(adjwgt[e])
                if seen[b] != u:
                    seen[b] = u
                    touched[nt] = b
                    nt += 1
                if cut_mode:
                    acc[0, b] += w
                else:
                    for t in range(nlev):
                        acc[t, grp[t, b]] += w
            own = acc[0, a]
            best_b = -1
            best_g = 0.0
            for i in range(nt):
                b = touched[i]
                if b == a:
                    continue
                if cut_mode:
                    g = acc[0, b] - own
                else:
                    g = 0.0
                    for t in range(nlev):
                        g += delta[t] * (acc[t, grp[t, b]] - acc[t, grp[t, a]])
                if best_b < 0 or g > best_g or (g == best_g and b < best_b):
                    best_b = b
                    best_g = g
            if best_b >= 0:
                ok = best_g >= 0.0
                if cut_mode and not ok:
                    ok = -best_g < math.floor(filter_ratio * own)
                if ok:
                    dest[u] = best_b
                    gain[u] = best_g
            # clear the scratch entries this vertex used
            for i in range(nt):
                b = touched[i]
                if cut_mode:
                    acc[0, b] = 0.0
                else:
                    for t in range(nlev):
                        acc[t, grp[t, b]] = 0.0


@nb.njit(parallel=True, cache=True)
def _lp_afterburn(xadj, adjncy, adjwgt, part, prefix, dist, cut_mode, dest, gain,
                  nchunks, move):
    """Second filter of Algorithm 4 (the afterburner).

    Candidate ``u`` re-evaluates its gain assuming every candidate neighbour ``v``
    of higher priority (larger first gain; equal gain and ``v < u``) already sits
    in ``dest[v]``; all other neighbours stay put. ``u`` moves when the
    re-evaluated gain is ``>= 0``.
    """
    n = part.size
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        for u in range(lo, hi):
            move[u] = 0
            b = dest[u]
            if b < 0:
                continue
            a = part[u]
            gu = gain[u]
            g2 = 0.0
            for e in range(xadj[u], xadj[u + 1]):
                v = adjncy[e]
                cv = part[v]
                dv = dest[v]
                if dv >= 0 and (gain[v] > gu or (gain[v] == gu and v < u)):
                    cv = dv
                w = float(adjwgt[e])
                if cut_mode:
                    if cv == b:
                        g2 += w
                    elif cv == a:
                        g2 -= w
                else:
                    g2 += w * (_distance(a, cv, prefix, dist) - _distance(b, cv, prefix, dist))
            if g2 >= 0.0:
                move[u] = 1


def _as_float(adjwgt):
    """Gains are float64 anyway: one compiled variant of the gain kernels serves
    integer and float weights (costs stay exact in the weights' own dtype)."""
    return adjwgt if adjwgt.dtype == np.float64 else adjwgt.astype(np.float64)


def _level_tables(prefix, dist):
    """``grp`` and ``delta`` of the group-connectivity gain (module docstring)."""
    div = np.concatenate(([1], prefix[:-1])).astype(np.int64)
    grp = (np.arange(int(prefix[-1]), dtype=np.int64)[None, :] // div[:, None]).astype(np.int32)
    delta = np.diff(np.concatenate(([0.0], dist))).astype(np.float64)
    return grp, delta


def _lp_moves(xadj, adjncy, adjwgt, part, k, prefix, dist, locked, filter_ratio, active=None,
              dest=None, gain=None):
    """Run both LP kernels; return ``(moved vertices, full dest array)``.

    ``active`` (default: every vertex) lists the vertices whose proposal is
    recomputed; the others keep theirs from ``dest``/``gain`` (arrays kept by the
    caller between rounds). A proposal depends only on the blocks of the vertex and
    its neighbours and on its lock, so a caller that lists every vertex for which
    one of these changed gets exactly the result of a full evaluation.
    """
    n = part.size
    cut_mode = prefix.size == 1
    grp, delta = _level_tables(prefix, dist)
    adjwgt = _as_float(adjwgt)
    if active is None:
        active = np.arange(n, dtype=np.int32)
        dest = np.empty(n, dtype=np.int32)
        gain = np.empty(n, dtype=np.float64)
    _lp_propose(xadj, adjncy, adjwgt, part, k, grp, delta, cut_mode, float(filter_ratio),
                locked, active, _num_chunks(active.size, k), dest, gain)
    nchunks = _num_chunks(n, k)
    move = np.empty(n, dtype=np.uint8)
    _lp_afterburn(xadj, adjncy, adjwgt, part, prefix, dist, cut_mode, dest, gain, nchunks, move)
    return np.flatnonzero(move).astype(np.int32), dest


def jet_lp(xadj, adjncy, adjwgt, part, k, prefix, dist, *, locked=None, filter_ratio=0.25):
    """Unconstrained label propagation (paper Algorithm 4 with Jet's filter).

    Parameters
    ----------
    part : int32 array, the current partition (not modified).
    locked : optional bool/uint8 array; locked vertices do not move this round (Jet
        locks the vertices moved by the previous round).
    filter_ratio : Jet's ``c``; only used in cut mode (``len(prefix) == 1``).

    Returns ``(vertices, targets)``: ascending int32 ids of the vertices to move and
    their destination blocks. Balance is ignored.
    """
    xadj, adjncy, adjwgt, _, part, prefix, dist = _prepare(xadj, adjncy, adjwgt, None, part,
                                                           prefix, dist)
    locked = (np.zeros(part.size, dtype=np.uint8) if locked is None
              else np.ascontiguousarray(locked, dtype=np.uint8))
    moves, dest = _lp_moves(xadj, adjncy, adjwgt, part, int(k), prefix, dist, locked, filter_ratio)
    return moves, dest[moves]


# ------------------------------------------------------------------ rebalancing
@nb.njit(parallel=True, cache=True)
def _rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok,
                       fallback, prefix, valid_cum, valid_ids, seed_key, nchunks, dest, bucket):
    """Per-vertex move proposal of the rebalancers (cut-based loss, as GPU-HeiPa).

    A vertex of an overloaded block with ``vwgt < heavy[block]`` proposes the
    best-connected adjacent block ``b`` with ``dest_ok[b]`` (ties: smallest id). The
    gain is ``conn(b) - conn(own)``. Without such a neighbour block it proposes:
    with ``fallback``, a block with ``dest_ok`` from the nearest level group of its
    own block that holds one (hash of vertex and seed picks among them); without,
    ``-2`` ("anywhere", assigned later) -- both with gain ``-conn(own)``.
    ``dest[u] = -1`` marks non-candidates. ``bucket[u]`` is the gain bucket.
    """
    n = part.size
    nlev = prefix.size
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        conn = np.zeros(k)
        seen = np.full(k, -1, dtype=np.int64)
        touched = np.empty(k, dtype=np.int32)
        for u in range(lo, hi):
            dest[u] = -1
            bucket[u] = 0
            a = part[u]
            if bw[a] <= lmax or not vwgt[u] < heavy[a]:
                continue
            nt = 0
            for e in range(xadj[u], xadj[u + 1]):
                b = part[adjncy[e]]
                if seen[b] != u:
                    seen[b] = u
                    touched[nt] = b
                    nt += 1
                conn[b] += float(adjwgt[e])
            own = conn[a]
            best_b = -1
            best_c = 0.0
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
                            h = _mix64(np.uint64(u) ^ seed_key)
                            j = np.int64(h % np.uint64(cnt))
                            best_b = valid_ids[valid_cum[glo] + j]
                            break
                    if best_b < 0:
                        continue  # no block can take anything
                else:
                    best_b = -2
            dest[u] = best_b
            bucket[u] = _gain_bucket(best_c - own, vwgt[u])


@nb.njit(cache=True)
def _select_prefix(part, vwgt, dest, bucket, bw, lmax, k, nbuckets, selected):
    """Per overloaded block, select the candidates that restore its weight.

    Candidates are ordered by (bucket, vertex id); a candidate is selected when the
    weight ordered before it in its block is still below the block's excess
    ``bw - lmax``. Sequential, O(n + overloaded blocks * buckets).
    """
    n = part.size
    slot = np.full(k, -1, dtype=np.int64)
    nover = 0
    for b in range(k):
        if bw[b] > lmax:
            slot[b] = nover
            nover += 1
    wsum = np.zeros(nover * nbuckets, dtype=np.int64)
    for u in range(n):
        if dest[u] != -1:
            wsum[slot[part[u]] * nbuckets + bucket[u]] += vwgt[u]
    before = np.zeros(nover * nbuckets, dtype=np.int64)  # weight of earlier buckets
    excess = np.zeros(nover, dtype=np.int64)
    for b in range(k):
        o = slot[b]
        if o < 0:
            continue
        excess[o] = bw[b] - lmax
        s = 0
        for j in range(nbuckets):
            before[o * nbuckets + j] = s
            s += wsum[o * nbuckets + j]
    running = np.zeros(nover * nbuckets, dtype=np.int64)  # weight earlier in own bucket
    count = 0
    for u in range(n):
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


@nb.njit(cache=True)
def _strong_assign(part, vwgt, dest, bucket, selected, rem, prefix, nbuckets, target):
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


def _weak_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw, seed):
    """Weak rebalancing (paper Algorithm 5): returns ``(vertices, full dest array)``."""
    n = part.size
    adjwgt = _as_float(adjwgt)
    opt = float(bw.sum()) / k
    # Destinations stay below sigma (Jet: 0.99 * Lmax, but at least Lmax - 100) so
    # that a block can take several vertices before it overflows.
    sigma = max(0.99 * lmax, lmax - 100.0)
    dest_ok = (bw < sigma).astype(np.uint8)
    valid_cum = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(dest_ok, out=valid_cum[1:])
    valid_ids = np.flatnonzero(dest_ok).astype(np.int32)
    heavy = 1.5 * (bw - opt)  # Jet: vertices of >= 1.5 (c(block) - c(V)/k) stay
    dest = np.empty(n, dtype=np.int32)
    bucket = np.empty(n, dtype=np.int32)
    _rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok, True,
                       prefix, valid_cum, valid_ids, _seed_key(seed), _num_chunks(n, k),
                       dest, bucket)
    selected = np.empty(n, dtype=np.uint8)
    _select_prefix(part, vwgt, dest, bucket, bw, lmax, k, NUM_BUCKETS, selected)
    return np.flatnonzero(selected).astype(np.int32), dest


def _strong_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw):
    """Strong rebalancing: returns ``(vertices, full target array)``."""
    n = part.size
    adjwgt = _as_float(adjwgt)
    opt = float(bw.sum()) / k
    excess = int(np.maximum(bw - lmax, 0).sum())
    # Fill destinations up to max(opt + 1, 0.99 Lmax) (Jet), which leaves room for
    # the next LP round; use Lmax itself when that cannot absorb the excess.
    limit = min(int(lmax), max(int(math.floor(opt)) + 1, int(math.floor(0.99 * lmax))))
    limits = [limit] if limit < lmax else []
    limits.append(int(lmax))
    target = np.full(n, -1, dtype=np.int32)
    for limit in limits:
        rem = np.where(bw < limit, limit - bw, 0).astype(np.int64)
        if rem.sum() < excess and limit < lmax:
            continue
        max_rem = int(rem.max(initial=0))
        if max_rem == 0:
            continue
        dest_ok = (rem > 0).astype(np.uint8)
        heavy = np.full(k, max_rem + 1, dtype=np.float64)  # only vertices that fit somewhere
        dest = np.empty(n, dtype=np.int32)
        bucket = np.empty(n, dtype=np.int32)
        _rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, k, bw, lmax, heavy, dest_ok, False,
                           prefix, np.zeros(k + 1, dtype=np.int64), np.zeros(0, dtype=np.int32),
                           np.uint64(0), _num_chunks(n, k), dest, bucket)
        selected = np.empty(n, dtype=np.uint8)
        _select_prefix(part, vwgt, dest, bucket, bw, lmax, k, NUM_BUCKETS, selected)
        if _strong_assign(part, vwgt, dest, bucket, selected, rem, prefix, NUM_BUCKETS, target):
            return np.flatnonzero(target >= 0).astype(np.int32), target
    return np.empty(0, dtype=np.int32), target


def rebalance_weak(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, *, seed=0):
    """Jet's weak rebalancing: cheap moves out of overloaded blocks.

    Every vertex of a block heavier than ``lmax`` (and lighter than
    ``1.5 * (c(block) - c(V)/k)``) proposes its best-connected adjacent block below
    ``sigma = max(0.99 Lmax, Lmax - 100)``, else a block below sigma from the
    nearest level group of its block (hash of vertex and ``seed`` among them; in
    cut mode any block). Per block, the lowest-loss proposals (gain buckets, then
    vertex id) covering the excess move. Destinations may end up overloaded.

    Returns ``(vertices, targets)`` as :func:`jet_lp`.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, _ = _prepare(xadj, adjncy, adjwgt, vwgt, part,
                                                           prefix, None)
    bw = block_weights(part, vwgt, k)
    moves, dest = _weak_moves(xadj, adjncy, adjwgt, vwgt, part, int(k), int(lmax), prefix, bw, seed)
    return moves, dest[moves]


def rebalance_strong(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix):
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

    Returns ``(vertices, targets)`` as :func:`jet_lp`.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, _ = _prepare(xadj, adjncy, adjwgt, vwgt, part,
                                                           prefix, None)
    bw = block_weights(part, vwgt, k)
    moves, target = _strong_moves(xadj, adjncy, adjwgt, vwgt, part, int(k), int(lmax), prefix, bw)
    return moves, target[moves]


# ------------------------------------------------------------------ applying moves
@nb.njit(parallel=True, cache=True)
def _move_delta(xadj, adjncy, adjwgt, part, prefix, moves, target, nchunks, out):
    """Traffic change per level caused by moving ``moves`` to ``target`` at once.

    ``target[v] >= 0`` marks moving vertices. An ordered pair with one moving end
    is seen only from that end, so it counts for both directions (factor 2); a
    pair with both ends moving is seen from each end once.
    """
    m = moves.size
    for c in nb.prange(nchunks):
        lo = c * m // nchunks
        hi = (c + 1) * m // nchunks
        for i in range(lo, hi):
            u = moves[i]
            a = part[u]
            b = target[u]
            for e in range(xadj[u], xadj[u + 1]):
                v = adjncy[e]
                old_v = part[v]
                new_v = old_v
                f = 2
                if target[v] >= 0:
                    new_v = target[v]
                    f = 1
                w = adjwgt[e] * f
                lev_old = 0 if a == old_v else _level_index(a, old_v, prefix) + 1
                lev_new = 0 if b == new_v else _level_index(b, new_v, prefix) + 1
                if lev_old != lev_new:
                    out[c, lev_old] -= w
                    out[c, lev_new] += w


@nb.njit(cache=True)
def _mark_dirty(xadj, adjncy, moves, dirty):
    """Flag the moved vertices and their neighbours: their LP proposals are stale."""
    for i in range(moves.size):
        u = moves[i]
        dirty[u] = 1
        for e in range(xadj[u], xadj[u + 1]):
            dirty[adjncy[e]] = 1


@nb.njit(cache=True)
def _commit(moves, target, part, vwgt, bw):
    for i in range(moves.size):
        u = moves[i]
        bw[part[u]] -= vwgt[u]
        bw[target[u]] += vwgt[u]
        part[u] = target[u]


def _apply(xadj, adjncy, adjwgt, vwgt, part, prefix, k, moves, target, bw, traffic):
    """Move ``moves`` to ``target`` in place; update block weights and traffic.

    ``target`` is a full-length array; entries of non-moving vertices must be -1.
    """
    if moves.size == 0:
        return
    nchunks = _num_chunks(moves.size, k)
    out = np.zeros((nchunks, traffic.size), dtype=traffic.dtype)
    _move_delta(xadj, adjncy, adjwgt, part, prefix, moves, target, nchunks, out)
    traffic += out.sum(axis=0)
    _commit(moves, target, part, vwgt, bw)


# ------------------------------------------------------------------ refinement loop
def _prepare(xadj, adjncy, adjwgt, vwgt, part, prefix, dist):
    """Contiguous arrays of the expected dtypes (copies only where needed)."""
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int32)
    adjwgt = np.ascontiguousarray(adjwgt)
    if adjwgt.dtype.kind != "f":
        adjwgt = adjwgt.astype(np.int64, copy=False)
    else:
        adjwgt = adjwgt.astype(np.float64, copy=False)
    if vwgt is not None:
        vwgt = np.ascontiguousarray(vwgt, dtype=np.int64)
    part = np.ascontiguousarray(part, dtype=np.int32)
    prefix = np.ascontiguousarray(prefix, dtype=np.int64)
    if dist is not None:
        dist = np.ascontiguousarray(dist, dtype=np.float64)
        if dist.shape != prefix.shape:
            raise ValueError("prefix and dist must have the same length")
    return xadj, adjncy, adjwgt, vwgt, part, prefix, dist


def jet_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0, incremental=True):
    """Jet refinement loop (paper Algorithm 6). Returns ``(part, cost)``.

    Each iteration runs :func:`jet_lp` when the current partition is balanced
    (max block weight <= ``lmax``), else weak rebalancing (at most ``max_weak``
    times in a row), then strong rebalancing; the moves are applied at once.
    LP locks the vertices it moved until the next LP round.

    The best partition seen is kept: a balanced one beats an unbalanced one;
    among balanced ones the lower cost wins, among unbalanced ones the lower max
    block weight (then the lower cost). The loop stops after ``max_iters``
    iterations without improvement -- a cost below ``phi * best`` (balanced), or
    a lower max block weight while no balanced partition is known -- or as soon
    as an LP round without locks moves nothing (the state is then a fixed point).

    ``part`` is not modified; the result is a new int32 array and its cost ``J``
    (both directions of each edge; ``2 * d_1 * cut`` in cut mode).

    ``incremental`` (default) re-proposes only the vertices whose proposal can have
    changed since the last LP round; ``False`` re-proposes every vertex every round.
    Both give the same result (tested); the first is much faster.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, dist = _prepare(xadj, adjncy, adjwgt, vwgt, part,
                                                              prefix, dist)
    k, lmax = int(k), int(lmax)
    if prefix.size == 0 or int(prefix[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")  # > 1 need not terminate
    n = part.size
    cur = part.copy()
    traffic = _traffic(xadj, adjncy, adjwgt, cur, prefix, k)
    cur_cost = _cost_of(traffic, dist)
    if n == 0 or k == 1:
        return cur, cur_cost
    bw = block_weights(cur, vwgt, k)
    fwgt = _as_float(adjwgt)  # gain kernels; traffic stays in the weights' dtype

    best, best_cost, best_maxw = cur.copy(), cur_cost, int(bw.max())
    locked = np.zeros(n, dtype=np.uint8)
    locked_list = np.empty(0, dtype=np.int32)
    target = np.full(n, -1, dtype=np.int32)
    # LP proposals persist between rounds; only "dirty" vertices (moved, next to a
    # move, or unlocked since their last proposal) are re-proposed: late rounds move
    # few vertices, and a full re-evaluation would cost O(m) each
    dirty = np.ones(n, dtype=np.uint8)
    lp_dest = np.full(n, -1, dtype=np.int32)
    lp_gain = np.zeros(n, dtype=np.float64)
    everyone = np.arange(n, dtype=np.int32)
    it = 0
    weak_runs = 0
    while it < max_iters:
        it += 1
        if bw.max() <= lmax:
            active = np.flatnonzero(dirty).astype(np.int32) if incremental else everyone
            dirty[active] = 0
            moves, dest = _lp_moves(xadj, adjncy, fwgt, cur, k, prefix, dist, locked,
                                    filter_ratio, active, lp_dest, lp_gain)
            had_locks = locked_list.size > 0
            locked[locked_list] = 0       # locks hold for one LP round only
            dirty[locked_list] = 1        # unlocked: their next proposal differs
            locked[moves] = 1
            locked_list = moves
            weak_runs = 0
            if moves.size == 0 and not had_locks:
                break                      # unlocked fixed point: LP would repeat itself
            target[moves] = dest[moves]
        elif weak_runs < max_weak:
            moves, dest = _weak_moves(xadj, adjncy, fwgt, vwgt, cur, k, lmax, prefix, bw, seed)
            target[moves] = dest[moves]
            weak_runs += 1
        else:
            moves, full = _strong_moves(xadj, adjncy, fwgt, vwgt, cur, k, lmax, prefix, bw)
            target[moves] = full[moves]
            weak_runs = 0
        _apply(xadj, adjncy, adjwgt, vwgt, cur, prefix, k, moves, target, bw, traffic)
        target[moves] = -1
        _mark_dirty(xadj, adjncy, moves, dirty)
        cur_cost = _cost_of(traffic, dist)
        maxw = int(bw.max())

        keep, progress = _judge(cur_cost, maxw, best_cost, best_maxw, lmax, phi)
        if progress:
            it = 0
        if keep:
            best[:] = cur
            best_cost, best_maxw = cur_cost, maxw
    if adjwgt.dtype.kind == "f":
        # incremental float updates drift in the last bits: report a fresh sum
        best_cost = _cost_of(_traffic(xadj, adjncy, adjwgt, best, prefix, k), dist)
    return best, best_cost


def ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *,
                 filter_ratios=ULTRA_FILTER_RATIOS, max_iters=12, phi=0.999, max_weak=2, seed=0):
    """Jet's "ultra" refinement: :func:`jet_refine` once per filter ratio, each pass
    continuing from the previous result. Returns ``(part, cost)``.

    The ratios only change the cut-mode filter; in distance mode the passes differ
    only through the locks and rebalancing state they start from.
    """
    result, value = np.ascontiguousarray(part, dtype=np.int32), None
    for ratio in filter_ratios:
        result, value = jet_refine(xadj, adjncy, adjwgt, vwgt, result, k, lmax, prefix, dist,
                                   filter_ratio=ratio, max_iters=max_iters, phi=phi,
                                   max_weak=max_weak, seed=seed)
    if value is None:
        value = cost(xadj, adjncy, adjwgt, result, prefix, dist)
    return result, value
