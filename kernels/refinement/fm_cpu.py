"""k-way Fiduccia-Mattheyses refinement (sequential, boundary-based), CPU only.

Jet's label propagation is parallel but myopic: it only takes moves that pay off
at once (plus a filtered few), so on meshes it stalls in local optima where a
block border needs a staircase of individually useless moves. FM takes the best
move even when its gain is negative, locks the moved vertex, and at the end of a
pass rolls back to the best prefix of moves: hill climbing that never ends worse.

Two flavours share the move queue and the gain function:

* :func:`fm_refine` -- *global* passes: every boundary vertex in one queue, so a pass
  follows the best moves wherever they are on the border.
* :func:`local_fm_refine` -- *localized* searches (KaHIP's multi-try k-way FM): each
  search starts at one boundary vertex and grows only through the neighbours of the
  vertices it moves, so its negative moves stay in one place and can open a staircase
  there; it stops after a few moves without a new best and keeps its best prefix.
  A global pass spreads its stall budget over the whole border instead.

A move is evaluated from the vertex's row, or for vertices of high degree from a
*connectivity cache*: the vertex's edge weight into each of its adjacent blocks, kept up
to date as its neighbours move. A hub of a power-law graph has ~200 adjacent blocks but
~10,000 edges, and every move next to it evaluates it again.

The objective is the hierarchical J of ``prefix``/``dist`` (cut when ``prefix =
[k]``), the same as :mod:`jet_cpu`. Moves never push a block above ``lmax``.
Deterministic: ties are broken by vertex id and block id.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import connectivity_gain, level_tables, on_boundary, scatter_connectivity
from ..objective.objective_cpu import pe_loads


# The connectivity cache ``(coff, cnt, cblk, cw, cc, slot)`` of the vertices of degree
# above CACHE_MIN_DEGREE: vertex ``u``'s entries are ``coff[u] .. coff[u] + cnt[u]``, one
# per adjacent block ``cblk`` (its own block included when it has a neighbour there),
# with the edge weight ``cw`` and the number of edges ``cc`` into it. A vertex has at
# most ``min(deg(u), k)`` adjacent blocks, which bounds its slots. An entry goes when
# its last edge leaves the block (``cc``, not the weight, tells: float weights need not
# sum back to exactly zero). Entries are filled the first time a vertex is evaluated
# (``cnt[u] = -1`` until then; vertices without slots stay so): FM touches the vertices
# near block borders, on meshes a small part of the graph. ``slot`` is per-block scratch.

#: Vertices of at most this degree are evaluated from their row, the others from the
#: cache. Keeping a vertex's entries costs about as much per neighbour move as evaluating
#: it from its row does when its degree is a few times its adjacent blocks: on meshes and
#: road-like graphs the cache would cost more than it saves, on the hubs of power-law
#: graphs and dense coarse levels it saves most of the evaluation. Results do not depend
#: on it (both evaluations give the same gains).
CACHE_MIN_DEGREE = 32


@nb.njit(cache=True, nogil=True)
def _new_cache(xadj, k):
    """An empty connectivity cache for a graph with offsets ``xadj`` and ``k`` blocks;
    without slots (and ``cnt`` empty) when no vertex has a degree above
    :data:`CACHE_MIN_DEGREE`. The entry arrays are not initialised: only filled
    vertices' pages are touched."""
    n = xadj.size - 1
    high = 0
    for u in range(n):
        if xadj[u + 1] - xadj[u] > CACHE_MIN_DEGREE:
            high = n
            break
    coff = np.zeros(high + 1, dtype=np.int64)
    for u in range(high):
        d = xadj[u + 1] - xadj[u]
        coff[u + 1] = coff[u] + (min(d, k) if d > CACHE_MIN_DEGREE else 0)
    return (coff, np.full(high, -1, dtype=np.int32), np.empty(coff[high], dtype=np.int32),
            np.empty(coff[high], dtype=np.float64), np.empty(coff[high], dtype=np.int32),
            np.full(k, -1, dtype=np.int64))


@nb.njit(cache=True, nogil=True)
def _fill(coff, cnt, cblk, cw, cc, slot, xadj, adjncy, adjwgt, part, u):
    """Fill ``u``'s entries from its row (summed in CSR order, like a scan of the row)."""
    base = coff[u]
    c = 0
    for e in range(xadj[u], xadj[u + 1]):
        b = part[adjncy[e]]
        i = slot[b]
        if i < 0:
            i = base + c
            c += 1
            slot[b] = i
            cblk[i] = b
            cw[i] = 0.0
            cc[i] = 0
        cw[i] += adjwgt[e]
        cc[i] += 1
    for i in range(base, base + c):
        slot[cblk[i]] = -1
    cnt[u] = c


@nb.njit(cache=True, nogil=True)
def _cache_move(coff, cnt, cblk, cw, cc, xadj, adjncy, adjwgt, u, a, b):
    """Update the cache for ``u`` moving from block ``a`` to ``b``: each filled
    neighbour's edge to ``u`` leaves its entry for ``a`` and joins (or opens) its entry
    for ``b`` (a neighbour filled later reads the new block from its row)."""
    for e in range(xadj[u], xadj[u + 1]):
        v = adjncy[e]
        if cnt[v] < 0:
            continue
        w = adjwgt[e]
        base = coff[v]
        end = base + cnt[v]
        for i in range(base, end):
            if cblk[i] == a:
                cc[i] -= 1
                if cc[i] == 0:  # the last edge into a: the last entry takes its slot
                    end -= 1
                    cblk[i] = cblk[end]
                    cw[i] = cw[end]
                    cc[i] = cc[end]
                    cnt[v] -= 1
                else:
                    cw[i] -= w
                break
        found = False
        for i in range(base, end):
            if cblk[i] == b:
                cw[i] += w
                cc[i] += 1
                found = True
                break
        if not found:
            cblk[end] = b
            cw[end] = w
            cc[end] = 1
            cnt[v] += 1


@nb.njit(inline="always", cache=True)
def _pick(u, blocks, lo, hi, vwgt, part, bw, lmax, grp, delta, acc):
    """The best block with room among ``blocks[lo:hi]`` for ``u`` (ties: the lower
    block), ``(b, gain)`` with ``b = -1`` when none, from ``u``'s group connectivity
    ``acc``; leaves the entries of ``acc`` those blocks used zero."""
    a = part[u]
    best_b = -1
    best_g = -np.inf
    for i in range(lo, hi):
        b = blocks[i]
        if b == a or bw[b] + vwgt[u] > lmax:
            continue
        g = connectivity_gain(acc, grp, delta, False, a, b, 0.0)
        if g > best_g or (g == best_g and b < best_b):
            best_g = g
            best_b = b
    for i in range(lo, hi):
        b = blocks[i]
        for t in range(grp.shape[0]):
            acc[t, grp[t, b]] = 0.0
    return best_b, best_g


@nb.njit(cache=True, nogil=True)
def _row_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta, scratch):
    """Best destination of ``u`` among its adjacent blocks with room; ``(b, gain)``,
    ``b = -1`` when none. The gain is J's change (one direction of each edge) from the
    group connectivity (:func:`.common_cpu.connectivity_gain`), summed from ``u``'s row:
    ``O(deg(u) * levels)``. ``scratch = (acc, seen, touched)``: ``acc`` is left all
    zero and ``seen`` all ``-1``, so a vertex can be evaluated again."""
    acc, seen, touched = scratch
    nt = scatter_connectivity(xadj, adjncy, adjwgt, part, grp, False, u, acc, seen, touched)
    for i in range(nt):
        seen[touched[i]] = -1
    return _pick(u, touched, 0, nt, vwgt, part, bw, lmax, grp, delta, acc)


@nb.njit(cache=True, nogil=True)
def _cached_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta, acc, coff, cnt,
                 cblk, cw, cc, slot):
    """:func:`_row_move` from ``u``'s cache entries (filled now if they are not yet):
    ``O(adjacent blocks * levels)``. Takes the cache's arrays, not its tuple (see
    :func:`_search`)."""
    if cnt[u] < 0:
        _fill(coff, cnt, cblk, cw, cc, slot, xadj, adjncy, adjwgt, part, u)
    lo = coff[u]
    hi = lo + cnt[u]
    for i in range(lo, hi):
        b = cblk[i]
        for t in range(grp.shape[0]):
            acc[t, grp[t, b]] += cw[i]
    return _pick(u, cblk, lo, hi, vwgt, part, bw, lmax, grp, delta, acc)


@nb.njit(cache=True, nogil=True)
def _new_scratch(grp):
    """The ``scratch`` of :func:`_row_move` for ``k = grp.shape[1]`` blocks."""
    k = grp.shape[1]
    return (np.zeros((grp.shape[0], k), dtype=np.float64), np.full(k, -1, dtype=np.int64),
            np.empty(k, dtype=np.int64))


# The move queue: a max-heap of (gain, vertex) entries, larger gain first and the smaller
# vertex id on equal gains. The order is total, so the pops (and FM's moves) are the
# same for any correct heap; this one is 4-ary with each entry's gain and vertex side by
# side (``heap[i] = (gain, vertex)``), so a level of the sift-down reads one cache line.
# Entries go stale (FM re-checks a popped vertex) rather than being updated in place.
@nb.njit(inline="always", cache=True)
def _pops_first(gain, vertex, other_gain, other_vertex):
    return gain > other_gain or (gain == other_gain and vertex < other_vertex)


@nb.njit(cache=True, nogil=True)
def queue_push(heap, size, gain, vertex):
    """Add ``(gain, vertex)`` to the move queue ``heap[:size]`` (rows ``(gain, vertex)``;
    ``heap`` has room for one more); returns the new size."""
    v = float(vertex)  # exact: vertex ids are below 2^53
    i = size
    while i > 0:
        p = (i - 1) >> 2
        if not _pops_first(gain, v, heap[p, 0], heap[p, 1]):
            break
        heap[i, 0] = heap[p, 0]
        heap[i, 1] = heap[p, 1]
        i = p
    heap[i, 0] = gain
    heap[i, 1] = v
    return size + 1


@nb.njit(cache=True, nogil=True)
def queue_pop(heap, size):
    """Remove the first entry of the move queue ``heap[:size]`` (the largest gain, then
    the smallest vertex); returns ``(gain, vertex, new size)``."""
    gain = heap[0, 0]
    vertex = np.int64(heap[0, 1])
    size -= 1
    last_g = heap[size, 0]
    last_v = heap[size, 1]
    i = 0
    while True:
        first = 4 * i + 1
        if first >= size:
            break
        m = first
        for j in range(first + 1, min(first + 4, size)):
            if _pops_first(heap[j, 0], heap[j, 1], heap[m, 0], heap[m, 1]):
                m = j
        if not _pops_first(heap[m, 0], heap[m, 1], last_g, last_v):
            break
        heap[i, 0] = heap[m, 0]
        heap[i, 1] = heap[m, 1]
        i = m
    heap[i, 0] = last_g
    heap[i, 1] = last_v
    return gain, vertex, size


@nb.njit(cache=True, nogil=True)
def _search(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta, heap, size, search, mark,
            done, max_stall, budget, moved_v, moved_from, cache, scratch):
    """The move loop of both flavours, from the queue ``heap[:size]``; returns
    ``(gain, kept, work)``: the best prefix's gain, the vertices it moved (the first
    ``kept`` entries of ``moved_v``) and its work, the degrees of the vertices it
    evaluated (the edges an evaluation from scratch would scan: the effort limits are
    counted in them, whatever the cache saves).

    Pops the best entry, moves its vertex to its best block even at a loss, marks it
    (``mark[u] = search``: a vertex moves once per search) and queues its neighbours
    that are neither marked nor ``done``; stops after ``max_stall`` moves without a new
    best, or once its work reaches ``budget``, then rolls back the moves after the best
    prefix. Every move, and every rollback, updates the connectivity ``cache``.

    Moves are evaluated by :func:`_row_move` or :func:`_cached_move` by degree, branching
    at each call site with the cache's arrays unpacked once: a function that receives
    the cache, as a tuple or as arrays, even one inlined here or one that reads it only
    for high-degree vertices, pays reference counting on its arrays at every
    evaluation: on meshes, where every evaluation reads the row, that made passes
    slower than without the cache.
    """
    coff, cnt, cblk, cw, cc, slot = cache
    cached = coff[-1] > 0  # a vertex has slots: moves must update the cache
    cap = heap.shape[0]
    nmoves = 0
    cum = 0.0
    best_cum = 0.0
    best_len = 0
    stall = 0
    work = 0
    while size > 0 and stall < max_stall and work < budget:
        key, u, size = queue_pop(heap, size)
        if mark[u] == search or done[u]:
            continue
        work += xadj[u + 1] - xadj[u]
        if xadj[u + 1] - xadj[u] > CACHE_MIN_DEGREE:
            b, g = _cached_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                scratch[0], coff, cnt, cblk, cw, cc, slot)
        else:
            b, g = _row_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                             scratch)
        if b < 0:
            continue
        if g < key:
            if size + 1 < cap:
                size = queue_push(heap, size, g, u)  # stale key: requeue with the true gain
            continue
        a = part[u]
        part[u] = b
        bw[a] -= vwgt[u]
        bw[b] += vwgt[u]
        if cached:
            _cache_move(coff, cnt, cblk, cw, cc, xadj, adjncy, adjwgt, u, a, b)
        mark[u] = search
        moved_v[nmoves] = u
        moved_from[nmoves] = a
        nmoves += 1
        cum += g
        if cum > best_cum + 1e-9:
            best_cum = cum
            best_len = nmoves
            stall = 0
        else:
            stall += 1
        for e in range(xadj[u], xadj[u + 1]):
            v = np.int64(adjncy[e])  # one vertex type for the evaluations and queue_push
            if mark[v] == search or done[v] or size + 1 >= cap:
                continue
            work += xadj[v + 1] - xadj[v]
            if xadj[v + 1] - xadj[v] > CACHE_MIN_DEGREE:
                bv, gv = _cached_move(v, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                      scratch[0], coff, cnt, cblk, cw, cc, slot)
            else:
                bv, gv = _row_move(v, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                   scratch)
            if bv >= 0:
                size = queue_push(heap, size, gv, v)
    for i in range(nmoves - 1, best_len - 1, -1):  # roll back past the best prefix
        u = moved_v[i]
        b = part[u]
        a = moved_from[i]
        part[u] = a
        bw[b] -= vwgt[u]
        bw[a] += vwgt[u]
        if cached:
            _cache_move(coff, cnt, cblk, cw, cc, xadj, adjncy, adjwgt, u, b, a)
    return best_cum, best_len, work


@nb.njit(cache=True, nogil=True)
def _fm_pass(xadj, adjncy, adjwgt, vwgt, part, k, lmax, grp, delta, max_stall, budget, cache):
    """One global pass: a single search whose queue starts with every boundary vertex.
    Returns ``(gain, work)`` (:func:`_search`); ``cache`` is ``part``'s and stays so."""
    n = part.size
    bw = np.zeros(k, dtype=np.int64)
    for u in range(n):
        bw[part[u]] += vwgt[u]
    scratch = _new_scratch(grp)
    coff, cnt, cblk, cw, cc, slot = cache
    cap = 4 * xadj[n] + n + 16  # every push is a vertex or a neighbour update
    heap = np.empty((cap, 2), dtype=np.float64)
    size = np.int64(0)  # not a literal 0: callees compile once, for int64
    for u in range(n):
        if on_boundary(xadj, adjncy, part, u, part[u]):
            if xadj[u + 1] - xadj[u] > CACHE_MIN_DEGREE:
                b, g = _cached_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                    scratch[0], coff, cnt, cblk, cw, cc, slot)
            else:
                b, g = _row_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                 scratch)
            if b >= 0:
                size = queue_push(heap, size, g, u)
    mark = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=np.uint8)
    gain, _, work = _search(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta, heap, size,
                            np.int64(1), mark, done, max_stall, budget,
                            np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), cache,
                            scratch)
    return gain, work


def _kernel_inputs(adjwgt, prefix, dist):
    """Float edge weights and the gain tables ``(grp, delta)`` of the hierarchy."""
    return (np.asarray(adjwgt, dtype=np.float64), *level_tables(prefix, dist))


def _edge_budget(max_work: float | None, xadj) -> int:
    """``max_work`` times the directed edges, as work (``None``: no cap)."""
    if max_work is None:
        return np.iinfo(np.int64).max
    return int(max_work * max(int(xadj[-1]), 1))


def fm_refine(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
              max_passes: int = 4, max_stall: int | None = None, min_gain: float = 0.0,
              max_work: float | None = None) -> float:
    """Run FM passes on ``part`` (int32, modified in place) until a pass gains nothing.

    ``max_stall`` moves without a new best end a pass (default ``max(50, n/100)``);
    a pass that gains no more than ``min_gain`` ends the refinement. ``max_work`` caps
    the passes' work together, in multiples of the directed edges (``None``: no cap):
    the degrees of the vertices they evaluate, the edges that evaluations from scratch
    would scan. The pass that reaches it stops there and is the last: every move
    re-evaluates the mover's neighbours, so a pass's work is about the sum of
    ``deg(u) * deg(v)`` over the edges it touches, which hubs of power-law graphs make
    quadratic (the connectivity cache makes that work cheaper, not smaller). A move's
    gain counts one direction of each of u's edges; J counts both directions, so J
    decreases by exactly twice the returned value.
    """
    n = part.size
    if max_stall is None:
        max_stall = max(50, n // 100)
    w, grp, delta = _kernel_inputs(adjwgt, prefix, dist)
    budget = _edge_budget(max_work, xadj)
    cache = _new_cache(xadj, int(k))
    total = 0.0
    for _ in range(max_passes):
        g, work = _fm_pass(xadj, adjncy, w, vwgt, part, int(k), int(lmax), grp, delta,
                           int(max_stall), budget, cache)
        total += g
        budget -= work
        if g <= max(min_gain, 1e-9) or budget <= 0:
            break
    return total


@nb.njit(cache=True, nogil=True)
def _local_searches(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta, max_stall, done,
                    mark, heap, moved_v, moved_from, cache, scratch, budget):
    """One round of localized FM: a search (:func:`_search`) from every boundary vertex,
    by ascending id, that no kept move of this round has touched yet, until the
    searches' work reaches ``budget``. Returns ``(gain, work)``. The moves a search
    keeps lock their vertices for the rest of the round (``done``)."""
    total = 0.0
    search = 0
    work = 0
    coff, cnt, cblk, cw, cc, slot = cache
    for s in range(part.size):
        if work >= budget:
            break
        if done[s] or not on_boundary(xadj, adjncy, part, s, part[s]):
            continue
        work += xadj[s + 1] - xadj[s]
        if xadj[s + 1] - xadj[s] > CACHE_MIN_DEGREE:
            b, g = _cached_move(s, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                scratch[0], coff, cnt, cblk, cw, cc, slot)
        else:
            b, g = _row_move(s, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                             scratch)
        if b < 0:
            continue
        search += 1
        size = queue_push(heap, np.int64(0), g, s)
        gain, kept, scanned = _search(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, grp, delta,
                                      heap, size, search, mark, done, max_stall, budget - work,
                                      moved_v, moved_from, cache, scratch)
        work += scanned
        for i in range(kept):
            done[moved_v[i]] = 1
        total += gain
    return total, work


#: A localized search's queue holds at most this many entries (a full queue takes no
#: more pushes; the search goes on with what it holds).
LOCAL_QUEUE_CAP = 1 << 20


def local_fm_refine(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
                    max_stall: int = 10, max_rounds: int = 1, min_gain: float = 0.0,
                    max_work: float | None = None) -> float:
    """Localized FM (module docstring) on ``part`` (int32, modified in place); returns
    the gain, one direction of each edge: J decreases by exactly twice the value.

    ``max_stall`` moves without a new best end a search; rounds repeat (each from every
    boundary vertex again) until ``max_rounds`` or a round gains no more than
    ``min_gain``. ``max_work`` caps the searches' work (:func:`fm_refine`), in multiples
    of the graph's directed edges (all rounds together; ``None``: no cap): a search's
    work is about ``max_stall`` times its vertices' squared degree, so on dense graphs
    the searches would otherwise cost many times the rest of a level's refinement.
    Blocks stay within ``lmax``; the result depends only on the input.
    """
    n = part.size
    if n == 0 or k <= 1:
        return 0.0
    w, grp, delta = _kernel_inputs(adjwgt, prefix, dist)
    vw = np.ascontiguousarray(vwgt, dtype=np.int64)
    bw = pe_loads(part, vw, int(k))[0]
    mark = np.zeros(n, dtype=np.int64)
    heap = np.empty((min(int(xadj[n]) + n + 16, LOCAL_QUEUE_CAP), 2), dtype=np.float64)
    moved_v = np.empty(n, dtype=np.int64)
    moved_from = np.empty(n, dtype=np.int64)
    cache = _new_cache(xadj, int(k))
    scratch = _new_scratch(grp)
    budget = _edge_budget(max_work, xadj)
    total = 0.0
    for _ in range(max_rounds):
        done = np.zeros(n, dtype=np.uint8)
        mark[:] = 0
        g, work = _local_searches(xadj, adjncy, w, vw, part, bw, int(lmax), grp, delta,
                                  int(max_stall), done, mark, heap, moved_v, moved_from, cache,
                                  scratch, budget)
        total += g
        budget -= work
        if g <= max(min_gain, 1e-9) or budget <= 0:
            break
    return total
